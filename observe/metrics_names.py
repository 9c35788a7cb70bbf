"""Every Prometheus metric Silicon Zoo exports: names, labels, buckets. One table, read by the exporters,
the Grafana dashboard (observe/grafana/silicon_zoo.json) and the tests.

Where a metric means what vLLM's does it has vLLM's name and vLLM's label for the model, ``model_name``,
so scrapers written for vLLM (llm-d's endpoint picker, vLLM's Grafana boards) work unchanged; ours are
under ``zoo:`` and label the model ``model``. Every per-node metric also carries ``node``, ``gpu_type``
and ``cell``. Who exports what::

    agent /metrics           vllm:* (its engine), zoo:router_to_node_hop_seconds (measured on arrival),
                             zoo:swapped_*, zoo:swap_latency_seconds, zoo:malformed_messages_total{socket="control"}
    control plane /metrics   zoo:router_queue_wait_seconds, zoo:node_to_router_return_seconds,
                             zoo:router_decisions_total, zoo:router_config_info, zoo:router_config_reloads_total,
                             zoo:rejected_requests_total,
                             zoo:malformed_messages_total{socket="agents"|"clients"}, zoo:node_up,
                             zoo:node_state, zoo:node_info, zoo:node_membership_events_total

A metric is exported by one process only, so summing over a scrape job never counts a sample twice.
Prometheus names may contain colons (they are meant for recording rules, and vLLM uses them anyway).
"""

from __future__ import annotations

# labels ----------------------------------------------------------------------------------------------
VLLM_LABELS = ("model_name", "node", "gpu_type", "cell")
ZOO_NODE_LABELS = ("model", "node", "gpu_type", "cell")

# agent: vLLM-compatible --------------------------------------------------------------------------------
NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
NUM_REQUESTS_SWAPPED = "vllm:num_requests_swapped"  # vLLM v0's name (v1 dropped swapping)
KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"  # a fraction 0..1, as in vLLM (1 = 100 %)
NUM_PREEMPTIONS = "vllm:num_preemptions"  # counter: exposed as vllm:num_preemptions_total
PROMPT_TOKENS = "vllm:prompt_tokens"  # counter (_total)
PROMPT_TOKENS_CACHED = "vllm:prompt_tokens_cached"  # counter (_total): prompt tokens not computed here (cache, peers)
GENERATION_TOKENS = "vllm:generation_tokens"  # counter (_total)
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"  # counter (_total), in tokens
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"  # counter (_total), in tokens
REQUEST_SUCCESS = "vllm:request_success"  # counter (_total) by finished_reason
TIME_TO_FIRST_TOKEN = "vllm:time_to_first_token_seconds"
INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"
E2E_REQUEST_LATENCY = "vllm:e2e_request_latency_seconds"
REQUEST_QUEUE_TIME = "vllm:request_queue_time_seconds"
# vLLM's request-level histograms (vllm/v1/metrics/loggers.py, PrometheusStatLogger), one observation per finished
# request: its phases (engine/request_output.py RequestMetrics: prefill = first scheduled → first token, decode = first
# → last token, inference = first scheduled → last token), its mean time per output token after the first, its sizes
REQUEST_PREFILL_TIME = "vllm:request_prefill_time_seconds"
REQUEST_DECODE_TIME = "vllm:request_decode_time_seconds"
REQUEST_INFERENCE_TIME = "vllm:request_inference_time_seconds"
REQUEST_TIME_PER_OUTPUT_TOKEN = "vllm:request_time_per_output_token_seconds"
REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"
REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"
REQUEST_PARAMS_MAX_TOKENS = "vllm:request_params_max_tokens"
ITERATION_TOKENS = "vllm:iteration_tokens_total"  # per engine step (its name ends in _total, a histogram all the same)
# vLLM's LoRA info gauge: value = when it was last updated (unix seconds); labels max_lora and the adapters
# of running / waiting requests, comma-separated
LORA_REQUESTS_INFO = "vllm:lora_requests_info"
LORA_INFO_LABELS = ("max_lora", "waiting_lora_adapters", "running_lora_adapters")

