"""Every message that crosses a socket in Silicon Zoo: msgspec structs, one version. The envelope, type byte and
error codes are transport/envelope.py's, the peer data plane's messages transport/data_plane_messages.py's; all are
registered (``MESSAGE_TYPES``) and importable here.

Frames of one ZeroMQ message (after any ROUTER identity frames)::

    [ type: 1 byte ][ payload: msgpack of the struct ][ tensor frame 0 ][ tensor frame 1 ] ...

The payload of every struct starts with the envelope fields ``v`` (protocol version),
``request_id`` and ``sent_ns`` (``time.monotonic_ns()`` of the sender at send time: CLOCK_MONOTONIC
is one clock for every process of a host, so same-host hop latency is ``recv_ns - sent_ns``).
Tensors never go inside the payload: a ``TensorRef`` names the extra frame that carries the raw bytes.

Who sends what (socket roles are in transport/sockets.py)::

    agent ──NodeHello/Heartbeat/LoadReport/TokenChunk(s)/ErrorReply/NodeDrain/NodeLeave/KvEvents──► control plane
          (and the answers: ResetPrefixCache, ProfileControl, SleepControl)
    agent ◄──Welcome/GenerateRequest/CancelRequest/Ping/NodeDrain/ResetPrefixCache/ProfileControl/SleepControl── cp
    client ──ClientGenerate/CancelRequest/Ping/NodeDrain/SleepControl──► control plane (ROUTER)
    client ◄──TokenChunk/ErrorReply/Pong/NodeDrain/SleepControl──────────  control plane
    agent ◄──SpecPair (draft with this fleet drafter's DraftServer, or stop)──────────────── control plane
"""

from __future__ import annotations

from typing import Any

import msgspec

from engine.kv.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent
from engine.sampling_params import SamplingParams
from transport.chat_wire import ChatMessage, ChatTemplateOptions, ToolSpec
from transport.data_plane_messages import (
    KVAck,
    KVChunk,
    KVStoreCommand,
    KVWireLayout,
    MigrateRequest,
    MigrationDone,
)
from transport.envelope import (
    MAX_PAYLOAD_BYTES,
    MAX_TENSOR_BYTES,
    PROTOCOL_VERSION,
    Envelope,
    ErrorCode,
    MsgType,
    TensorRef,
)

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
    prefix_hash_algo: str = "sha256"  # how its prefix cache names blocks (engine/kv/block_hash.py); the router's too


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
    data_endpoint: str = ""  # the agent's KV data socket (agent/kv_data_plane.py); "": it has none
    kernels: str = ""  # the kernels the backend chose (backends/kernel_dispatch.py), one line; "" = not said
    max_loras: int = 0  # LoRA adapters one step can serve (device slots); 0 = the base model only
    role: str = "both"  # prefill | decode | both: its part in the prefill/decode split (controlplane/split_handoff.py)
    # speculative pairs (controlplane/spec_pairs.py): its model's tokenizer (engine/spec/vocab_id.py: a pair shares
    # one), the draft models it runs for others (`--can-draft`) at its DraftServer, and theirs; "" / []: none
    vocab_id: str = ""
    draft_models: list[str] = []
    draft_endpoint: str = ""
    draft_vocab_id: str = ""
    draft_step_ms: float = 0.0  # its DraftServer's measured time per drafted token (0: not measured)
    # placement (zoo agent --host-id/--rack; backends/kv_link_model.py prices KV moves by it); "": not said
    host: str = ""
    rack: str = ""
    # the method its engine speculates with (engine/spec/spec_config.py: ngram, model, remote); "": it does not (a
    # request's predicted output is drafted from only where it does: controlplane/router/prediction_affinity.py)
    speculative: str = ""
    # what decides its tokens for a given request and seed, hashed (agent/serving_digest.py): the gateway's
    # system_fingerprint (controlplane/gateway/system_fingerprint.py); "": not said
    config_digest: str = ""


