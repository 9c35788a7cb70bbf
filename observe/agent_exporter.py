"""An agent's /metrics: its engine in vLLM's names, plus the router → node hop and KV swapping.

Fed by the NodeAgent from its event loop (never from the engine thread)::

    engine thread ─► EngineObservation (stats snapshot, inter-token gaps, finished requests, swaps) ─┐
    handle_generate ─► observe_hop(recv_ns - GenerateRequest.sent_ns) ─────────────────────────────┤
    the pump's LoadReports ─► observe_lora (adapters of running / waiting requests) ────────────────┤
                                                                                                    ▼
                                        AgentExporter: histograms observed, latest snapshot kept ─► scrape

Gauges and ``*_total`` counters come from the latest SchedulerStats at scrape time; histograms from events.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from prometheus_client import Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from agent.node_core import EngineObservation, FinishedRequest
from engine.scheduler_stats import SchedulerStats
from engine.spec.grammar_drafts import StructuredOutputStats
from engine.spec.speculator import SpecDecodeStats
from observe import metrics_names as m
from observe.exporter import PrometheusExporter, SnapshotCollector
from transport.messages import LoadReport, NodeHello


class AgentExporter(PrometheusExporter):
    """One per agent process; ``describe_node`` before the first observation (NodeAgent.setup does it)."""

    def __init__(self) -> None:
        super().__init__()
        self._vllm_labels: dict[str, str] = {}
        self._zoo_labels: dict[str, str] = {}
        self._bytes_per_block = 0
        self._stats: SchedulerStats | None = None
        self._roofline = 0.0
        self._spec: SpecDecodeStats | None = None
        self._structured: StructuredOutputStats | None = None
        self._rejected: Mapping = {}
        self._lora_info: tuple[tuple[str, str, str], float] | None = None  # (labels, unix time), LoRA nodes only
        self._lora_loaded = 0  # adapters in device slots (last LoadReport)
        reg = self.registry

        def vllm_histogram(name: str, doc: str, buckets) -> Histogram:
            return Histogram(name, doc, m.VLLM_LABELS, registry=reg, buckets=buckets)

        latency = m.REQUEST_LATENCY_BUCKETS_S
        self.ttft = vllm_histogram(m.TIME_TO_FIRST_TOKEN, "Time to first token (arrival at the gateway → first token).",
                                   m.TTFT_BUCKETS_S)  # fmt: skip
        self.itl = vllm_histogram(m.INTER_TOKEN_LATENCY, "Time between successive output tokens of a request.",
                                  m.ITL_BUCKETS_S)  # fmt: skip
        self.e2e = vllm_histogram(m.E2E_REQUEST_LATENCY, "Arrival at the gateway → finish of a request.", latency)
        self.queue = vllm_histogram(m.REQUEST_QUEUE_TIME, "Arrival at the gateway → the request's first engine step.",
                                    latency)  # fmt: skip
        # vLLM's request phases and sizes (observe/metrics_names.py)
        self.prefill_time = vllm_histogram(m.REQUEST_PREFILL_TIME, "A request's first scheduling → its first token.",
                                           latency)  # fmt: skip
        self.decode_time = vllm_histogram(m.REQUEST_DECODE_TIME, "A request's first token → its last token.", latency)
        self.inference_time = vllm_histogram(m.REQUEST_INFERENCE_TIME, "A request's first scheduling → its last token.",
                                             latency)  # fmt: skip
        tpot_doc = "A request's mean time per output token after its first."
        self.request_tpot = vllm_histogram(m.REQUEST_TIME_PER_OUTPUT_TOKEN, tpot_doc, m.ITL_BUCKETS_S)
        self.iteration_tokens = vllm_histogram(m.ITERATION_TOKENS, "Tokens per engine step (sampled + prompts "
                                               "prefilled).", m.ITERATION_TOKENS_BUCKETS)  # fmt: skip
        self._token_counts: tuple[Histogram, ...] | None = None  # prompt, generation, max_tokens: made at the hello
        self.success = Counter(m.REQUEST_SUCCESS, "Finished requests by finish reason.",
                               (*m.VLLM_LABELS, "finished_reason"), registry=reg)  # fmt: skip
        self.hop = Histogram(m.ROUTER_TO_NODE_HOP, "Router → node hop: agent receipt - GenerateRequest.sent_ns.",
                             m.ZOO_NODE_LABELS, registry=reg, buckets=m.HOP_BUCKETS_S)  # fmt: skip
        self.swap_latency = Histogram(m.SWAP_LATENCY, "KV swap latency by direction (upper bound: its whole step).",
                                      (*m.ZOO_NODE_LABELS, "direction"), registry=reg,
                                      buckets=m.SWAP_BUCKETS_S)  # fmt: skip
        self.kv_transfer_bytes = Counter(m.KV_TRANSFER_BYTES, "KV bytes moved to/from peer agents.",
                                         (*m.ZOO_NODE_LABELS, "direction", "peer"), registry=reg)  # fmt: skip
        self.kv_transfer_seconds = Histogram(m.KV_TRANSFER_SECONDS, "Completed KV transfers' durations.",
                                             (*m.ZOO_NODE_LABELS, "direction"), registry=reg,
                                             buckets=m.KV_TRANSFER_BUCKETS_S)  # fmt: skip
        self._kv_refused: Mapping = {}
        self._kv_events = None  # agent/kv_events.py's publisher, when the node publishes its KV cache events
        reg.register(SnapshotCollector(self._collect_kv_refused))
        reg.register(SnapshotCollector(self._collect_snapshot))

    def describe_node(self, hello: NodeHello, rejected: Mapping | None = None) -> None:
        """Labels from the node's hello; ``rejected``: its dispatcher's live ErrorCode → count dict."""
        where = {"node": hello.node_id, "gpu_type": hello.hardware.gpu_type, "cell": hello.cell}
        self._vllm_labels = {"model_name": hello.model, **where}
        self._zoo_labels = {"model": hello.model, **where}
        self._bytes_per_block = hello.kv.bytes_per_block
        self._rejected = rejected if rejected is not None else {}
        if self._token_counts is None:  # vLLM's buckets reach the model's context length
            buckets = m.token_count_buckets(hello.max_model_len)
            self._token_counts = tuple(
                Histogram(name, doc, m.VLLM_LABELS, registry=self.registry, buckets=buckets)
                for name, doc in (
                    (m.REQUEST_PROMPT_TOKENS, "A finished request's prompt tokens."),
                    (m.REQUEST_GENERATION_TOKENS, "A finished request's generated tokens."),
                    (m.REQUEST_PARAMS_MAX_TOKENS, "A finished request's max_tokens parameter."),
                )
            )

    # -- events (event loop) ------------------------------------------------------------------------

    def observe_hop(self, seconds: float) -> None:
        self.hop.labels(**self._zoo_labels).observe(max(seconds, 0.0))

    def observe(self, obs: EngineObservation) -> None:
        labels = self._vllm_labels
        if obs.inter_token_s:
            itl = self.itl.labels(**labels)
            for gap_s in obs.inter_token_s:
                itl.observe(gap_s)
        if obs.iteration_tokens is not None:
            self.iteration_tokens.labels(**labels).observe(obs.iteration_tokens)
        for r in obs.finished:
            if r.ttft_s is not None:
                self.ttft.labels(**labels).observe(r.ttft_s)
            if r.e2e_s is not None:
                self.e2e.labels(**labels).observe(r.e2e_s)
            if r.queue_time_s is not None:
                self.queue.labels(**labels).observe(r.queue_time_s)
            self.success.labels(**labels, finished_reason=r.finish_reason or "unknown").inc()
            self._observe_request(r)
        for direction, _num_blocks, step_time_s in obs.swaps:
            self.swap_latency.labels(**self._zoo_labels, direction=direction).observe(step_time_s)
        self._roofline = obs.decode_roofline_fraction
        self._stats = obs.stats  # one reference swap: the scrape thread reads whole snapshots only
        self._spec = obs.spec
        self._structured = obs.structured

    def _observe_request(self, r: FinishedRequest) -> None:
        """vLLM's request-level histograms of one finished request: its phases as far as it got (vLLM observes them
        only for a request that sampled a token; its mean TPOT only past one token), its sizes."""
        labels, metrics = self._vllm_labels, r.metrics
        if metrics is not None and metrics.last_token_time_s is not None:
            for histogram, seconds in (
                (self.prefill_time, metrics.prefill_time_s),
                (self.decode_time, metrics.decode_time_s),
                (self.inference_time, metrics.inference_time_s),
                (self.request_tpot, metrics.tpot_s),
            ):
                if seconds is not None:
                    histogram.labels(**labels).observe(max(seconds, 0.0))
        if self._token_counts is not None:
            prompt, generation, max_tokens = self._token_counts
            prompt.labels(**labels).observe(r.num_prompt_tokens)
            generation.labels(**labels).observe(r.num_output_tokens)
            if metrics is not None and metrics.max_tokens:
                max_tokens.labels(**labels).observe(metrics.max_tokens)

    def observe_lora(self, max_loras: int, report: LoadReport) -> None:
        """vllm:lora_requests_info from a LoadReport (only on a node that serves adapters)."""
        if not max_loras:
            return
        self._lora_loaded = len(report.lora_resident)
        labels = (str(max_loras), ",".join(report.lora_waiting), ",".join(report.lora_running))
        if self._lora_info is None or self._lora_info[0] != labels:
            self._lora_info = (labels, time.time())  # vLLM's value: when the adapters last changed

    # -- scrape (HTTP thread) -----------------------------------------------------------------------

    def _collect_snapshot(self) -> Iterable[Metric]:
        stats, vllm, zoo = self._stats, self._vllm_labels, self._zoo_labels
        if stats is None or not vllm:
            return
        names, values = list(vllm), list(vllm.values())

        def gauge(name: str, doc: str, value: float) -> Metric:
            g = GaugeMetricFamily(name, doc, labels=names)
            g.add_metric(values, value)
            return g

        def counter(name: str, doc: str, value: float) -> Metric:
            c = CounterMetricFamily(name, doc, labels=names)
            c.add_metric(values, value)
            return c

        yield gauge(m.NUM_REQUESTS_RUNNING, "Requests in the running batch.", stats.num_running)
        yield gauge(m.NUM_REQUESTS_WAITING, "Requests waiting to be scheduled.", stats.num_waiting)
        yield gauge(m.NUM_REQUESTS_SWAPPED, "Requests preempted to host RAM.", stats.num_swapped)
        yield gauge(m.KV_CACHE_USAGE_PERC, "KV-cache usage: fraction of device blocks in use (1 = 100%).",
                    stats.kv_usage)  # fmt: skip
        yield counter(m.NUM_PREEMPTIONS, "Preemptions (swap or recompute).", stats.num_preemptions_total)
        yield counter(m.PROMPT_TOKENS, "Prompt tokens of admitted requests.", stats.num_prompt_tokens_total)
        yield counter(m.PROMPT_TOKENS_CACHED, "Prompt tokens found computed at admission (cache, KV from peers).",
                      stats.num_cached_prompt_tokens_total)  # fmt: skip
        yield counter(m.GENERATION_TOKENS, "Generated tokens.", stats.num_generation_tokens_total)
        yield counter(m.PREFIX_CACHE_QUERIES, "Prompt tokens looked up in the prefix cache.",
                      stats.prefix_cache_queries_total)  # fmt: skip
        yield counter(m.PREFIX_CACHE_HITS, "Prompt tokens found in the prefix cache.", stats.prefix_cache_hits_total)
        roofline = GaugeMetricFamily(m.DECODE_ROOFLINE_FRACTION,
                                     "Decode steps' share of the memory-bandwidth roofline (0..1; 0 = not measured).",
                                     labels=list(zoo))  # fmt: skip
        roofline.add_metric(list(zoo.values()), self._roofline)
        yield roofline
        zoo_names = [*zoo, "direction"]
        blocks = CounterMetricFamily(m.SWAPPED_BLOCKS, "KV blocks swapped, by direction.", labels=zoo_names)
        swapped_bytes = CounterMetricFamily(m.SWAPPED_BYTES, "KV bytes swapped, by direction.", labels=zoo_names)
        for direction, n in (("out", stats.num_swapped_out_blocks_total), ("in", stats.num_swapped_in_blocks_total)):
            blocks.add_metric([*zoo.values(), direction], n)
            swapped_bytes.add_metric([*zoo.values(), direction], n * self._bytes_per_block)
        yield blocks
        yield swapped_bytes
        malformed = CounterMetricFamily(m.MALFORMED_MESSAGES, "Messages refused unread, by kind and socket.",
                                        labels=["kind", "socket"])  # fmt: skip
        for code, n in dict(self._rejected).items():
            if n:
                malformed.add_metric([str(getattr(code, "value", code)), "control"], n)
        yield malformed
        yield from self._spec_metrics(names, values)
        structured = self._structured
        if structured is not None:
            yield counter(m.STRUCTURED_OUTPUT_REQUESTS, "Requests with a structured-output constraint admitted.",
                          structured.num_requests_total)  # fmt: skip
            yield counter(m.STRUCTURED_OUTPUT_FORCED_DRAFT_TOKENS, "Tokens a grammar forced, proposed as drafts.",
                          structured.num_forced_draft_tokens_total)  # fmt: skip
            yield counter(m.STRUCTURED_OUTPUT_FORCED_ACCEPTED_TOKENS, "Forced draft tokens the model accepted.",
                          structured.num_forced_accepted_tokens_total)  # fmt: skip
        lora_info = self._lora_info
        if lora_info is not None:
            info = GaugeMetricFamily(m.LORA_REQUESTS_INFO, "Running stats on LoRA requests.",
                                     labels=[*names, *m.LORA_INFO_LABELS])  # fmt: skip
            info.add_metric([*values, *lora_info[0]], lora_info[1])
            yield info
            yield gauge(m.LORA_ADAPTERS_LOADED, "LoRA adapters in device slots.", self._lora_loaded)

    def _spec_metrics(self, names: list[str], values: list[str]) -> Iterable[Metric]:
        spec = self._spec
        if spec is None:
            return
        for name, doc, value in (
            (m.SPEC_DECODE_NUM_DRAFTS, "Verification steps of one request with drafts.", spec.num_drafts_total),
            (m.SPEC_DECODE_NUM_DRAFT_TOKENS, "Draft tokens proposed.", spec.num_draft_tokens_total),
            (m.SPEC_DECODE_NUM_ACCEPTED_TOKENS, "Draft tokens accepted.", spec.num_accepted_tokens_total),
            (
                m.SPEC_DECODE_PREDICTION_DRAFT_TOKENS,
                "Draft tokens from requests' predicted outputs (OpenAI's prediction); not in vllm:spec_decode_*.",
                spec.num_prediction_draft_tokens_total,
            ),
            (
                m.SPEC_DECODE_PREDICTION_ACCEPTED_TOKENS,
                "Of those, accepted.",
                spec.num_prediction_accepted_tokens_total,
            ),
        ):
            c = CounterMetricFamily(name, doc, labels=names)
            c.add_metric(values, value)
            yield c
        per_pos = CounterMetricFamily(
            m.SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS,
            "Draft tokens accepted, by draft position.",
            labels=[*names, "position"],
        )
        for position, n in enumerate(spec.num_accepted_tokens_per_pos):
            per_pos.add_metric([*values, str(position)], n)
        yield per_pos

    # -- the KV data plane (event loop; agent/kv_data_plane.py's on_transfer hook) --------------------------

    def describe_kv_plane(self, refused: Mapping) -> None:
        """``refused``: the plane's receiver's live KVRefusal → count dict."""
        self._kv_refused = refused

    def observe_kv_transfer(self, direction: str, peer: str, nbytes: int, seconds: float) -> None:
        self.kv_transfer_bytes.labels(**self._zoo_labels, direction=direction, peer=peer).inc(nbytes)
        self.kv_transfer_seconds.labels(**self._zoo_labels, direction=direction).observe(max(seconds, 0.0))

    def describe_kv_events(self, publisher) -> None:
        """The node's KV cache events' publisher (agent/kv_events.py): its batches sent and dropped, and its replay
        requests by answer, at each scrape."""
        self._kv_events = publisher

    def _collect_kv_refused(self) -> Iterable[Metric]:
        if not self._zoo_labels:
            return
        zoo = self._zoo_labels
        if self._kv_events is not None:
            batches = CounterMetricFamily(m.KV_EVENTS_BATCHES, "KV cache event batches published, by outcome.",
                                          labels=[*zoo, "outcome"])  # fmt: skip
            batches.add_metric([*zoo.values(), "sent"], self._kv_events.num_sent)
            batches.add_metric([*zoo.values(), "dropped"], self._kv_events.num_dropped)
            yield batches
            if getattr(self._kv_events, "replay_endpoint", None) is not None:  # its replay socket's requests
                replays = CounterMetricFamily(m.KV_EVENTS_REPLAYS, "KV cache event replay requests, by answer.",
                                              labels=[*zoo, "outcome"])  # fmt: skip
                answers = {**self._kv_events.replays, "refused": self._kv_events.num_bad_replay_requests}
                for outcome, n in answers.items():
                    replays.add_metric([*zoo.values(), outcome], n)
                yield replays
        refused = CounterMetricFamily(m.KV_TRANSFER_REFUSED, "KV transfers this node refused, by reason.",
                                      labels=[*zoo, "reason"])  # fmt: skip
        for reason, n in dict(self._kv_refused).items():
            refused.add_metric([*zoo.values(), str(getattr(reason, "value", reason))], n)
        yield refused