# agent: speculative decoding, vLLM's names (counters, _total) ---------------------------------------------
SPEC_DECODE_NUM_DRAFTS = "vllm:spec_decode_num_drafts"  # verification steps of one request with drafts
SPEC_DECODE_NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SPEC_DECODE_NUM_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"  # {position}
# structured outputs (no vLLM counterpart): constrained requests, their grammars' forced tokens as drafts
STRUCTURED_OUTPUT_REQUESTS = "zoo:structured_output_requests"  # _total
STRUCTURED_OUTPUT_FORCED_DRAFT_TOKENS = "zoo:structured_output_forced_draft_tokens"  # _total
STRUCTURED_OUTPUT_FORCED_ACCEPTED_TOKENS = "zoo:structured_output_forced_accepted_tokens"  # _total
SPEC_DECODE_PREDICTION_DRAFT_TOKENS = "zoo:spec_decode_prediction_draft_tokens"  # _total: from predicted outputs
SPEC_DECODE_PREDICTION_ACCEPTED_TOKENS = "zoo:spec_decode_prediction_accepted_tokens"  # _total

# agent: ours -----------------------------------------------------------------------------------------------
ROUTER_TO_NODE_HOP = "zoo:router_to_node_hop_seconds"  # agent recv - GenerateRequest.sent_ns
SWAPPED_BLOCKS = "zoo:swapped_blocks"  # counter (_total) by direction "out" | "in"
SWAPPED_BYTES = "zoo:swapped_bytes"  # counter (_total) by direction
SWAP_LATENCY = "zoo:swap_latency_seconds"  # by direction; upper bound: the step that carried the swap
LORA_ADAPTERS_LOADED = "zoo:lora_adapters_loaded"  # gauge: adapters in device slots (LoRA nodes only)

