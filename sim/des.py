"""The fleet simulator: a discrete-event loop on a virtual clock over the production code of a fleet.

Per node it drives the agent's own node loop — ``NodeCore`` (agent/node_core.py) around an
``LLMEngine`` whose runner is a ``SimModelRunner`` — so the real scheduler, KV manager, prefix cache,
chunked prefill, swap/recompute preemption and load-report bookkeeping all run as on an agent. In front
of the nodes, requests go through the control plane's own intake (controlplane/request_intake.py:
validation, the policy chosen by name, admission control, so 429s happen here too) against the real
``ClusterRegistry``, fed with the same ``NodeHello`` / ``LoadReport`` messages agents send. No sockets,
no sleeping: time jumps from event to event::

    events (heap, by virtual time, then by push order)
      arrival     place_request (intake → policy.choose → admission.check) → registry.on_routed →
                  policy.on_routed → node.core.add; an idle node is kicked; a refusal is recorded
      kick        idle node with work: core.start_step() (schedule + predicted step_s) → step_done at +step_s;
                  pure decode steps up to the next report / first finish as one run (engine/multi_step.py), and a
                  step's leading decode rows in bulk (engine/mixed_step.py): neither changes a result
      step_done   core.finish_step(); its KV cache events → policy.on_kv_events (a policy that wants them:
                  Dynamo's default); first tokens → registry.on_first_token, finishes →
                  registry.on_finished; a load report if one fell due during the step; next step at once
      report      every report_interval_s per node (phase-shifted; a policy's own ``metrics_refresh_s`` when it
                  declares one: the freshness of its deployment): core.load_report() → registry.report;
                  a busy node reports at the end of its step, as the agent's engine thread does
      land        (--pd-split only, sim/split.py) a request's KV reached its decode node after its first token on
                  the prefill node: it continues there (or waits for room, landing after that node's next steps)
      scale/join  sim/autoscale.py's sample; a node joins: the requests held for one (cold_start.py) try again

The control plane's network and the agent's queues take no time here (they are tens of microseconds
against steps of milliseconds).

Determinism: one seed drives the prompt tokens; events at equal times run in push order; no wall clock
is read except to measure the simulator's own speed.
"""

from __future__ import annotations

import bisect
import gc
import heapq
import math
import time
from dataclasses import dataclass, field

from agent.node_core import NodeCore
from backends.sim.cost_model import node_hardware_info
from backends.sim.engine import SimTokenizer
from controlplane.admission import AdmissionConfig, AdmissionControl
from controlplane.request_intake import place_request
from controlplane.router.policies import make_policy
from controlplane.router.router_config import RouterConfig
from engine.kv.block_hash import keep_recent_chains
from engine.llm_engine import PendingStep
from engine.multi_step import DecodeSteps
from engine.request import RequestStatus
from engine.sampling_params import SamplingParams
from sim.adapters import AdapterMix
from sim.fleet import Fleet, NodeSpec
from sim.split import SplitConfig, SplitRun
from sim.workload import PromptFactory, Workload
from transport.messages import ClientGenerate, ErrorReply

# the fast paths: several pure decode steps as one event (engine/multi_step.py; off: NodeCore.plan_decode_steps
# patched, bench/sim_speed.py) and a step's decode rows in bulk (engine/mixed_step.py); neither changes a result
MIXED_STEPS = True
RECENT_CHAIN_BLOCKS = 1 << 18  # the router's prompt hash chains kept for the nodes' first lookups (~100 MB at most)

_ARRIVAL, _KICK, _STEP_DONE, _REPORT = 0, 1, 2, 3
_RUNNING = RequestStatus.RUNNING
_LAND = 4  # a prefill/decode hand-off's KV arrived (sim/split.py); the event's index is the move's slot
# an autoscaler's sample (sim/autoscale.py); a provisioned node joins; a request held for a node tries again
_SCALE, _JOIN, _RETRY = 5, 6, 7  # (the event's index: the node's, the request's)


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
    node_id: str | None = None  # None: refused (see ``refusal``) or never sent
    refusal: str | None = None  # the ErrorCode value of a refusal (overloaded, no_node, prompt_too_long ...)
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
    step_budget_tokens: int = 0  # the node's max_num_batched_tokens (fleet step_budget)


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


