"""Every message that crosses a socket in Silicon Zoo: msgspec structs, one module, one version.

Frames of one ZeroMQ message (after any ROUTER identity frames)::

    [ type: 1 byte ][ payload: msgpack of the struct ][ tensor frame 0 ][ tensor frame 1 ] ...

The payload of every struct starts with the envelope fields ``v`` (protocol version),
``request_id`` and ``sent_ns`` (``time.monotonic_ns()`` of the sender at send time: CLOCK_MONOTONIC
is one clock for every process of a host, so same-host hop latency is ``recv_ns - sent_ns``).
Tensors never go inside the payload: a ``TensorRef`` names the extra frame that carries the raw bytes.

Who sends what (socket roles are in transport/sockets.py)::

    agent ──NodeHello/Heartbeat/LoadReport/TokenChunk/ErrorReply/NodeDrain/NodeLeave──► control plane (ROUTER)
    agent ◄──Welcome/GenerateRequest/CancelRequest/Ping/NodeDrain─────────────────────  control plane
    client ──ClientGenerate/CancelRequest/Ping/NodeDrain──► control plane (ROUTER)
    client ◄──TokenChunk/ErrorReply/Pong/NodeDrain──────────  control plane
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from engine.sampling_params import SamplingParams

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
    GENERATE = 10
    TOKENS = 11
    CANCEL = 12
    ERROR = 13
    CLIENT_GENERATE = 14
    PING = 20
    PONG = 21
    KV_BLOCKS = 30
    FLEET_STATS = 40
    NODE_TELEMETRY = 41
    PROBE_SNAPSHOT = 42


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


# --------------------------------------------------------------------------- node life cycle


class HardwareInfo(msgspec.Struct, frozen=True):
    """What a node's device can do. Figures are datasheet values on a GPU, measured on a CPU."""

    device_name: str  # "NVIDIA H100 80GB HBM3", "cpu: AMD EPYC (2 threads)"
    gpu_type: str  # short class name used for cells and labels: "H100", "A100-40GB", "L4", "cpu"
    compute_capability: str | None  # "9.0"; None on a CPU
    memory_gib: float
    memory_bandwidth_gbps: float  # GB/s
    peak_tflops: float  # dense bf16 (fp32 on a CPU)
    source: str  # "gpu-table", "measured", "profile:<name>"


class KVInfo(msgspec.Struct, frozen=True):
    num_device_blocks: int
    num_host_blocks: int
    block_size: int
    bytes_per_block: int


class NodeHello(Envelope, kw_only=True):
    """Agent → control plane on connect (and again after a restart): who I am, what I can do."""

    node_id: str
    model: str  # served model name, e.g. "SmolLM2-135M-Instruct"
    backend: str  # "torch" | "jax" | "sim"
    hardware: HardwareInfo
    kv: KVInfo
    max_model_len: int
    power_score: float  # relative serving power (see backends/gpu_table.py); higher is stronger
    cell: str = "default"
    pid: int = 0
    # measured at start-up (agent/node_core.py ``profile``), so a new node is priced by measurement; 0: not measured
    prefill_tok_per_s: float = 0.0
    decode_step_ms: float = 0.0
    max_loras: int = 0  # LoRA adapters one step can serve (device slots); 0 = the base model only


class Welcome(Envelope, kw_only=True):
    node_id: str
    heartbeat_interval_s: float
    report_interval_s: float


class Heartbeat(Envelope, kw_only=True):
    node_id: str


class LoadReport(Envelope, kw_only=True):
    """Agent → control plane, several times a second: the node's load and its measured speed."""

    node_id: str
    num_running: int
    num_waiting: int
    num_swapped: int
    kv_usage: float  # 0..1 of device blocks in use
    num_free_device_blocks: int
    queued_prefill_tokens: int  # prompt tokens admitted or waiting whose KV is not computed yet
    decode_batch_size: int  # requests in the decode phase
    recent_step_ms: list[float]  # step times since the last report
    prefill_tok_per_s: float  # measured, recent (0 until measured)
    decode_step_ms: float  # measured mean time of a decode step at the current batch (0 until measured)
    num_preemptions_total: int
    num_requests_finished_total: int
    prefix_cache_hit_rate: float  # 0..1 of looked-up prompt tokens found cached
    # GenerateRequests the node has taken in (accepted or refused): the router counts the ones routed after
    # them as not yet in this report; -1: not reported (every routed request is taken as reported)
    num_requests_received_total: int = -1
    # LoRA adapters by name: in device slots now (most recently used last), and those of running and of
    # waiting requests (vLLM's vllm:lora_requests_info)
    lora_resident: list[str] = []
    lora_running: list[str] = []
    lora_waiting: list[str] = []