# control plane -------------------------------------------------------------------------------------------
ROUTER_QUEUE_WAIT = "zoo:router_queue_wait_seconds"  # routed_ns - arrival_ns
NODE_TO_ROUTER_RETURN = "zoo:node_to_router_return_seconds"  # cp recv - TokenChunk.sent_ns, per chunk
ROUTER_DECISIONS = "zoo:router_decisions"  # counter (_total) {policy, node}
# gauge 1 {policy, slo_ttft_s, slo_tpot_s, knobs}: the router as configured, knobs = the RouterConfig fields set off
# their defaults as one JSON object ("{}": none); an info metric as vLLM's vllm:cache_config_info
ROUTER_CONFIG_INFO = "zoo:router_config_info"
ROUTER_CONFIG_RELOADS = "zoo:router_config_reloads"  # counter (_total) {outcome="ok"|"refused"}: SIGHUP reloads
NODE_PROFILING = "zoo:node_profiling"  # gauge {node..., state="waiting"|"recording"}: 1 while its profiler runs
# gauge {model_name, engine (the node), sleep_state="awake"|"weights_offloaded"|"discard_all"}: vLLM's, per node, 1 for
# its state (sleep level 0, 1, 2; a node waiting for its requests to sleep is still awake)
ENGINE_SLEEP_STATE = "vllm:engine_sleep_state"
API_KEYS = "zoo:api_keys"  # gauge: keys the gateway accepts (observe/api_key_metrics.py)
API_KEY_REFUSALS = "zoo:api_key_refusals"  # counter (_total) {reason}: requests refused with 401
API_KEY_RELOADS = "zoo:api_key_reloads"  # counter (_total) {outcome="ok"|"refused"}: SIGHUP re-reads of --api-keys
# the TTFT forecast on the chosen node at placement (controlplane/slo_forecast.py), whatever the policy
ROUTER_PREDICTED_TTFT = "zoo:router_predicted_ttft_seconds"  # histogram {model, node, gpu_type, cell}
ROUTER_SLO_FORECAST = "zoo:router_slo_forecast"  # counter (_total) {class, forecast="in_time"|"late"}
ROUTER_SLO_FORECAST_LATE_SHARE = "zoo:router_slo_forecast_late_share"  # gauge: of the last 1,000 placements
# hardware_aware's overload mode (controlplane/router/overload.py), only when it is configured on
CONTROLPLANE_DRAINING = "zoo:controlplane_draining"  # gauge: 1 while it shuts down (zoo/controlplane_shutdown.py)
# long prompts tokenized off the loop (controlplane/offload_tokenize.py TokenizeWorkers), HTTP's and ZeroMQ clients'
TOKENIZE_WAITING = "zoo:controlplane_tokenize_waiting_requests"  # gauge: waiting for (or in) a worker thread
TOKENIZE_OFFLOADED = "zoo:controlplane_tokenize_offloaded_prompts"  # counter (_total): tokenized in a worker thread
ROUTER_OVERLOAD_MODE = "zoo:router_overload_mode"  # gauge: 1 while the policy decides with the overload charges
ROUTER_OVERLOAD_ACTIVATIONS = "zoo:router_overload_activations"  # counter (_total): times it switched on
# gauge: the median prompt of the recent placements forecast late; hardware_aware sacrifices only longer prompts
ROUTER_LATE_PROMPT_MEDIAN = "zoo:router_late_prompt_median_tokens"
ROUTER_TPOT_LOST_REDIRECTS = "zoo:router_tpot_lost_redirects"  # counter (_total): TPOT lost causes moved
REJECTED_REQUESTS = "zoo:rejected_requests"  # counter (_total) {reason}
MALFORMED_MESSAGES = "zoo:malformed_messages"  # counter (_total) {kind, socket}
NODE_UP = "zoo:node_up"  # 1 live, 0 dead (left or expired), per node ever seen
NODE_INFO = "zoo:node_info"  # gauge 1 {model, node, gpu_type, cell, backend, config_digest}: what each node runs
NODE_STATE = "zoo:node_state"  # gauge {model, node, gpu_type, cell, state}: 1 for the node's state, 0 the others
NODE_MEMBERSHIP_EVENTS = "zoo:node_membership_events"  # counter (_total) {event}: joins, drains, resumes, ...
# per traffic class and tenant (controlplane/cells.py, controlplane/tenants.py)
CLASS_TTFT = "zoo:class_time_to_first_token_seconds"  # gauge {class, quantile="0.5"|"0.99"}, recent requests
CLASS_TPOT = "zoo:class_time_per_output_token_seconds"  # gauge {class, quantile}
CLASS_SLO_TARGET = "zoo:class_slo_target_seconds"  # gauge {class, kind "ttft" | "tpot"}: the targets it is held to
# the autoscaling signal per variant, one (model, cell, GPU type) (controlplane/capacity_plan.py)
CAPACITY_NODES = "zoo:capacity_nodes"  # gauge {model_name, cell, gpu_type}: nodes counted as capacity (up, asleep)
CAPACITY_DESIRED_NODES = "zoo:capacity_desired_nodes"  # gauge {model_name, cell, gpu_type}: what a KEDA scales to
CAPACITY_UTILISATION = "zoo:capacity_utilisation"  # gauge {model_name, cell}: load / capacity, power-score weighted
CAPACITY_ARRIVAL_GROWTH = "zoo:capacity_arrival_growth"  # gauge {model_name, cell}: arrivals forecast / now, >= 1
# gauge {model_name}: requests held for a first node of a model scaled to zero (controlplane/cold_start.py)
CAPACITY_COLD_START_WAITING = "zoo:capacity_cold_start_waiting_requests"
CLASS_REQUESTS = "zoo:class_requests"  # counter (_total) {class, outcome}: routed, spilled, refused, served, ...
TENANT_REQUESTS = "zoo:tenant_requests"  # counter (_total) {tenant, outcome}: admitted, rate_limited
TENANT_TOKENS = "zoo:tenant_tokens"  # counter (_total) {tenant, kind}: prompt, completion
# the gateway's OpenAI batches and files (observe/batch_metrics.py)
BATCHES = "zoo:batches"  # gauge {status}
BATCH_REQUESTS = "zoo:batch_requests"  # counter (_total) {outcome "completed" | "failed"}
BATCH_REQUESTS_WAITING = "zoo:batch_requests_waiting"  # gauge: requests of unfinished batches not answered yet
FILES = "zoo:files"  # gauge: files kept
FILES_BYTES = "zoo:files_bytes"  # gauge
RESPONSES_STORED = "zoo:responses_stored"  # gauge: /v1/responses kept for GET and previous_response_id
RESPONSES_STORED_BYTES = "zoo:responses_stored_bytes"  # gauge
RESPONSES_BACKGROUND_RUNNING = "zoo:responses_background_running"  # gauge: background responses not ended yet
RESPONSES_BACKGROUND_ENDED = "zoo:responses_background_ended"  # counter (_total) {status}: completed ... cancelled
RESPONSES_BACKGROUND_RESUMED = "zoo:responses_background_resumed"  # counter (_total): run again after a restart
CONVERSATIONS_STORED = "zoo:conversations_stored"  # gauge: /v1/conversations kept
CONVERSATIONS_STORED_BYTES = "zoo:conversations_stored_bytes"  # gauge: their items' and metadata's bytes
CONVERSATIONS_EVICTED = "zoo:conversations_evicted"  # counter (_total): dropped, least recently used, for the bounds
CONVERSATIONS_UNRECORDED = "zoo:conversations_unrecorded_responses"  # counter (_total): items a conversation refused
FILES_EXPIRED = "zoo:files_expired"  # counter (_total): files deleted when their expires_after ran out
UPLOADS_PENDING = "zoo:uploads_pending"  # gauge: OpenAI Uploads not completed yet
UPLOADS_PENDING_BYTES = "zoo:uploads_pending_bytes"  # gauge: their parts' bytes, held in memory
UPLOADS_EXPIRED = "zoo:uploads_expired"  # counter (_total): expired before they were completed
CHAT_COMPLETIONS_STORED = "zoo:chat_completions_stored"  # gauge: chat completions kept (store: true)
CHAT_COMPLETIONS_STORED_BYTES = "zoo:chat_completions_stored_bytes"  # gauge
CHAT_COMPLETIONS_EVICTED = "zoo:chat_completions_evicted"  # counter (_total): dropped, least recently used
STORE_WRITE_ERRORS = "zoo:gateway_store_write_errors"  # counter (_total) {store}: --files-dir writes that failed
# OpenTelemetry request spans (observe/span_metrics.py), on the /metrics of each process that exports spans; a span
# is one process's own (the control plane's llm_request, an agent's node_request), labelled by its service.name
TRACE_SPANS = "zoo:trace_spans"  # counter (_total) {service, outcome "queued" | "dropped" | "unsampled"}
TRACE_EXPORTS = (
    "zoo:trace_exports"  # counter (_total) {service, result "success" | "failure"}: batches to the collector
)

