"""The peer data plane's messages (KV between agents): registered in transport/messages.py, which re-exports them.

    agent A DEALER (routing id = A's node id) ──KVChunk + 1 tensor frame──► agent B ROUTER (B's data endpoint)
    agent A DEALER ◄──KVAck per chunk (ok, or refused with a code)──────────  agent B ROUTER

The protocol (chunking, window, checks) is transport/kv_transfer.py; the sockets' owner agent/kv_data_plane.py.
MigrateRequest and MigrationDone go between the control plane and the source agent.
"""

from __future__ import annotations

import msgspec

from transport.envelope import Envelope, TensorRef


class KVWireLayout(msgspec.Struct, frozen=True, kw_only=True):
    """The shape of a transfer's KV: ``[num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]``
    (backends/kv_layout.py), C-contiguous, in ``dtype`` (a torch dtype name: "bfloat16", "float16", "float32")."""

    num_layers: int
    num_blocks: int
    block_size: int
    num_kv_heads: int
    head_dim: int
    dtype: str


class KVChunk(Envelope, kw_only=True):
    """One chunk of a KV transfer: bytes [chunk_index * chunk_bytes, +len) of the transfer's contiguous array,
    in tensor frame 0. ``request_id`` (envelope) is the request the KV belongs to."""

    transfer_id: str
    block_ids: list[int]  # the sender's block ids, in the order of the array's block axis
    layout: KVWireLayout
    chunk_index: int
    num_chunks: int
    chunk_bytes: int  # every chunk but the last carries exactly this many bytes
    checksum: int  # xxh3_64 of this chunk's bytes
    tensor: TensorRef  # dtype "uint8", shape (len,), frame_index 0
    purpose: str = ""  # "": a migration's KV; "store": hold it for the sender (remote tier); "return": held KV back
    lora_id: int = 0  # the LoRA adapter the KV was computed under (engine/lora.py's id: every node's); 0: none


class KVAck(Envelope, kw_only=True):
    """Receiver → sender, per chunk: taken (``ok``), or the transfer refused (``code`` says why)."""

    transfer_id: str
    chunk_index: int
    ok: bool
    code: str = ""  # transport/kv_transfer.py KVRefusal value when refused
    message: str = ""


class MigrateRequest(Envelope, kw_only=True):
    """Control plane → the request's node: move it (``request_id``), KV and all, to ``target_node_id`` whose data
    endpoint is ``target_data_endpoint``; answered with a MigrationDone."""

    target_node_id: str
    target_data_endpoint: str
    reason: str = "rebalance"  # "drain" | "rebalance" | "split"


class MigrationDone(Envelope, kw_only=True):
    """Source agent → control plane: the request left this node (every chunk it produced here was sent before
    this). ``ok``: its KV reached the target (resume it there: it finds the KV in its prefix cache); else the
    request resumes elsewhere by re-prefill. ``num_tokens``: prompt + output at the move; ``kv_bytes`` moved."""

    node_id: str
    target_node_id: str
    ok: bool
    reason: str = ""
    message: str = ""
    num_tokens: int = 0
    kv_bytes: int = 0
    transfer_s: float = 0.0
    left: bool = True  # False: the request never left the source (not migratable there): nothing to resume


class KVStoreCommand(Envelope, kw_only=True):
    """The remote KV tier (agent/kv_remote_swap.py), over the data sockets. Owner → holder: "fetch" (send the KV
    held for ``request_id`` back to ``reply_endpoint`` as a "return" transfer) or "drop" (forget it). Holder →
    owner: "missing" (nothing held under that id: the owner's request recomputes)."""

    op: str  # "fetch" | "drop" | "missing"
    reply_endpoint: str = ""
