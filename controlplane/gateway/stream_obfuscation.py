"""OpenAI's stream obfuscation (``stream_options.include_obfuscation``): a streamed event carries an ``obfuscation``
field of random characters that brings its JSON to a multiple of ``BUCKET_BYTES``, so an observer of the encrypted
stream cannot read each token's length from each event's size (the side channel of "Whisper Leak", Microsoft, 2025:
a conversation's topic told from the sizes and timing of its streamed tokens). Its timing is not hidden.

Which events: every data event of a chat or completion stream; the Responses API's ``*.delta`` events. Asked per
request (``include_obfuscation: true``); the server's default (``zoo controlplane --stream-obfuscation``, off as vLLM
has none; OpenAI's is on) for a request that does not say. The characters are URL-safe base64 from ``secrets``: a
fresh draw per event, no escaping, one byte each.
"""

from __future__ import annotations

import secrets

import msgspec

BUCKET_BYTES = 64  # an event's JSON is padded to a multiple of this: tokens up to ~40 bytes all look alike
_FIELD_BYTES = len(b',"obfuscation":""')  # what the field adds besides its characters, after an object's last member


def obfuscates(args, server_default: bool) -> bool:
    """Whether a request's stream is padded (``args``: its GenerateArgs): its ``include_obfuscation`` when it says,
    else the server's default; a whole reply never."""
    return args.stream and (server_default if args.obfuscation is None else args.obfuscation)


def obfuscated_json(payload: dict) -> bytes:
    """``payload`` (an object with at least one member) as JSON with an ``obfuscation`` field whose length makes the
    whole a multiple of ``BUCKET_BYTES``."""
    size = len(msgspec.json.encode(payload)) + _FIELD_BYTES
    pad = -size % BUCKET_BYTES
    return msgspec.json.encode({**payload, "obfuscation": secrets.token_urlsafe(pad)[:pad]})