class Welcome(Envelope, kw_only=True):
    node_id: str
    heartbeat_interval_s: float
    report_interval_s: float
    peers: dict[str, str] = {}  # node id → data endpoint of the live peers serving the same model that have one
    kv_events: bool = False  # send your KV cache events (KvEvents): the router indexes them (Dynamo's default)
    kv_snapshot: bool = False  # send your cached blocks once (KvEvents: a clear, then every one), no events after
    token_chunk_batches: bool = False  # send an engine pass's TokenChunks as one TokenChunks (this side reads it)


class Heartbeat(Envelope, kw_only=True):
    node_id: str
    # the control plane's echo only: its live data peers (as Welcome.peers, kept fresh) and the bytes each one's
    # remote KV store can still take (LoadReport.kv_store_free_bytes; a peer not yet reporting is left out)
    peers: dict[str, str] = {}
    peer_kv_free_bytes: dict[str, int] = {}


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
    # decode steps' share of the memory-bandwidth roofline (engine/decode_roofline.py); 0: not measured
    decode_roofline_fraction: float = 0.0
    # mean time of the steps since the last report that carried decode rows, mixed prefill+decode ones included:
    # the time per token its decoding requests got (engine/step_rates.py); 0: none (or an older agent)
    decode_token_step_ms: float = 0.0
    # LoRA adapters by name: in device slots now (most recently used last), of running, of waiting requests (vLLM's)
    lora_resident: list[str] = []
    lora_running: list[str] = []
    lora_waiting: list[str] = []
    lora_load_s: float = 0.0  # measured mean time to bring an adapter into a device slot; 0: none loaded yet
    kv_store_free_bytes: int = -1  # room left in the node's store of peers' KV (the remote tier); -1: it has none
    # this node's remote-tier moves so far, by outcome: out_ok, out_failed, in_ok, in_failed, peer_lost
    kv_remote_moves: dict[str, int] = {}
    # speculative decoding: the drafter node this verifier drafts with now ("" none), and the acceptance rate
    # measured since it last changed proposer (-1: no draft verified yet)
    spec_drafter: str = ""
    spec_acceptance_rate: float = -1.0
    # the decoders a delay could push over their TPOT target, counted per bin of engine/decode_bins.py by the delay
    # each still absorbs, in milliseconds (engine/decode_slack.py); empty: none (or an older agent)
    decode_slack_hist: list[int] = []
    # the node's profiler (agent/node_profiler.py): "" off, "waiting" (for its delay_iterations), "recording"
    profiling: str = ""
    # vLLM's sleep mode (engine/sleep_mode.py): 0 awake, 1 KV discarded and weights in host RAM, 2 both discarded;
    # -1 asked to sleep once its requests are done ("wait"), not asleep yet
    sleep_level: int = 0
    sleep_idle: bool = False  # asleep by the control plane's idle sleep (SleepControl.idle), which wakes it


class NodeLeave(Envelope, kw_only=True):
    node_id: str
    reason: str


class NodeDrain(Envelope, kw_only=True):
    """Drain a node: the control plane routes nothing new to it; its requests finish there, and those still there
    when it leaves resume on other nodes.

    agent → control plane: the agent drains, ``leaving`` (SIGTERM: it leaves once it is empty, or at its drain
        timeout), or says again after a Welcome that an operator drained it (``leaving`` false).
    client → control plane (`zoo drain NODE`): drain that node; the answer is a NodeDrain naming it, with
        ``num_inflight`` its requests then, or an ErrorReply for an unknown node. With ``resume`` (`zoo drain
        --resume NODE`): the node takes new requests again (controlplane/node_drains.py); an ErrorReply for an
        unknown node or one that is leaving.
    control plane → agent: you are drained; with ``resume``, you take new requests again (the agent announces a
        drain again when it joins a new control plane).
    """

    node_id: str
    reason: str = ""
    num_inflight: int = 0
    resume: bool = False  # undo a drain: routed to again
    leaving: bool = False  # agent → control plane: it drains to stop, and cannot be resumed


# --------------------------------------------------------------------------- requests


