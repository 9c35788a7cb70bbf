"""The fleet stats stream: the control plane publishes a FleetStats every interval; dashboards subscribe.

    ControlPlane ── take_events() ──► FleetObserver.poll() ──► ControlPlaneExporter (histograms)
         │                                  │                └► LatencyWindows ("app" figures)
         └── stats() ─────────────────────► FleetObserver.fleet_stats() ◄── EbpfFigures ◄── ebpf_source()
                                                    │                         (ZooProbe.read(), optional)
    StatsPublisher (actor, owns the PUB socket) ────┘──► PUB tcp://127.0.0.1:5557 ──► SUB: zoo top, tests

PUB/SUB: a slow or absent subscriber never slows the control plane (PUB drops at its high-water mark);
a subscriber that connects before the control plane starts, or across its restart, is reconnected by
ZeroMQ by itself. Frames are the ordinary wire frames ([type 40][msgpack FleetStats]).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping

import anyio
import zmq
import zmq.asyncio

from observe.latency_window import EbpfFigures, LatencyWindows
from transport.actor import Actor
from transport.codec import WireError, decode
from transport.messages import FleetStats, NodeStats
from transport.sockets import RECONNECT_IVL_MAX_MS, RECONNECT_IVL_MS, Channel

log = logging.getLogger(__name__)

DEFAULT_STATS_ENDPOINT = "tcp://127.0.0.1:5557"
STATS_HWM = 64  # FleetStats queued per subscriber before PUB drops (a stale snapshot is worthless anyway)

EbpfSource = Callable[[], Mapping | None]


class FleetObserver:
    """Drains the control plane's latency events into the exporter and the windows; builds FleetStats.

    cp: the ControlPlane (``take_events()``, ``stats()``, ``hellos``). exporter: a ControlPlaneExporter or
    None. ebpf_source: returns the latest eBPF snapshot (see observe/latency_window.py) or None when no
    probe is attached; set it any time (``zoo probe`` wiring).
    """

    def __init__(self, cp, exporter=None, ebpf_source: EbpfSource | None = None) -> None:
        self.cp = cp
        self.exporter = exporter
        self.ebpf_source = ebpf_source
        self.windows = LatencyWindows()
        self.ebpf = EbpfFigures()
        self.started_ns = time.monotonic_ns()
        self._labels: dict[str, dict[str, str]] = {}

    def poll(self) -> None:
        for e in self.cp.take_events():
            self.windows.add(e.kind, e.node_id, e.value_s)
            if self.exporter is not None:
                self.exporter.observe(e.kind, self._node_labels(e.node_id), e.value_s)

    def _node_labels(self, node_id: str) -> dict[str, str]:
        labels = self._labels.get(node_id)
        hello = self.cp.hellos.get(node_id)
        if labels is None or (hello is not None and labels["model"] != hello.model):
            labels = {
                "model": hello.model if hello else "",
                "node": node_id,
                "gpu_type": hello.hardware.gpu_type if hello else "",
                "cell": hello.cell if hello else "",
            }
            self._labels[node_id] = labels
        return labels

    def _ebpf_snapshot(self) -> Mapping | None:
        if self.ebpf_source is None:
            return None
        try:
            return self.ebpf_source()
        except Exception as e:  # the probe is optional: its failure is shown, never fatal
            log.warning("eBPF source failed: %s", e)
            return {"status": f"error: {e}"}

    def fleet_stats(self, seq: int) -> FleetStats:
        self.poll()
        stats = self.cp.stats()
        nodes = [_node_stats(node_id, n) for node_id, n in stats["nodes"].items()]
        _add_spec_pairs(nodes, stats.get("spec_pairs"))
        latencies = self.windows.figures() + self.ebpf.update(self._ebpf_snapshot())
        requests = dict(stats["requests"])
        inflight = requests.pop("inflight", 0)
        malformed: dict[str, int] = {}
        for by_kind in stats["rejected_messages"].values():
            for kind, n in by_kind.items():
                malformed[kind] = malformed.get(kind, 0) + n
        return FleetStats(
            seq=seq,
            started_ns=self.started_ns,
            policy=stats["policy"],
            nodes=nodes,
            latencies=latencies,
            num_requests_total=requests,
            num_inflight=inflight,
            num_tokenizing=(stats.get("tokenizing") or {}).get("waiting", 0),
            rejected_requests_total=dict(stats["refused"]),
            malformed_messages_total=malformed,
            num_preemptions_total=sum(n.num_preemptions_total for n in nodes if n.state != "dead"),
            ebpf_status=self.ebpf.status,
            migrations_total=dict(stats.get("migrations", {})),
            kv_migrated_bytes_total=getattr(getattr(self.cp, "kv_moves", None), "kv_bytes_total", 0),
            slo_forecast_late_share=stats.get("slo_forecast", {}).get("recent_late_share", 0.0),
            capacity=[
                (pool["model"], pool["cell"], v["gpu_type"], v["nodes"], v["desired"])
                for pool in stats.get("capacity") or []
                for v in pool["variants"]
            ],
            capacity_growth=[
                (pool["model"], pool["cell"], pool["growth"])
                for pool in stats.get("capacity") or []
                if pool.get("growth", 1.0) > 1.0
            ],
            capacity_waiting={
                pool["model"]: pool["waiting"] for pool in stats.get("capacity") or [] if pool.get("waiting", 0) > 0
            },
            overload_mode=(stats.get("slo_forecast", {}).get("overload") or {}).get("on"),
            tpot_lost_redirects_total=(stats.get("slo_forecast", {}).get("tpot_lost") or {}).get("redirects"),
            router_knobs=dict((stats.get("router") or {}).get("knobs", {})),
            router_reloads=dict((stats.get("router") or {}).get("reloads", {})),
            draining=bool(stats.get("draining", False)),
        )


def _add_spec_pairs(nodes: list[NodeStats], pairs: dict | None) -> None:
    """Each verifier's drafter (as its agent reports it), measured acceptance and predicted TPOTs."""
    if not pairs:
        return
    for node in nodes:
        node.spec_drafter = pairs["active"].get(node.node_id, "")
        node.spec_acceptance_rate = pairs["acceptance"].get(node.node_id, -1.0)
        prediction = pairs["predictions"].get(node.node_id)
        if prediction is not None:
            node.spec_tpot_plain_s = prediction["tpot_plain_s"]
            node.spec_tpot_paired_s = prediction["tpot_paired_s"]


