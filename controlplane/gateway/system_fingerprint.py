"""A reply's ``system_fingerprint`` (OpenAI's field; vLLM's ``--fingerprint-mode``): which backend configuration
sampled it, so a client that fixes ``seed`` can tell when that changed. In a mismatched fleet it names the node's
configuration, not the fleet's: each node's hello carries a digest of what decides its tokens
(agent/serving_digest.py), and nodes alike (same model, backend, device, numerics) share a fingerprint.

Modes (``--fingerprint-mode``):
    full    ``zoo-<backend>-<gpu type>-<digest8>``, e.g. ``zoo-torch-h100-3f2a9c1e`` (the default)
    hash    ``zoo-<digest8>``
    custom  ``--fingerprint-value``, whatever served the reply
    none    null

A reply whose choices ran on nodes of different fingerprints, or on a node that sent no digest (an older agent),
has none (null): there is no one configuration to name. A node that left is remembered (its last fingerprint, for
up to ``MAX_REMEMBERED_NODES`` nodes), so a reply finished as its node leaves still carries one.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from transport.messages import NodeHello

FINGERPRINT_MODES = ("full", "hash", "custom", "none")
MAX_REMEMBERED_NODES = 4096
MAX_CUSTOM_CHARS = 256
_DIGEST = re.compile(r"[0-9a-f]{8,64}")
_UNSAFE = re.compile(r"[^a-z0-9.]+")


@dataclass(frozen=True, slots=True)
class FingerprintConfig:
    mode: str = "full"
    value: str | None = None  # the fingerprint of mode "custom"

    def __post_init__(self) -> None:
        if self.mode not in FINGERPRINT_MODES:
            raise ValueError(f"--fingerprint-mode must be one of {', '.join(FINGERPRINT_MODES)}, got {self.mode!r}")
        if (self.mode == "custom") != (self.value is not None):
            raise ValueError("--fingerprint-value goes with --fingerprint-mode custom, and it needs one")
        if self.value is not None and not 0 < len(self.value) <= MAX_CUSTOM_CHARS:
            raise ValueError(f"--fingerprint-value must be 1..{MAX_CUSTOM_CHARS} characters")


def render(config: FingerprintConfig, hello: NodeHello) -> str | None:
    """The fingerprint of replies ``hello``'s node serves (None: mode none, or the node sent no usable digest)."""
    if config.mode == "custom":
        return config.value
    digest = hello.config_digest
    if config.mode == "none" or not _DIGEST.fullmatch(digest):
        return None
    if config.mode == "hash":
        return f"zoo-{digest[:8]}"
    return f"zoo-{_label(hello.backend)}-{_label(hello.hardware.gpu_type)}-{digest[:8]}"


def _label(text: str) -> str:
    """A peer's string as a short lowercase label: letters, digits and dots, runs of anything else one '-'."""
    return _UNSAFE.sub("-", text.lower()).strip("-")[:24] or "unknown"


class SystemFingerprints:
    """node id → its fingerprint, from the control plane's live hellos (``hello_of``: None for a node it does not
    hold), else the last one seen."""

    def __init__(self, config: FingerprintConfig, hello_of: Callable[[str], NodeHello | None] | None) -> None:
        self.config = config
        self._hello_of = hello_of
        self._seen: OrderedDict[str, str | None] = OrderedDict()

    def of_node(self, node_id: str) -> str | None:
        if self.config.mode == "custom":
            return self.config.value
        hello = self._hello_of(node_id) if self._hello_of is not None and node_id else None
        if hello is None:
            return self._seen.get(node_id)
        fingerprint = self._seen[node_id] = render(self.config, hello)
        self._seen.move_to_end(node_id)
        if len(self._seen) > MAX_REMEMBERED_NODES:
            self._seen.popitem(last=False)
        return fingerprint
