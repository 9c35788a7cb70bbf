"""The frame every message shares: the protocol version, the type byte, the envelope fields, tensor references and
error codes (transport/messages.py has the messages, and re-exports these; transport/codec.py frames them)."""

from __future__ import annotations

import enum

import msgspec

PROTOCOL_VERSION = 1
MAX_PAYLOAD_BYTES = 8 * 1024 * 1024  # a payload larger than this is rejected unread
MAX_TENSOR_BYTES = 512 * 1024 * 1024


class MsgType(enum.IntEnum):
    """The one-byte type frame."""

    NODE_HELLO = 1
    WELCOME = 2
    HEARTBEAT = 3
    LOAD_REPORT = 4
    NODE_LEAVE = 5
    NODE_DRAIN = 6
    RESET_PREFIX_CACHE = 7
    KV_EVENTS = 8
    PROFILE_CONTROL = 9  # ProfileControl: POST /start_profile, /stop_profile to a node and its answer
    SLEEP_CONTROL = 16  # SleepControl: POST /sleep, /wake_up to a node and its answer
    GENERATE = 10
    TOKENS = 11
    TOKEN_CHUNKS = 15  # TokenChunks: an agent's chunks of one engine pass in one message
    CANCEL = 12
    ERROR = 13
    CLIENT_GENERATE = 14
    PING = 20
    PONG = 21
    KV_BLOCKS = 30
    FLEET_STATS = 40
    NODE_TELEMETRY = 41
    PROBE_SNAPSHOT = 42
    KV_CHUNK = 31
    KV_ACK = 32
    MIGRATE = 33
    MIGRATION_DONE = 34
    DRAFT_PROPOSE = 50
    DRAFT_REPLY = 51
    KV_STORE = 37  # KVStoreCommand: the remote KV tier (agent/kv_remote_swap.py)
    SPEC_PAIR = 52


class Envelope(msgspec.Struct, kw_only=True):
    """Fields every message carries."""

    v: int = PROTOCOL_VERSION
    request_id: str = ""
    sent_ns: int = 0


class TensorRef(msgspec.Struct, frozen=True):
    """A tensor carried zero-copy in extra frame ``frame_index`` (0 = first frame after the payload)."""

    dtype: str  # numpy dtype name, e.g. "float32", "bfloat16" travels as "uint16" + a note in the owner message
    shape: tuple[int, ...]
    frame_index: int


class ErrorCode(enum.StrEnum):
    MALFORMED = "malformed"  # frames or payload could not be decoded
    OVERSIZED = "oversized"
    UNKNOWN_TYPE = "unknown_type"
    WRONG_VERSION = "wrong_version"
    INVALID_REQUEST = "invalid_request"  # well-formed, but a field is wrong (e.g. bad sampling parameter)
    PROMPT_TOO_LONG = "prompt_too_long"
    UNKNOWN_MODEL = "unknown_model"
    OVERLOADED = "overloaded"  # admission control refused; retry_after_s says when to retry
    NO_NODE = "no_node"  # no live node can serve the request
    NODE_FAILED = "node_failed"  # the serving node died or left mid-request
    CANCELLED = "cancelled"
    INTERNAL = "internal"