class NodeLeave(Envelope, kw_only=True):
    node_id: str
    reason: str


class NodeDrain(Envelope, kw_only=True):
    """Drain a node: the control plane routes nothing new to it; its requests finish there, and those
    still there when it leaves resume on other nodes.

    agent → control plane: the agent drains (SIGTERM) and leaves once it is empty (or at its drain timeout).
    client → control plane (`zoo drain NODE`): drain that node; the answer is a NodeDrain naming it, with
        ``num_inflight`` its requests then, or an ErrorReply for an unknown node.
    control plane → agent: you are drained (the agent announces it again when it joins a new control plane).
    """

    node_id: str
    reason: str = ""
    num_inflight: int = 0


# --------------------------------------------------------------------------- requests


class ChatMessage(msgspec.Struct, frozen=True):
    role: str
    content: str


class ClientGenerate(Envelope, kw_only=True):
    """Client → control plane: exactly one of ``prompt``, ``messages``, ``prompt_token_ids``."""

    model: str | None = None  # None = the fleet's default model
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    prompt_token_ids: list[int] | None = None
    sampling: SamplingParams = SamplingParams()  # validated when decoded (engine/sampling_params.py)
    traffic_class: str = "default"  # picks the cell


class GenerateRequest(Envelope, kw_only=True):
    """Control plane → agent: tokenized, validated, routed. A request resumed after its node was lost
    comes again with the same id, its prompt extended by the tokens already streamed and ``max_tokens``
    reduced by their number."""

    prompt_token_ids: list[int]
    sampling: SamplingParams
    arrival_ns: int  # when the control plane received it (queue wait starts here)
    routed_ns: int  # when the router decided
    # the LoRA adapter to apply (a PEFT directory the node can read; loaded on first use); None: the base model
    lora_name: str | None = None
    lora_path: str | None = None


class TokenChunk(Envelope, kw_only=True):
    """Agent → control plane → client: tokens and text since the last chunk of this request."""

    token_ids: list[int]
    text: str
    finished: bool = False
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    stop_reason: int | str | None = None
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    node_id: str = ""
    logprobs: list[tuple[int, float, list[tuple[int, float]]]] | None = None  # (token, logprob, top)


class CancelRequest(Envelope, kw_only=True):
    pass


class ErrorReply(Envelope, kw_only=True):
    code: ErrorCode
    message: str
    retry_after_s: float | None = None
    param: str | None = None  # the request field the error is about (an OpenAI error's ``param``)


class Ping(Envelope, kw_only=True):
    """``request_ids``: a client's requests in flight; the Pong lists those the control plane does not know
    (it restarted, or lost them), so the client learns at once rather than at its timeout."""

    payload: bytes = b""
    request_ids: list[str] = []


class Pong(Envelope, kw_only=True):
    """``started_ns``: when the answering control plane started (a new value: it restarted)."""

    payload: bytes = b""
    ping_sent_ns: int = 0
    unknown_request_ids: list[str] = []
    started_ns: int = 0


class KVBlocks(Envelope, kw_only=True):
    """KV blocks moving between nodes (the remote tier); one tensor frame per layer's K and V."""

    block_hashes: list[int]
    tensors: list[TensorRef]


# --------------------------------------------------------------------------- observability (observe/, tui/)
#
#   control plane ──PUB (default tcp://127.0.0.1:5557)──FleetStats every stats interval──► SUB dashboards (zoo top)
#   agent ──NodeTelemetry (with its LoadReports)──► control plane  (the application-level router → node hop)
#
# Latencies are seconds; "app" figures come from the application's own time.monotonic_ns stamps, "ebpf"
# figures from the kernel probes of observe/ebpf (zoo probe) when they are attached.