class ClientGenerate(Envelope, kw_only=True):
    """Client → control plane: exactly one of ``prompt``, ``messages``, ``prompt_token_ids``."""

    model: str | None = None  # None = the fleet's default model
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    prompt_token_ids: list[int] | None = None
    tools: list[ToolSpec] | None = None  # functions the chat may call (with messages only)
    sampling: SamplingParams = SamplingParams()  # validated when decoded (engine/sampling_params.py)
    traffic_class: str = "default"  # picks the cell
    tenant: str = ""  # who it is for (controlplane/tenants.py: its class, rate limits, usage); "" = default
    priority: int = 0  # vLLM's: lower runs earlier, within its class (controlplane/cells.py engine_priority)
    trace_headers: dict[str, str] | None = None  # W3C traceparent/tracestate (transport/trace_context.py): its parent
    chat: ChatTemplateOptions | None = None  # how ``messages`` are rendered (None: the defaults, a new reply)
    return_prompt_token_ids: bool = False  # vLLM's return_token_ids: the first chunk back names the prompt's tokens


class GenerateRequest(Envelope, kw_only=True):
    """Control plane → agent: tokenized, validated, routed. A request resumed after its node was lost comes again
    with the same id, its prompt extended by the tokens already streamed and ``max_tokens`` reduced by their number."""

    prompt_token_ids: list[int]
    sampling: SamplingParams
    arrival_ns: int  # when the control plane received it (queue wait starts here)
    routed_ns: int  # when the router decided
    priority: int = 0  # cells.py engine_priority (class, then request): higher runs first, swapping lower ones out
    # the LoRA adapter to apply (a PEFT directory the node can read; loaded on first use); None: the base model
    lora_name: str | None = None
    lora_path: str | None = None
    slo_tpot_s: float = 0.0  # its TPOT target, the one its class is routed by; 0: none (LoadReport.decode_slack_hist)
    # a resumed request: the last this many prompt tokens are its output streamed before (its penalties count them
    # as output, backends/logits_adjust.py); 0 for a new one. The engine refuses a count not below the prompt's length
    num_resumed_tokens: int = 0
    trace_headers: dict[str, str] | None = None  # the control plane's span (controlplane/request_spans.py): a parent


class RequestTiming(msgspec.Struct, frozen=True):
    """A finished request's phases on the node that finished it (seconds of that node's clock; engine/request_output.py
    RequestMetrics), on its last TokenChunk: vLLM's per-request metrics (controlplane/gateway/request_timing.py).
    None: the request did not get that far. A request resumed on another node: that node's part alone."""

    queue_s: float | None = None  # arrival at the engine → first scheduled
    prefill_s: float | None = None  # first scheduled → first token
    decode_s: float | None = None  # first token → last token
    num_output_tokens: int = 0  # the tokens this node sampled for it


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
    num_cached_tokens: int = 0  # prompt tokens this node's prefix cache served (known from the first chunk on)
    # the first chunk's, if asked (engine/prompt_logprobs.py): per prompt position (token, logprob, top, rank)
    prompt_logprobs: list[tuple[int, float | None, list[tuple[int, float]], int | None]] | None = None
    embedding: list[float] | None = None  # the prompt's, if asked (sampling.embed; engine/embeddings.py)
    prompt_token_ids: list[int] | None = None  # the first chunk a client gets, if asked (return_prompt_token_ids)
    # a request with a predicted output (sampling.prediction): its tokens the output repeated as drafts (accepted),
    # and the rest of them (rejected), as OpenAI's usage counts them; so far, on every chunk (engine/spec/)
    num_prediction_accepted_tokens: int = 0
    num_prediction_rejected_tokens: int = 0
    timing: RequestTiming | None = None  # the last chunk's (finished), from a node that measured it


class TokenChunks(Envelope, kw_only=True):
    """Agent → control plane, when its Welcome says ``token_chunk_batches``: the TokenChunks of one engine pass (of
    different requests, in order) in one message, so a step of N requests costs one message, not N
    (agent/chunk_batches.py); each is relayed as if it came alone, ``sent_ns`` this message's. At most
    ``MAX_TOKEN_CHUNKS``: the control plane refuses a larger one whole (an agent's bug, not a step)."""

    chunks: list[TokenChunk]


