"""What request spans cost the control plane: the same requests through an in-process control plane and agent
(trivial engine: no model, so the fleet's own path is what is timed), with tracing off and on, in alternated rounds
of one run. "on": every request carries a sampled traceparent, the control plane records its ``llm_request`` span
and the agent its ``node_request`` span, both exported over OTLP/HTTP to a collector on loopback
(observe/otlp_receiver.py, taking them unread) by the SDK's batch thread, in this process (its CPU counted).
"on_10pct": requests without a caller's context, the control plane sampling 10% of them
(--otlp-traces-sample-ratio 0.1). Prints JSON.

    PYTHONPATH=. .venv/bin/python scripts/tracing_overhead.py
"""

from __future__ import annotations

import json
import platform
import statistics
import time

import anyio

from agent.agent_config import AgentConfig
from agent.node_agent import NodeAgent
from backends.fake import ByteTokenizer, build_trivial_engine, cpu_test_hardware
from controlplane.request_spans import RequestSpans
from controlplane.router.router_config import RouterConfig
from controlplane.server import ControlPlane, ControlPlaneConfig
from engine.sampling_params import SamplingParams
from observe.node_spans import NodeSpans
from observe.otlp_receiver import OtlpReceiver
from observe.span_export import SpanExport, TracingConfig
from transport.trace_context import child_of

NUM_REQUESTS = 1000
CONCURRENCY = 16
ROUNDS = 6
MAX_TOKENS = 4


async def _round(cp, tracer: NodeSpans, spans: RequestSpans | None, callers: bool) -> tuple[float, float]:
    """(wall s, process CPU s) for NUM_REQUESTS requests, CONCURRENCY at a time (``callers``: each with a sampled
    traceparent of its own)."""
    cp.path.spans = spans
    tracer.export = spans.export if spans is not None else _Off()
    limiter = anyio.Semaphore(CONCURRENCY)
    sampling = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)

    async def one(i: int) -> None:
        async with limiter:
            headers = child_of(None).headers() if callers else None  # a caller's sampled context
            chunks = cp.generate(f"r{i}", model=None, prompt="hello there", sampling=sampling, trace_headers=headers)
            async for _ in chunks:
                pass

    wall, cpu = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as tg:
        for i in range(NUM_REQUESTS):
            tg.start_soon(one, i)
    if spans is not None:
        await anyio.to_thread.run_sync(spans.export.flush)  # the export's work is counted in its round
    return time.perf_counter() - wall, time.process_time() - cpu


class _Off:
    def emit(self, record) -> None:
        pass


async def main() -> dict:
    sink = OtlpReceiver(decode=False).start()  # a collector that takes exports unread: it costs nothing
    export = SpanExport(TracingConfig(endpoint=sink.endpoint, service_name="bench", max_queue_size=1 << 16))
    arms = {"off": (None, False), "on": (RequestSpans(export), True), "on_10pct": (RequestSpans(export, 0.1), False)}
    config = ControlPlaneConfig(
        agent_endpoint="tcp://127.0.0.1:0", client_endpoint=None, model_name="fake-bytes",
        router=RouterConfig(policy="round_robin"), report_interval_s=0.05,
    )  # fmt: skip
    cp = ControlPlane(config, ByteTokenizer())
    tracer = NodeSpans(_Off(), "n0")
    rows: dict[str, list[tuple[float, float]]] = {arm: [] for arm in arms}
    async with anyio.create_task_group() as tg:
        await tg.start(cp.run)
        agent = NodeAgent(cp.agent_endpoint, build_trivial_engine(), AgentConfig(node_id="n0", model_name="fake-bytes"),
                          hardware=cpu_test_hardware(), tracer=tracer)  # fmt: skip
        await tg.start(agent.run)
        await cp.wait_until(lambda: len(cp.registry) == 1, 30)
        await _round(cp, tracer, None, False)  # warm-up
        order = list(arms)
        for r in range(ROUNDS):
            for arm in order[r % len(order) :] + order[: r % len(order)]:  # each arm first in turn
                rows[arm].append(await _round(cp, tracer, *arms[arm]))
        tg.cancel_scope.cancel()
    export.close()
    sink.close()
    med = {arm: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for arm, v in rows.items()}
    per = {arm: {"wall_ms_per_request": 1e3 * w / NUM_REQUESTS, "cpu_us_per_request": 1e6 * c / NUM_REQUESTS}
           for arm, (w, c) in med.items()}  # fmt: skip
    return {
        "what": __doc__.split("\n\n")[0].replace("\n", " "),
        "host": platform.processor() or platform.machine(),
        "requests_per_round": NUM_REQUESTS, "concurrency": CONCURRENCY, "rounds_per_arm": ROUNDS,
        "max_tokens": MAX_TOKENS,
        "per_request_median": per,
        "over_off": {arm: {"wall": med[arm][0] / med["off"][0], "cpu": med[arm][1] / med["off"][1]} for arm in arms},
        "added_cpu_us_per_request": {
            arm: per[arm]["cpu_us_per_request"] - per["off"]["cpu_us_per_request"] for arm in arms
        },
        "spans_queued": export.emitted, "spans_dropped": export.dropped, "export_batches": export.export_batches,
        "collector_exports_received": sink.requests,
        "rounds": {arm: [[round(w, 3), round(c, 3)] for w, c in v] for arm, v in rows.items()},
    }  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(anyio.run(main), indent=1))