# buckets (seconds) ---------------------------------------------------------------------------------------
# vLLM's own buckets for its histograms, so dashboards built for vLLM read ours the same way
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                  20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                 40.0, 80.0)  # fmt: skip
REQUEST_LATENCY_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                             120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)  # vLLM's


def token_count_buckets(max_model_len: int) -> tuple[int, ...]:
    """vLLM's buckets for a request's token counts (``build_1_2_5_buckets(max_model_len)``): 1, 2, 5, 10, 20, 50, …
    up to ``max_model_len``."""
    buckets: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_model_len:
                return tuple(buckets)
            buckets.append(mantissa * scale)
        scale *= 10


# hops and router waits are micro- to milliseconds: powers of two from 16 µs to ~1 s
HOP_BUCKETS_S = tuple(16e-6 * 2**i for i in range(17))
SWAP_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

# agent: the KV data plane (agent/kv_data_plane.py) ------------------------------------------------------
KV_TRANSFER_BYTES = "zoo:kv_transfer_bytes"  # counter (_total) {direction "out" | "in", peer}
KV_TRANSFER_SECONDS = "zoo:kv_transfer_seconds"  # per completed transfer, by direction
KV_TRANSFER_REFUSED = "zoo:kv_transfer_refused"  # counter (_total) {reason}: transfers this receiver refused
KV_EVENTS_REPLAYS = "zoo:kv_events_replay_requests"  # counter (_total) {outcome streamed|batches|snapshot|refused}
KV_EVENTS_BATCHES = "zoo:kv_events_batches"  # counter (_total) {outcome "sent" | "dropped"}: --kv-events-config's
KV_TRANSFER_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# control plane: live migrations (MigrationDone) -------------------------------------------------------------
MIGRATIONS = "zoo:migrations"  # counter (_total) {reason "drain" | "rebalance", outcome "ok" | "failed" | "refused"}
# the agent's decode steps vs their memory-bandwidth roofline (engine/decode_roofline.py), 0..1, per node
DECODE_ROOFLINE_FRACTION = "zoo:decode_roofline_fraction"
# control plane: speculative pairs in the fleet (controlplane/spec_pairs.py) -------------------------------------
SPEC_PAIR_INFO = "zoo:spec_pair_info"  # gauge 1 {verifier, drafter}: pairs the control plane made
SPEC_PAIR_PREDICTED_TPOT = "zoo:spec_pair_predicted_tpot_seconds"  # gauge {verifier, mode "plain" | "paired"}
SPEC_PAIR_ACCEPTANCE = "zoo:spec_pair_acceptance_rate"  # gauge {verifier, drafter}: measured since paired
SPEC_PAIRS = "zoo:spec_pairs"  # counter (_total) {event "paired" | "unpaired"}

# every process: its garbage collector (observe/gc_pauses.py) ---------------------------------------------------------
PROCESS_GC_PAUSE = "zoo:process_gc_pause_seconds"  # histogram {generation}: each collection's pause
PROCESS_GC_PAUSE_MAX = "zoo:process_gc_pause_max_seconds"  # gauge {generation}: the longest since start
PROCESS_GC_FROZEN = "zoo:process_gc_frozen_objects"  # gauge: objects frozen out of collection (settle_heap)