MAX_TOKEN_CHUNKS = 256  # chunks in one TokenChunks


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
    failed: not routed to until it is heard from again), "draining" (not routed to; its requests finish;
    `zoo drain --resume` undoes it), "leaving" (draining to stop: its agent's SIGTERM, which no resume undoes) or
    "dead" (left, expired)."""

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
    kernels: str = ""  # from the node's hello
    config_digest: str = ""  # from the node's hello (agent/serving_digest.py): nodes alike share it
    decode_roofline_fraction: float = 0.0  # from its LoadReports; 0: not measured
    profiling: str = ""  # from its LoadReports: its profiler "waiting" or "recording" ("" off): a trace growing
    sleep_level: int = 0  # vLLM's sleep mode (POST /sleep): 0 awake, 1, 2; -1 to sleep once its requests are done
    role: str = "both"  # from its hello: prefill | decode | both (the prefill/decode split)
    # speculative pairs (controlplane/spec_pairs.py): the drafter this verifier drafts with ("" none), its measured
    # acceptance (-1: none), and the TPOT the control plane predicts for it without and with its best drafter
    spec_drafter: str = ""
    spec_acceptance_rate: float = -1.0
    spec_tpot_plain_s: float | None = None
    spec_tpot_paired_s: float | None = None
    host: str = ""  # from its hello: placement (the KV link to its peers); "": not said
    rack: str = ""


class FleetStats(Envelope, kw_only=True):
    """Control plane → dashboards (PUB/SUB): the whole fleet, every stats interval. Counters are totals since the
    control plane started (``started_ns``); a dashboard derives rates from successive snapshots."""

    seq: int  # 0, 1, 2 … per control-plane process
    started_ns: int  # the publisher's start (time.monotonic_ns): a new value means a restarted control plane
    policy: str
    nodes: list[NodeStats] = []
    latencies: list[LatencyFigure] = []
    num_requests_total: dict[str, int] = {}  # routed, completed, failed, cancelled, refused
    num_inflight: int = 0
    num_tokenizing: int = 0  # of them, those whose long prompt waits for a tokenizing thread (offload_tokenize.py)
    rejected_requests_total: dict[str, int] = {}  # by reason (ErrorCode value)
    malformed_messages_total: dict[str, int] = {}  # by kind (ErrorCode value; agent and client sockets)
    num_preemptions_total: int = 0  # summed over the live nodes' LoadReports
    ebpf_status: str = ""  # "" no probe feeds this control plane; else what the probe says ("attached", …)
    migrations_total: dict[str, int] = {}  # live migrations, "reason:outcome" → count (zoo:migrations_total)
    kv_migrated_bytes_total: int = 0  # KV bytes the migrations that reached their target moved
    slo_forecast_late_share: float = 0.0  # recent placements' share whose TTFT forecast missed (slo_forecast.py)
    # hardware_aware's overload mode (controlplane/router/overload.py): None where it is not configured on
    overload_mode: bool | None = None
    # hardware_aware's goodput-first rule (router/policies/tpot_lost.py): requests it moved; None where it is off
    tpot_lost_redirects_total: int | None = None
    # the RouterConfig fields set off their defaults (--router-knobs, zoo.toml's [controlplane.router]), by name
    router_knobs: dict[str, Any] = {}
    router_reloads: dict[str, int] = {}  # reloads at SIGHUP (controlplane/router_reload.py) by outcome: ok, refused
    draining: bool = False  # the control plane is shutting down: new requests refused (zoo/controlplane_shutdown.py)
    capacity: list[tuple[str, str, str, int, int]] = []  # (model, cell, GPU type, nodes, wanted): capacity_plan.py
    capacity_growth: list[tuple[str, str, float]] = []  # (model, cell, arrivals' growth) where > 1: demand_trend.py
    capacity_waiting: dict[str, int] = {}  # model → requests held for a first node of it (controlplane/cold_start.py)


class ProbeSnapshot(Envelope, kw_only=True):
    """`zoo probe` (root, another process) → control plane (client socket): the latest eBPF snapshot,
    ``observe.ebpf.ZooProbe.read()`` as is (cumulative histograms; see observe/latency_window.py)."""

    snapshot: dict[str, Any]


class NodeTelemetry(Envelope, kw_only=True):
    """Agent → control plane, with its LoadReports: what only the agent can measure."""

    node_id: str
    router_to_node_hop_ns: list[int] = []  # GenerateRequests received since the last one: recv_ns - sent_ns
    metrics_url: str = ""


# --------------------------------------------------------------------------- remote drafting


class DraftItem(msgspec.Struct, frozen=True):
    """One request that wants drafts: all its known tokens, and at most ``num_spec_tokens`` drafts."""

    req_id: str
    token_ids: list[int]
    num_spec_tokens: int


class DraftPropose(Envelope, kw_only=True):
    """Verifier -> draft agent. ``request_id`` numbers the round (a late reply is recognised and
    dropped); ``drop_req_ids`` are finished requests the drafter forgets; no items = a pairing check."""

    items: list[DraftItem] = []
    drop_req_ids: list[str] = []
    vocab_size: int = 0  # the verifier's; the drafter refuses a pair whose vocabulary differs


class DraftReply(Envelope, kw_only=True):
    """Draft agent -> verifier: greedy drafts per req_id (deterministic, so verification is exact)."""

    drafts: dict[str, list[int]] = {}
    vocab_size: int = 0  # the drafter's


class SpecPair(Envelope, kw_only=True):
    """Control plane -> verifier agent (controlplane/spec_pairs.py): draft with the DraftServer of
    ``drafter_node_id`` at ``draft_endpoint`` (up to ``num_spec_tokens`` drafts a step), or, with an empty
    endpoint, stop (back to the node's own proposer or plain decode). ``reason`` says why, for the logs."""

    node_id: str
    drafter_node_id: str = ""
    draft_endpoint: str = ""
    num_spec_tokens: int = 4
    reason: str = ""


MESSAGE_TYPES: dict[MsgType, type[Envelope]] = {
    MsgType.NODE_HELLO: NodeHello,
    MsgType.WELCOME: Welcome,
    MsgType.HEARTBEAT: Heartbeat,
    MsgType.LOAD_REPORT: LoadReport,
    MsgType.NODE_LEAVE: NodeLeave,
    MsgType.NODE_DRAIN: NodeDrain,
    MsgType.GENERATE: GenerateRequest,
    MsgType.TOKENS: TokenChunk,
    MsgType.TOKEN_CHUNKS: TokenChunks,
    MsgType.CANCEL: CancelRequest,
    MsgType.ERROR: ErrorReply,
    MsgType.CLIENT_GENERATE: ClientGenerate,
    MsgType.PING: Ping,
    MsgType.PONG: Pong,
    MsgType.KV_BLOCKS: KVBlocks,
    MsgType.FLEET_STATS: FleetStats,
    MsgType.NODE_TELEMETRY: NodeTelemetry,
    MsgType.PROBE_SNAPSHOT: ProbeSnapshot,
    MsgType.DRAFT_PROPOSE: DraftPropose,
    MsgType.DRAFT_REPLY: DraftReply,
    MsgType.SPEC_PAIR: SpecPair,
}


MESSAGE_TYPES[MsgType.KV_CHUNK] = KVChunk  # the peer data plane's (transport/data_plane_messages.py)
MESSAGE_TYPES[MsgType.KV_ACK] = KVAck
MESSAGE_TYPES[MsgType.MIGRATE] = MigrateRequest
MESSAGE_TYPES[MsgType.MIGRATION_DONE] = MigrationDone
MESSAGE_TYPES[MsgType.KV_STORE] = KVStoreCommand


class ResetPrefixCache(Envelope, kw_only=True):
    """Control plane → agent: forget your prefix cache (POST /reset_prefix_cache; ``request_id`` names the reset).
    Agent → control plane, the answer: ``num_blocks`` cached blocks dropped, or ``ok`` False while blocks are in use
    (vLLM's rule: a running request's KV is not pulled from under it)."""

    node_id: str = ""
    ok: bool = False
    num_blocks: int = 0


MESSAGE_TYPES[MsgType.RESET_PREFIX_CACHE] = ResetPrefixCache


class ProfileControl(Envelope, kw_only=True):
    """Control plane → agent: ``action`` "start" or "stop" this node's profiler (POST /start_profile, /stop_profile;
    ``request_id`` names the ask; agent/node_profiler.py). Agent → control plane, the answer: ``ok``, ``detail``
    (what it did, or why not), and at a stop the ``trace_files`` written on the node's disk."""

    action: str = ""
    node_id: str = ""
    ok: bool = False
    detail: str = ""
    trace_files: list[str] = []


MESSAGE_TYPES[MsgType.PROFILE_CONTROL] = ProfileControl


class SleepControl(Envelope, kw_only=True):
    """Control plane → agent: ``action`` "sleep" (at ``level`` 1 or 2, ``mode`` "abort" or "wait") or "wake_up" (the
    ``tags`` named, every one when empty) this node (POST /sleep, /wake_up; engine/sleep_mode.py). Agent → control
    plane, the answer: ``ok``, ``detail`` (what it did, or why not), its ``sleep_level`` after, and the device bytes
    it freed. A "wait" sleep is answered once the node's requests are done and it sleeps."""

    action: str = ""
    level: int = 1
    mode: str = "abort"
    tags: list[str] = []
    idle: bool = (
        False  # a sleep of the control plane's idle sleep (--sleep-idle-ttl), which wakes it; not an operator's
    )
    node_id: str = ""
    ok: bool = False
    detail: str = ""
    sleep_level: int = 0
    freed_bytes: int = 0


MESSAGE_TYPES[MsgType.SLEEP_CONTROL] = SleepControl


class KvEvents(Envelope, kw_only=True):
    """Agent → control plane when its Welcome asked: the prefix cache's changes since the last, in order
    (engine/kv/kv_events.py) as (kind, block hashes): 0 stored, 1 removed, 2 all cleared. The first after a
    Welcome starts with a clear and stores every block cached then, so the router starts from the whole cache."""

    node_id: str
    events: list[tuple[int, list[int]]] = []


KV_STORED, KV_REMOVED, KV_CLEARED = 0, 1, 2  # KvEvents' kinds


def kv_events_to_wire(events: list[KVEvent]) -> list[tuple[int, list[int]]]:
    """The engine's KV events as KvEvents carries them (the hashes alone: a router matches chain values)."""
    kinds = {BlockStored: KV_STORED, BlockRemoved: KV_REMOVED}
    return [(kinds.get(type(e), KV_CLEARED), getattr(e, "block_hashes", [])) for e in events]


def kv_events_from_wire(events: list[tuple[int, list[int]]]) -> list[KVEvent]:
    """KvEvents' as the engine's event types (a stored event without its tokens or parent); unknown kinds skipped."""
    out: list[KVEvent] = []
    for kind, hashes in events:
        if kind == KV_STORED:
            out.append(BlockStored(hashes, None, [], None))
        elif kind == KV_REMOVED:
            out.append(BlockRemoved(hashes))
        elif kind == KV_CLEARED:
            out.append(AllBlocksCleared())
    return out


MESSAGE_TYPES[MsgType.KV_EVENTS] = KvEvents
TYPE_OF: dict[type[Envelope], MsgType] = {cls: t for t, cls in MESSAGE_TYPES.items()}

__all__ = [
    "MAX_PAYLOAD_BYTES", "MAX_TENSOR_BYTES", "MESSAGE_TYPES", "PROTOCOL_VERSION", "TYPE_OF", "Envelope", "ErrorCode",
    "KVAck", "KVChunk", "KVStoreCommand", "KVWireLayout", "MigrateRequest", "MigrationDone", "MsgType", "TensorRef",
]  # fmt: skip