class SimNode:
    """One simulated node: the agent's NodeCore around an engine whose runner predicts step times."""

    def __init__(self, spec: NodeSpec, fleet: Fleet, clock: VirtualClock) -> None:
        self.spec = spec
        self.node_id = spec.node_id
        self.core = NodeCore(fleet.node_engine(spec, clock=clock), spec.node_id)
        self.core.profile()  # as an agent does at start-up: measured (here: predicted) rates in its hello
        # a step's decode rows in bulk (engine/mixed_step.py) where each step is not measured (the roofline)
        self.core.engine.bulk_decode_rows = MIXED_STEPS and self.core.roofline is None
        self.step_budget_tokens = fleet.engine.size_step_budget(self.core)  # per node under step_budget = "sarathi"
        runner = self.core.engine.runner
        self._profile_steps, self._profile_busy_s = runner.num_steps, runner.busy_time_s  # not the trace's work
        self.hello = self.core.hello(
            model=fleet.model.name, backend="sim", hardware=node_hardware_info(spec.hardware), cell=spec.cell
        )
        self.busy = False
        self.kicked = False
        self.report_due = False
        self.pending: PendingStep | None = None  # the step in flight, finished at its STEP_DONE event
        self.num_requests = 0
        self.run: DecodeSteps | None = None  # pure decode steps in flight as one (engine/multi_step.py)
        self.next_report_s = math.inf  # when this node's next REPORT event falls
        self.done_seq = -1  # the push number of its live STEP_DONE event (a cut run leaves a stale one)

    def start(self, now: float, deadline_s: float) -> float | None:
        """Start the next step at ``now``: several at once when they are provably pure decode steps up to the
        step in flight at this node's next report (a run, cut at the step in flight when a request arrives:
        ``cut_run``); the end time of what started, or None when the node is idle."""
        run = self.core.plan_decode_steps(now, self.next_report_s, deadline_s)
        if run is not None:
            self.run = run
            self.busy = True
            return run.end_s
        step_s = self.start_step()
        return None if step_s is None else now + step_s

    def cut_run(self, now: float) -> float | None:
        """A request arrived at ``now``: the run ends with the step in flight then (the next step schedules the
        newcomer, as after a plain step). The run's new end, or None when it ends there anyway."""
        run = self.run
        num_steps = bisect.bisect_right(run.end_times_s, now) + 1  # the steps done by now, and the one in flight
        if num_steps >= run.num_steps:
            return None
        run.truncate(num_steps)
        return run.end_s

    def start_step(self) -> float | None:
        """Start a step; its predicted time, or None when the node has nothing to run (it is idle)."""
        pending = self.core.start_step()
        if pending is None:
            return None
        if pending.decode is None and pending.batch.is_empty:  # only finished requests to forget: takes no time
            self.core.finish_step(pending)
            return None
        self.pending = pending
        self.busy = True
        return pending.step_time_s

    def finish_step(self, records: dict[str, RequestRecord], count_tokens: bool):
        """Apply the step in flight at the clock's now; the RequestOutputs of the requests that progressed (of a
        run or a mixed step's decode rows: of those that finished). count_tokens: the others' ``records`` count
        their tokens here (else a record takes its count from the engine at its finish: ``FleetSimulator``)."""
        self.busy = False
        if self.run is not None:
            run, self.run = self.run, None
            outputs = self.core.finish_decode_steps(run, finished_only=True)
            if count_tokens:
                num_steps = run.num_steps
                for request in run.run.requests:
                    if request.status is _RUNNING:  # did not finish
                        records[request.req_id].num_output_tokens += num_steps
            return outputs
        pending, self.pending = self.pending, None
        outputs = self.core.finish_step(pending)
        if count_tokens and pending.decode is not None:  # a mixed step: its unfinished decode rows got a token each
            for request in pending.decode.requests:
                if request.status is _RUNNING:  # did not finish
                    records[request.req_id].num_output_tokens += 1
        return outputs

    def result(self) -> NodeResult:
        engine = self.core.engine
        stats = engine.make_stats()
        hw = self.spec.hardware
        return NodeResult(
            self.node_id,
            self.spec.cell,
            hw.profile,
            hw.tp,
            engine.runner.num_steps - self._profile_steps,
            engine.runner.busy_time_s - self._profile_busy_s,
            stats.num_preemptions_total,
            stats.num_swapped_out_blocks_total,
            stats.num_swapped_in_blocks_total,
            stats.num_recomputed_tokens_total,
            stats.prefix_cache_hit_rate,
            self.num_requests,
            self.step_budget_tokens,
        )


def default_router_config(fleet: Fleet, policy: str, seed: int = 0) -> RouterConfig:
    """The router settings an operator of this fleet would write: the policy, the cells, the model's size."""
    return RouterConfig(
        policy=policy,
        seed=seed,
        cells_by_traffic_class=dict(fleet.cells_by_traffic_class),
        cells=fleet.cells,
        model_params_b={fleet.model.name: fleet.model.num_params / 1e9},
    )