def _seconds(ms: float | None) -> float | None:
    return None if ms is None else ms / 1e3


def _node_stats(node_id: str, n: dict) -> NodeStats:
    return NodeStats(
        node_id=node_id,
        state=n.get("state") or ("up" if n["alive"] else "dead"),  # up | suspect | draining | dead
        gpu_type=n["gpu_type"] or "",
        cell=n["cell"] or "",
        model=n["model"] or "",
        power_score=n["power_score"] or 0.0,
        num_running=n["num_running"],
        num_waiting=n["num_waiting"],
        num_swapped=n["num_swapped"],
        kv_usage=n["kv_usage"],
        num_inflight=n["num_inflight"],
        ttft_p50_s=_seconds(n["ttft_ms_p50"]),
        ttft_p99_s=_seconds(n["ttft_ms_p99"]),
        tpot_p50_s=_seconds(n["tpot_ms_p50"]),
        tpot_p99_s=_seconds(n["tpot_ms_p99"]),
        num_served_total=n["requests_served"],
        num_failed_total=n["requests_failed"],
        num_routed_total=n.get("requests_routed", 0),
        num_preemptions_total=n.get("num_preemptions_total", 0),
        metrics_url=n.get("metrics_url", ""),
        kernels=n.get("kernels", ""),
        config_digest=n.get("config_digest", ""),
        decode_roofline_fraction=n.get("decode_roofline_fraction", 0.0),
        profiling=n.get("profiling", ""),
        sleep_level=n.get("sleep_level", 0),
        role=n.get("role", "both"),
        host=n.get("host", ""),
        rack=n.get("rack", ""),
    )


class StatsPublisher(Actor):
    """Publishes ``observer.fleet_stats()`` every ``interval_s`` on a PUB socket it binds at ``endpoint``
    (``tcp://127.0.0.1:0``: a free port). Start with ``await tg.start(pub.run)``: reports the bound endpoint."""

    def __init__(
        self,
        observer: FleetObserver,
        endpoint: str = DEFAULT_STATS_ENDPOINT,
        interval_s: float = 0.5,
        *,
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        super().__init__()
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.observer = observer
        self.endpoint = endpoint
        self.interval_s = interval_s
        self._ctx = context
        self._own_ctx = context is None
        self._channel: Channel | None = None
        self.num_published = 0

    async def setup(self) -> str:
        if self._ctx is None:
            self._ctx = zmq.asyncio.Context()
        sock = self._ctx.socket(zmq.PUB)
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, STATS_HWM)
            sock.bind(self.endpoint)
            self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        except BaseException:
            sock.close(linger=0)
            raise
        self._channel = Channel(sock)
        return self.endpoint

    def loops(self):
        return (self._publish_loop,)

    async def _publish_loop(self) -> None:
        while True:
            msg = self.observer.fleet_stats(self.num_published)
            with contextlib.suppress(zmq.Again):  # PUB does not block; a full pipe just loses this snapshot
                self._channel.send(msg)
            self.num_published += 1
            await anyio.sleep(self.interval_s)

    async def cleanup(self) -> None:
        if self._channel is not None:
            self._channel.close()
        if self._own_ctx and self._ctx is not None:
            self._ctx.term()


async def subscribe(endpoint: str, context: zmq.asyncio.Context | None = None) -> AsyncIterator[FleetStats]:
    """FleetStats as they arrive from ``endpoint``, forever (ZeroMQ reconnects across publisher restarts).
    Frames that are not a FleetStats are skipped."""
    ctx = context or zmq.asyncio.Context.instance()
    sock = ctx.socket(zmq.SUB)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, STATS_HWM)
        sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(endpoint)
        while True:
            frames = await sock.recv_multipart()
            try:
                msg, _ = decode(frames)
            except WireError as e:
                log.debug("stats stream: skipped a bad frame set: %s", e.message)
                continue
            if isinstance(msg, FleetStats):
                yield msg
    finally:
        sock.close(linger=0)
