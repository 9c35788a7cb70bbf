"""The fleet simulator: a discrete-event loop on a virtual clock over the production core classes.

Per node it drives the real ``Scheduler`` (and so the real ``KVCacheManager``, prefix cache, chunked
prefill, swap/recompute preemption) with a ``SimModelRunner``; in front of the nodes, the real
``ClusterRegistry`` fed with the same ``NodeHello`` / ``LoadReport`` messages an agent sends, and a real
router ``Policy`` chosen by name. No sockets, no sleeping: time jumps from event to event::

    events (heap, by virtual time, then by push order)
      arrival     route: registry.snapshot(model, cell) → policy.choose → registry.on_routed →
                  policy.on_routed → node.add_request; an idle node is kicked
      kick        idle node with work: schedule() → runner.execute() (predicted step_s) → step_done at +step_s
      step_done   update_from_output(); first tokens → registry.on_first_token, finishes →
                  registry.on_finished; a load report if one fell due during the step; next step at once
      report      every report_interval_s per node (phase-shifted): a LoadReport built as the agent builds
                  it (controlplane/agent.py EngineLoop._load_report) → registry.report; a busy node reports
                  at the end of its step, as the agent's engine thread does

The control plane's network and the agent's queues take no time here (they are tens of microseconds
against steps of milliseconds); admission control (429s) is not simulated: every request is routed.

Determinism: one seed drives the prompt tokens; events at equal times run in push order; no wall clock
is read except to measure the simulator's own speed.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field

from backends.sim.cost_model import NodeHardware
from backends.sim.model_shapes import num_params
from backends.sim.runner import SimModelRunner
from controlplane.engine.batch import RunnerOutput, SchedulerOutput
from controlplane.engine.model_runner import KVCacheSpec
from controlplane.engine.request import Request
from controlplane.engine.sampling_params import SamplingParams
from controlplane.engine.scheduler import Scheduler
from controlplane.engine.step_rates import StepRates, classify_batch
from controlplane.engine_loop import build_load_report
from controlplane.hardware import GPU_TABLE, power_score
from controlplane.registry import ClusterRegistry
from controlplane.router.block_hashes import prompt_block_hashes
from controlplane.router.policies import make_policy
from controlplane.router.policy import RouteRequest
from controlplane.router.router_config import RouterConfig
from sim.fleet import Fleet, NodeSpec
from sim.workload import PromptFactory, Workload
from transport.messages import HardwareInfo, KVInfo, LoadReport, NodeHello

_ARRIVAL, _KICK, _STEP_DONE, _REPORT = 0, 1, 2, 3


class VirtualClock:
    """The simulator's clock (``Clock`` protocol); only the event loop moves it."""

    __slots__ = ("now_s",)

    def __init__(self) -> None:
        self.now_s = 0.0

    def now(self) -> float:
        return self.now_s


@dataclass(slots=True)
class RequestRecord:
    req_id: str
    traffic_class: str
    arrival_s: float
    num_prompt_tokens: int
    max_tokens: int
    node_id: str | None = None  # None: no node could take it
    first_token_s: float | None = None
    finish_s: float | None = None
    num_output_tokens: int = 0
    num_cached_prompt_tokens: int = 0
    num_preemptions: int = 0

    @property
    def ttft_s(self) -> float:
        return math.inf if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return math.inf if self.finish_s is None else self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> float:
        """Mean time per output token after the first (0 for a one-token answer)."""
        if self.finish_s is None or self.first_token_s is None:
            return math.inf
        if self.num_output_tokens <= 1:
            return 0.0
        return (self.finish_s - self.first_token_s) / (self.num_output_tokens - 1)


@dataclass(slots=True)
class NodeResult:
    node_id: str
    cell: str
    profile: str
    tp: int
    num_steps: int
    busy_s: float
    num_preemptions: int
    num_swapped_out_blocks: int
    num_swapped_in_blocks: int
    num_recomputed_tokens: int
    prefix_cache_hit_rate: float
    num_requests: int


@dataclass(slots=True)
class SimResult:
    policy: str
    workload: str
    time_scale: float
    records: list[RequestRecord]
    nodes: list[NodeResult]
    end_s: float  # virtual time of the last event
    arrivals_end_s: float
    wall_s: float
    num_events: int
    drained: bool  # every routed request finished before the drain limit
    info: dict = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        """Virtual seconds simulated per wall second."""
        return self.end_s / self.wall_s if self.wall_s > 0 else math.inf


def node_hardware_info(hardware: NodeHardware) -> HardwareInfo:
    """What a simulated node says in its hello: the datasheet of one GPU times the TP degree (a TP node is
    one serving unit with tp x the bandwidth, compute and memory)."""
    spec = GPU_TABLE[hardware.profile]
    tp = hardware.tp
    return HardwareInfo(
        device_name=f"{tp} x {spec.gpu_type} (simulated)" if tp > 1 else f"{spec.gpu_type} (simulated)",
        gpu_type=spec.gpu_type,
        compute_capability=spec.compute_capability,
        memory_gib=spec.memory_gib * tp,
        memory_bandwidth_gbps=spec.memory_bandwidth_gbps * tp,
        peak_tflops=spec.peak_tflops * tp,
        source=f"profile:{spec.profile}",
    )