class FleetSimulator:
    """One run of ``workload`` on ``fleet`` under ``policy``.

    admission: the control plane's admission limits (its defaults unless given, as ``zoo controlplane``).
    adapters: each request names a LoRA adapter of this mix (sim/adapters.py); the fleet's nodes must serve
    adapters (``fleet.engine.lora``). lora_affinity: False = the intake does not prefer nodes holding the
    request's adapter (router/lora_affinity.py), to measure what that preference is worth.
    split: the prefill/decode split (sim/split.py): its router replaces ``policy``, and each request moves from
    its prefill node to its decode node after its first token.
    """

    def __init__(
        self,
        fleet: Fleet,
        workload: Workload,
        policy: str,
        *,
        router_config: RouterConfig | None = None,
        admission: AdmissionConfig | None = None,
        seed: int = 0,
        report_interval_s: float = 0.25,
        drain_limit_s: float = 600.0,
        adapters: AdapterMix | None = None,
        lora_affinity: bool = True,
        split: SplitConfig | None = None,
        autoscaler=None,
    ) -> None:
        if report_interval_s <= 0:
            raise ValueError(f"report_interval_s must be > 0, got {report_interval_s}")
        self.fleet = fleet
        self.workload = workload
        self.policy_name = policy
        self.router_config = router_config or default_router_config(fleet, policy, seed)
        self.admission = admission or AdmissionConfig()
        self.seed = seed
        self.report_interval_s = report_interval_s
        self.drain_limit_s = drain_limit_s
        if adapters is not None and adapters.num_adapters and fleet.engine.lora is None:
            raise ValueError("a workload with LoRA adapters needs a fleet whose nodes serve them (engine.lora)")
        self.adapters = adapters
        self.lora_affinity = lora_affinity
        self.split = split
        self.autoscaler = autoscaler  # sim/autoscale.py Autoscaler: which nodes are joined, over time (None: all)

    def run(self) -> SimResult:
        keep_recent_chains(RECENT_CHAIN_BLOCKS)  # the router's prompt chains, reused by the nodes (one process)
        # the run allocates millions of objects (rows, outputs, block hashes) beside a large live heap (prompts,
        # records, hash chains): the cyclic collector traverses that heap again and again (~15% of the run's CPU at
        # its default thresholds) and finds next to nothing (~100 objects in cycles on a conv window: the run's
        # objects die by reference count), so it is off during the run and catches up once after it
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            keep_recent_chains(0)
            if collecting:
                gc.enable()

    def _run(self) -> SimResult:
        wall_start = time.perf_counter()
        clock = VirtualClock()
        fleet, model = self.fleet, self.fleet.model
        nodes = [SimNode(spec, fleet, clock) for spec in fleet.nodes]
        node_index = {n.node_id: i for i, n in enumerate(nodes)}
        registry = fleet.make_registry(clock)  # ClusterRegistry (+ the spec pairing: sim/spec_pair_nodes.py)
        scaler = self.autoscaler
        for i in range(len(nodes)) if scaler is None else scaler.start():
            registry.join(nodes[i].hello)
        split = None if self.split is None else SplitRun(self.split, fleet, nodes, registry, self.router_config)
        policy = make_policy(self.policy_name, self.router_config) if split is None else split.router
        kv_events = getattr(policy, "wants_kv_events", False)  # Dynamo's default: the engines' KV cache events
        if kv_events:
            for node in nodes:
                node.core.engine.enable_kv_events()
        admission = AdmissionControl(self.admission)
        tokenizer = SimTokenizer(model.vocab_size, model.eos_token_id)
        model_names = registry.model_names()
        prompts = PromptFactory(model.vocab_size, self.seed)
        requests = self.workload.requests
        records: dict[str, RequestRecord] = {}  # in flight
        loras = self.adapters.table() if self.adapters is not None else None
        adapter_of = self.adapters.assign(len(requests)) if self.adapters is not None else [None] * len(requests)
        all_records: list[RequestRecord] = []

        heap: list[tuple[float, int, int, int]] = []
        seq = 0
        # an anchor sees load as fresh as its own deployment does (llm-d scrapes every 50 ms)
        interval = getattr(policy, "metrics_refresh_s", None) or self.report_interval_s
        for i in range(len(nodes)):
            nodes[i].next_report_s = interval * (i + 1) / len(nodes)
            heapq.heappush(heap, (nodes[i].next_report_s, seq, _REPORT, i))
            seq += 1
        if scaler is not None:
            heapq.heappush(heap, (scaler.config.sample_s, seq, _SCALE, 0))
            seq += 1
        num_arrivals = len(requests)
        next_arrival = 0
        num_events = 0
        arrivals_end_s = requests[-1].arrival_s if requests else 0.0
        deadline_s = arrivals_end_s + self.drain_limit_s
        inf = math.inf
        push, pop = heapq.heappush, heapq.heappop
        # a record's output tokens: counted step by step where a request moves between nodes (--pd-split: each
        # node's engine counts its own); else the engine's count at its finish (no pass over a run's rows for it)
        count_tokens = split is not None

        def admit(index: int, rec: RequestRecord, msg: ClientGenerate, now: float, seq: int) -> int:
            """Place a request (new, or held for a node and trying again) and send it to its node; the next seq."""
            again = scaler is not None and index in scaler.retrying  # a held one: its pool's arrival already
            placed = place_request(
                msg,
                model_names=model_names,
                inflight=records,
                tokenizer=tokenizer,
                registry=registry,
                policy=policy,
                admission=admission,
                router=self.router_config,
                loras=loras,
                lora_affinity=self.lora_affinity,
                on_unserved=None if scaler is None or again else scaler.on_unserved,  # want of capacity: demand
            )
            if isinstance(placed, ErrorReply):  # refused, or held for a first node (sim/autoscale.py)
                retry_s = None if scaler is None else scaler.hold(now, index, rec, msg, placed, model_names)
                if retry_s is None:
                    rec.refusal = placed.code.value
                elif retry_s < math.inf:  # its pool's queues full: tried again in a while, as well as at a join
                    push(heap, (retry_s, seq, _RETRY, index))
                    seq += 1
                return seq
            if scaler is not None:
                scaler.placed(index)
            node_id = placed.node_id
            i = node_index[node_id]
            node = nodes[i]
            rec.node_id = node_id
            registry.on_routed(node_id, rec.req_id, placed.route.num_prompt_tokens, placed.route.max_tokens)
            policy.on_routed(placed.route, node_id)
            if scaler is not None and not again:  # the plan's arrivals (controlplane/demand_trend.py)
                scaler.on_routed(registry.view(node_id))
            node.core.add(
                rec.req_id,
                placed.token_ids,
                msg.sampling,
                priority=placed.priority,
                lora=placed.lora,
                slo_tpot_s=placed.slo_tpot_s,
            )
            node.num_requests += 1
            records[rec.req_id] = rec
            if node.run is not None and (end_s := node.cut_run(now)) is not None:
                push(heap, (end_s, seq, _STEP_DONE, i))
                node.done_seq = seq
                seq += 1
            if not node.busy and not node.kicked:
                node.kicked = True
                push(heap, (now, seq, _KICK, i))
                seq += 1
            return seq

        while True:
            arrival_s = requests[next_arrival].arrival_s if next_arrival < num_arrivals else inf
            if next_arrival >= num_arrivals and not records and (scaler is None or not scaler.holding):
                break
            if heap[0][0] <= arrival_s:
                now, event_seq, kind, i = pop(heap)
                if now > deadline_s:
                    break
                if kind == _STEP_DONE and event_seq != nodes[i].done_seq:
                    continue  # the end of a decode run an arrival cut short: its new end is queued
                clock.now_s = now
                num_events += 1
                if kind == _LAND:  # i: the move's slot
                    i = split.land(i)
                    if i is None:  # its decode node has no room yet: it lands after one of that node's steps
                        continue
                    node = nodes[i]
                    if not node.busy and not node.kicked:
                        node.kicked = True
                        push(heap, (now, seq, _KICK, i))
                        seq += 1
                    continue
                if kind == _SCALE:  # the autoscaler: nodes asked for (they join later), drained, removed
                    starts, drains, gone = scaler.tick(now, registry)
                    for join_s, j in starts:
                        push(heap, (join_s, seq, _JOIN, j))
                        seq += 1
                    for j in drains:
                        registry.drain(nodes[j].node_id)
                    for j in gone:
                        registry.leave(nodes[j].node_id)
                        policy.on_node_removed(nodes[j].node_id)
                    push(heap, (now + scaler.config.sample_s, seq, _SCALE, 0))
                    seq += 1
                    continue
                if kind == _JOIN:
                    if scaler.join(now, i):
                        registry.join(nodes[i].hello)
                        registry.report(nodes[i].core.load_report())
                        for index in scaler.release():  # the requests held for a node try again, in arrival order
                            push(heap, (now, seq, _RETRY, index))
                            seq += 1
                    continue
                if kind == _RETRY:  # a held request tries again (take: None once it was placed or refused)
                    seq = seq if (held := scaler.take(i)) is None else admit(i, held.rec, held.msg, now, seq)
                    continue
                node = nodes[i]
                if kind == _REPORT:
                    if node.busy:
                        node.report_due = True
                    else:
                        registry.report(node.core.load_report())
                    node.next_report_s = now + interval
                    push(heap, (node.next_report_s, seq, _REPORT, i))
                    seq += 1
                    continue
                if kind == _STEP_DONE:
                    outputs = node.finish_step(records, count_tokens)
                    if kv_events:  # what the step (and the admissions before it) cached and evicted
                        events = node.core.engine.take_kv_events()
                        if events:
                            policy.on_kv_events(node.node_id, events)
                    for o in outputs:
                        rec = records[o.req_id]
                        if o.new_token_ids:
                            if rec.first_token_s is None:
                                rec.first_token_s = now
                                registry.on_first_token(node.node_id, o.req_id)
                                policy.on_first_token(o.req_id, node.node_id)
                                if split is not None and not o.finished:
                                    move = split.hand_off(now, i, o.req_id, rec.max_tokens)
                                    if move is not None:
                                        push(heap, (move[0], seq, _LAND, move[1]))
                                        seq += 1
                            if count_tokens:
                                rec.num_output_tokens += len(o.new_token_ids)
                        if o.finished:
                            if not count_tokens:
                                rec.num_output_tokens = o.num_output_tokens  # the engine's count: all of them
                            rec.finish_s = now
                            rec.num_cached_prompt_tokens = o.metrics.num_cached_prompt_tokens
                            rec.num_preemptions = o.metrics.num_preemptions
                            del records[o.req_id]
                            registry.on_finished(node.node_id, o.req_id)
                            policy.on_finished(o.req_id, node.node_id)
                    if node.report_due:
                        node.report_due = False
                        registry.report(node.core.load_report())
                    if split is not None:
                        split.after_step(i)
                else:  # _KICK
                    node.kicked = False
                    if node.busy:
                        continue
                end_s = node.start(now, deadline_s)
                if end_s is not None:
                    push(heap, (end_s, seq, _STEP_DONE, i))
                    node.done_seq = seq
                    seq += 1
                continue

            # an arrival: placed by the control plane's intake, as a ZeroMQ client's request would be
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
            msg = ClientGenerate(
                request_id=req_id,
                # a tuple: the node's vocabulary check passes the one the intake checked (engine/prompt.py)
                prompt_token_ids=tuple(prompts.prompt_token_ids(trace_request, index)),
                sampling=SamplingParams(temperature=0.0, max_tokens=trace_request.max_tokens),
                traffic_class=trace_request.traffic_class,
                model=adapter_of[index],
            )
            seq = admit(index, rec, msg, arrival_s, seq)

        if not count_tokens:  # the unfinished (drain limit): what their engines applied so far
            for rec in records.values():
                rec.num_output_tokens = nodes[node_index[rec.node_id]].core.engine.num_output_tokens(rec.req_id)
        wall_s = time.perf_counter() - wall_start
        if scaler is not None:
            scaler.finish(clock.now_s)
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
            drained=not records,
            info={
                **(lora_info(nodes) if loras is not None else {}),
                **({"pd_split": split.info()} if split else {}),
                **overload_info(policy),
                **({"autoscale": scaler.summary()} if scaler is not None else {}),
            },
        )


def overload_info(policy) -> dict:
    """hardware_aware's overload mode over the run (controlplane/router/overload.py), when the policy has it on:
    how often it switched on and the share of decisions it made in it."""
    detector = getattr(policy, "overload", None)
    if detector is None:
        return {}
    share = detector.asked_on / detector.asked if detector.asked else 0.0
    return {"overload": {"activations": detector.activations, "share_of_decisions": share}}


def lora_info(nodes: list[SimNode]) -> dict:
    """The fleet's adapter traffic: loads into device slots, reads from disk, the seconds they took."""
    runners = [n.core.engine.runner for n in nodes]
    stats = [r.lora_stats() for r in runners]
    return {
        "lora_loads": sum(s.num_loads_total for s in stats),
        "lora_evictions": sum(s.num_evictions_total for s in stats),
        "lora_disk_reads": sum(r.lora_slots.num_disk_reads_total for r in runners if r.lora_slots is not None),
        "lora_load_s": sum(s.load_time_s_total for s in stats),
    }