class LatencyFigure(msgspec.Struct, frozen=True, kw_only=True):
    """One latency distribution: ``name`` measured by ``source`` on ``node_id`` ("" = the whole fleet).

    name: "router_queue_wait" | "router_to_node_hop" | "node_to_router_return" (| eBPF extras such as
        "engine_runq_delay", "engine_offcpu").
    p50_s / p99_s: over the most recent samples (a sliding window); None when there are none.
    interval_p50_s: over the samples since the previous FleetStats only (what a sparkline plots).
    """

    name: str
    source: str  # "app" | "ebpf"
    node_id: str = ""
    count_total: int = 0
    p50_s: float | None = None
    p99_s: float | None = None
    interval_count: int = 0
    interval_p50_s: float | None = None


class NodeStats(msgspec.Struct, kw_only=True):
    """One row of the fleet table. ``state``: "up" (in the registry and routed to), "suspect" (a send to it
    failed: not routed to until it is heard from again), "draining" (not routed to; its requests finish)
    or "dead" (left, expired)."""

    node_id: str
    state: str
    gpu_type: str = ""
    cell: str = ""
    model: str = ""
    power_score: float = 0.0
    num_running: int = 0
    num_waiting: int = 0
    num_swapped: int = 0
    kv_usage: float = 0.0  # 0..1
    num_inflight: int = 0
    ttft_p50_s: float | None = None  # as the control plane saw it: routing and both hops included
    ttft_p99_s: float | None = None
    tpot_p50_s: float | None = None
    tpot_p99_s: float | None = None
    num_served_total: int = 0
    num_failed_total: int = 0
    num_routed_total: int = 0
    num_preemptions_total: int = 0
    metrics_url: str = ""  # the agent's /metrics ("" when it exports none)


class FleetStats(Envelope, kw_only=True):
    """Control plane → dashboards (PUB/SUB): the whole fleet, every stats interval. Counters are totals
    since the control plane started (``started_ns``); a dashboard derives rates from successive snapshots."""

    seq: int  # 0, 1, 2 … per control-plane process
    started_ns: int  # the publisher's start (time.monotonic_ns): a new value means a restarted control plane
    policy: str
    nodes: list[NodeStats] = []
    latencies: list[LatencyFigure] = []
    num_requests_total: dict[str, int] = {}  # routed, completed, failed, cancelled, refused
    num_inflight: int = 0
    rejected_requests_total: dict[str, int] = {}  # by reason (ErrorCode value)
    malformed_messages_total: dict[str, int] = {}  # by kind (ErrorCode value; agent and client sockets)
    num_preemptions_total: int = 0  # summed over the live nodes' LoadReports
    ebpf_status: str = ""  # "" no probe feeds this control plane; else what the probe says ("attached", …)


class ProbeSnapshot(Envelope, kw_only=True):
    """`zoo probe` (root, another process) → control plane (client socket): the latest eBPF snapshot,
    ``observe.ebpf.ZooProbe.read()`` as is (cumulative histograms; see observe/latency_window.py)."""

    snapshot: dict[str, Any]


class NodeTelemetry(Envelope, kw_only=True):
    """Agent → control plane, with its LoadReports: what only the agent can measure."""

    node_id: str
    router_to_node_hop_ns: list[int] = []  # GenerateRequests received since the last one: recv_ns - sent_ns
    metrics_url: str = ""


MESSAGE_TYPES: dict[MsgType, type[Envelope]] = {
    MsgType.NODE_HELLO: NodeHello,
    MsgType.WELCOME: Welcome,
    MsgType.HEARTBEAT: Heartbeat,
    MsgType.LOAD_REPORT: LoadReport,
    MsgType.NODE_LEAVE: NodeLeave,
    MsgType.NODE_DRAIN: NodeDrain,
    MsgType.GENERATE: GenerateRequest,
    MsgType.TOKENS: TokenChunk,
    MsgType.CANCEL: CancelRequest,
    MsgType.ERROR: ErrorReply,
    MsgType.CLIENT_GENERATE: ClientGenerate,
    MsgType.PING: Ping,
    MsgType.PONG: Pong,
    MsgType.KV_BLOCKS: KVBlocks,
    MsgType.FLEET_STATS: FleetStats,
    MsgType.NODE_TELEMETRY: NodeTelemetry,
    MsgType.PROBE_SNAPSHOT: ProbeSnapshot,
}
TYPE_OF: dict[type[Envelope], MsgType] = {cls: t for t, cls in MESSAGE_TYPES.items()}