class SimNode:
    """One simulated node: the real scheduler, a SimModelRunner, and the agent's load bookkeeping."""

    def __init__(self, spec: NodeSpec, fleet: Fleet, clock: VirtualClock) -> None:
        model, engine = fleet.model, fleet.engine
        self.spec = spec
        self.node_id = spec.node_id
        self.cache_config = engine.cache_config(model, spec.hardware)
        self.scheduler_config = engine.scheduler_config(model)
        self.runner = SimModelRunner(model, spec.hardware, block_size=engine.block_size)
        self.runner.initialize_kv_cache(
            KVCacheSpec(
                self.cache_config.num_device_blocks, self.cache_config.num_host_blocks, self.cache_config.block_size
            )
        )
        self.scheduler = Scheduler(self.scheduler_config, self.cache_config, clock)
        self.eos_token_id = model.eos_token_id
        hardware = node_hardware_info(spec.hardware)
        self.hello = NodeHello(
            node_id=spec.node_id,
            model=model.name,
            backend="sim",
            hardware=hardware,
            kv=KVInfo(
                num_device_blocks=self.cache_config.num_device_blocks,
                num_host_blocks=self.cache_config.num_host_blocks,
                block_size=self.cache_config.block_size,
                bytes_per_block=self.runner.kv_bytes_per_block(self.cache_config.block_size),
            ),
            max_model_len=self.scheduler_config.max_model_len,
            power_score=power_score(hardware),
            cell=spec.cell,
        )
        self.busy = False
        self.kicked = False
        self.report_due = False
        self.in_flight: tuple[SchedulerOutput, RunnerOutput] | None = None
        # the agent's bookkeeping (EngineLoop): prompts until their first token, decoding requests
        self.prompt_lens: dict[str, int] = {}
        self.decoding: set[str] = set()
        self.num_finished_total = 0
        self.num_requests = 0
        self.rates = StepRates()

    def add_request(self, req_id: str, token_ids: list[int], max_tokens: int, now_s: float) -> None:
        params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
        self.scheduler.add_request(Request(req_id, token_ids, params, now_s, eos_token_id=self.eos_token_id))
        self.prompt_lens[req_id] = len(token_ids)
        self.num_requests += 1

    def start_step(self) -> float | None:
        """Schedule and 'run' a step; its predicted time, or None when there is nothing to do."""
        out = self.scheduler.schedule()
        if not out.requests and out.is_empty:
            return None
        runner_out = self.runner.execute(out)
        self.in_flight = (out, runner_out)
        self.busy = True
        return runner_out.step_time_s

    def finish_step(self):
        """Commit the step in flight; returns the scheduler's RequestUpdates."""
        out, runner_out = self.in_flight
        self.in_flight = None
        self.busy = False
        updates = self.scheduler.update_from_output(out, runner_out)
        self.rates.observe(runner_out.step_time_s, *classify_batch(out))
        return updates

    def load_report(self) -> LoadReport:
        """Built as the agent's engine loop builds it (rates from the steps since the last report)."""
        return build_load_report(
            self.node_id,
            self.scheduler.make_stats(),
            self.rates,
            queued_prefill_tokens=sum(self.prompt_lens.values()),
            decode_batch_size=len(self.decoding),
            num_requests_finished_total=self.num_finished_total,
        )

    def result(self) -> NodeResult:
        stats = self.scheduler.make_stats()
        hw = self.spec.hardware
        return NodeResult(
            self.node_id,
            self.spec.cell,
            hw.profile,
            hw.tp,
            self.runner.num_steps,
            self.runner.busy_time_s,
            stats.num_preemptions_total,
            stats.num_swapped_out_blocks_total,
            stats.num_swapped_in_blocks_total,
            stats.num_recomputed_tokens_total,
            stats.prefix_cache_hit_rate,
            self.num_requests,
        )


def default_router_config(fleet: Fleet, policy: str) -> RouterConfig:
    """The router settings an operator of this fleet would write: the policy, the cells, the model's size."""
    return RouterConfig(
        policy=policy,
        cells_by_traffic_class=dict(fleet.cells_by_traffic_class),
        model_params_b={fleet.model.name: num_params(fleet.model) / 1e9},
    )


class FleetSimulator:
    def __init__(
        self,
        fleet: Fleet,
        workload: Workload,
        policy: str,
        *,
        router_config: RouterConfig | None = None,
        seed: int = 0,
        report_interval_s: float = 0.25,
        drain_limit_s: float = 600.0,
    ) -> None:
        if report_interval_s <= 0:
            raise ValueError(f"report_interval_s must be > 0, got {report_interval_s}")
        self.fleet = fleet
        self.workload = workload
        self.policy_name = policy
        self.router_config = router_config or default_router_config(fleet, policy)
        self.seed = seed
        self.report_interval_s = report_interval_s
        self.drain_limit_s = drain_limit_s

    def run(self) -> SimResult:
        wall_start = time.perf_counter()
        clock = VirtualClock()
        fleet, model = self.fleet, self.fleet.model
        nodes = [SimNode(spec, fleet, clock) for spec in fleet.nodes]
        node_index = {n.node_id: i for i, n in enumerate(nodes)}
        registry = ClusterRegistry(clock, heartbeat_timeout_s=1e18)
        for node in nodes:
            registry.join(node.hello)
        policy = make_policy(self.policy_name, self.router_config)
        router_config = self.router_config
        prompts = PromptFactory(model.vocab_size, self.seed)
        block_size = fleet.engine.block_size
        requests = self.workload.requests
        records: dict[str, RequestRecord] = {}
        all_records: list[RequestRecord] = []

        heap: list[tuple[float, int, int, int]] = []
        seq = 0
        interval = self.report_interval_s
        for i in range(len(nodes)):
            heapq.heappush(heap, (interval * (i + 1) / len(nodes), seq, _REPORT, i))
            seq += 1
        num_arrivals = len(requests)
        next_arrival = 0
        unfinished = 0
        num_events = 0
        arrivals_end_s = requests[-1].arrival_s if requests else 0.0
        deadline_s = arrivals_end_s + self.drain_limit_s
        inf = math.inf
        push, pop = heapq.heappush, heapq.heappop

        while True:
            arrival_s = requests[next_arrival].arrival_s if next_arrival < num_arrivals else inf
            if next_arrival >= num_arrivals and unfinished == 0:
                break
            if heap[0][0] <= arrival_s:
                now, _, kind, i = pop(heap)
                if now > deadline_s:
                    break
                clock.now_s = now
                num_events += 1
                node = nodes[i]
                if kind == _REPORT:
                    if node.busy:
                        node.report_due = True
                    else:
                        registry.report(node.load_report())
                    push(heap, (now + interval, seq, _REPORT, i))
                    seq += 1
                    continue
                if kind == _STEP_DONE:
                    for u in node.finish_step():
                        rec = records[u.req_id]
                        if u.new_token_ids:
                            if rec.first_token_s is None:
                                rec.first_token_s = now
                                del node.prompt_lens[u.req_id]
                                node.decoding.add(u.req_id)
                                registry.on_first_token(node.node_id, u.req_id)
                            rec.num_output_tokens += len(u.new_token_ids)
                        if u.finished:
                            rec.finish_s = now
                            request = node.scheduler.get_request(u.req_id)
                            if request is not None:
                                rec.num_cached_prompt_tokens = request.num_cached_prompt_tokens
                                rec.num_preemptions = request.num_preemptions
                            node.decoding.discard(u.req_id)
                            node.num_finished_total += 1
                            del records[u.req_id]
                            unfinished -= 1
                            registry.on_finished(node.node_id, u.req_id)
                    if node.report_due:
                        node.report_due = False
                        registry.report(node.load_report())
                else:  # _KICK
                    node.kicked = False
                    if node.busy:
                        continue
                step_s = node.start_step()
                if step_s is not None:
                    push(heap, (now + step_s, seq, _STEP_DONE, i))
                    seq += 1
                continue

            # an arrival
            index = next_arrival
            next_arrival += 1
            clock.now_s = arrival_s
            num_events += 1
            trace_request = requests[index]
            req_id = f"r{index}"
            rec = RequestRecord(
                req_id,
                trace_request.traffic_class,
                arrival_s,
                trace_request.num_prompt_tokens,
                trace_request.max_tokens,
            )
            all_records.append(rec)
            token_ids = prompts.prompt_token_ids(trace_request, index)
            cell = router_config.cell_for(trace_request.traffic_class)
            snapshot = registry.snapshot(model=model.name, cell=cell)
            route = RouteRequest(
                request_id=req_id,
                model=model.name,
                num_prompt_tokens=len(token_ids),
                max_tokens=trace_request.max_tokens,
                block_hashes=prompt_block_hashes(token_ids, block_size),
                traffic_class=trace_request.traffic_class,
            )
            node_id = policy.choose(route, snapshot)
            if node_id is None:
                continue
            i = node_index[node_id]
            node = nodes[i]
            max_tokens = min(trace_request.max_tokens, node.scheduler_config.max_model_len - len(token_ids))
            if max_tokens < 1:
                continue  # cannot serve a single token: counted as failed (node_id None)
            rec.node_id = node_id
            registry.on_routed(node_id, req_id, len(token_ids))
            policy.on_routed(route, node_id)
            node.add_request(req_id, token_ids, max_tokens, arrival_s)
            records[req_id] = rec
            unfinished += 1
            if not node.busy and not node.kicked:
                node.kicked = True
                push(heap, (arrival_s, seq, _KICK, i))
                seq += 1

        wall_s = time.perf_counter() - wall_start
        return SimResult(
            policy=self.policy_name,
            workload=self.workload.name,
            time_scale=self.workload.time_scale,
            records=all_records,
            nodes=[n.result() for n in nodes],
            end_s=clock.now_s,
            arrivals_end_s=arrivals_end_s,
            wall_s=wall_s,
            num_events=num_events,
            drained=unfinished == 0,
        )
