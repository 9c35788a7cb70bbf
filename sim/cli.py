"""``zoo sim``: replay a trace on a simulated fleet under each routing policy and compare them.

    zoo sim --fleet zoo --trace conv --load 0.8 --policy all [--json] [--plot out.png] [--sweep]

The trace is compressed or stretched so that its request rate is ``--load`` x the fleet's capacity for
the trace's mean request (sim/workload.py: scale_to_load; the report states the factor), then replayed
whole (or its first ``--duration`` virtual seconds) through the fleet simulator (sim/des.py) once per
policy. ``--seeds N`` replays it N times per policy, seeds ``--seed`` .. ``--seed + N - 1`` (prompt tokens,
the policies' random choices, and a seeded jitter of each arrival by up to one mean inter-arrival gap) and
reports the means with 95% intervals.
``--adapters N --adapter-zipf S`` gives each request one of N LoRA adapters (Zipf popularity, sim/adapters.py)
served from ``--max-loras`` simulated slots per node; ``--lora-affinity`` says which policies get the intake's
preference for nodes holding the adapter (all, ours = our policies only, none).
``--pd-split auto|config`` adds a run of the prefill/decode split (sim/split.py) after the policies, as policy
``pd_split``; ``--kv-rack`` and ``--prefill-min-share`` override the fleet TOML's ``[kv_links]``/``[pd_split]``.
``--sweep`` repeats that over ``--sweep-loads`` and prints, per policy, the load at which fewer than 99%
of requests meet the SLO.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from backends.host_cpus import usable_cores
from controlplane.admission import AdmissionConfig
from controlplane.router.router_config import RouterConfig
from engine.lora import LoraConfig
from sim.adapters import AdapterMix
from sim.context_fit import warn_too_long
from sim.des import FleetSimulator, SimResult, default_router_config
from sim.fair_fight import fair_fight, format_fair_fight
from sim.fleet import FLEETS_DIR, Fleet, load_fleet
from sim.policy_names import OURS, policy_list
from sim.report import (
    PolicyReport,
    Slo,
    aggregate,
    dumps,
    format_classes,
    format_table,
    plot_cdfs,
    slo_breaking_load,
    summarize,
)
from sim.router_knobs import parse_router_knobs
from sim.sim_spans import send_run_spans
from sim.spec_pair_nodes import add_spec_pair_args, apply_spec_pairs, format_spec_pairs, spec_pairs_info
from sim.split import add_pd_split_args, pd_split_config
from sim.workload import TRACE_FILES, Workload, load_trace, merge, scale_to_load, synthetic

REALTIME_DURATION_S = 30.0  # zoo sim --realtime without --duration / --max-requests: a slice, not the trace
REALTIME_MAX_REQUESTS = 40


def add_sim_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fleet",
        default="zoo",
        help="fleet TOML file or a bundled fleet name (zoo, zoo_long, zoo_cells, small, big64, llama70b)",
    )
    parser.add_argument(
        "--trace",
        default="conv",
        help=f"{', '.join(TRACE_FILES)}, several joined by '+' (each keeps its traffic class), poisson, gamma, "
        "or a trace file; NAME@CLASS gives a trace's requests that traffic class (e.g. conv@vip+code@batch)",
    )  # fmt: skip
    parser.add_argument("--load", type=float, default=0.8, help="offered load as a fraction of fleet capacity")
    parser.add_argument(
        "--split",
        default="all",
        choices=("all", "tune", "eval"),
        help="the part of each trace to replay: tune = its first fifth (where the router's knobs may be tuned), "
        "eval = the rest (default: all)",
    )
    parser.add_argument(
        "--policy",
        default="all",
        help="'all', 'fair' (hardware_aware and the seven fair anchors) or comma-separated policy names",
    )
    parser.add_argument(
        "--duration", type=float, default=None, help="virtual seconds of (scaled) arrivals (default: the whole trace)"
    )
    parser.add_argument("--max-requests", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0, help="the first seed (prompt tokens, policies' random choices)")
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="runs per policy, seeds --seed, --seed+1, ...; with more than one, each run replays the trace with "
        "its arrivals jittered (seeded) and the report gives means and 95%% intervals",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="run that many seeds, or with several policies that many policies' runs, at once, each in a process "
        "of its own (0: one per CPU); the report is the same as one at a time",
    )
    parser.add_argument(
        "--slo-ttft", type=float, default=1.0, help="SLO on time to first token, s (goodput; told to the router)"
    )
    parser.add_argument(
        "--slo-tpot", type=float, default=0.1, help="SLO on time per output token, s (goodput; told to the router)"
    )
    parser.add_argument(
        "--router-knobs",
        default=None,
        help="JSON object of RouterConfig fields set for every policy (controlplane/router/router_config.py), "
        "e.g. '{\"slo_sacrifice_weight\": 10}'; default: the router's defaults",
    )
    parser.add_argument("--report-interval", type=float, default=0.25, help="agents' load report period, s")
    admission = AdmissionConfig()
    parser.add_argument(
        "--max-queue-per-node",
        type=int,
        default=admission.max_queue_per_node,
        help="admission control, as zoo controlplane: requests waiting on a node before it refuses more (429)",
    )
    parser.add_argument(
        "--max-queue-global",
        type=int,
        default=admission.max_queue_global,
        help="admission control: requests waiting in the whole fleet before it refuses more (429)",
    )
    parser.add_argument("--drain-limit", type=float, default=600.0, help="virtual s after the last arrival")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    parser.add_argument("--plot", default=None, help="write latency CDFs per policy to this PNG (matplotlib)")
    parser.add_argument("--sweep", action="store_true", help="sweep the offered load")
    parser.add_argument("--sweep-loads", default="0.4,0.5,0.6,0.7,0.8,0.9,1.0,1.1")
    add_realtime_args(parser)
    add_lora_args(parser)
    add_pd_split_args(parser)
    add_spec_pair_args(parser)
    add_step_budget_args(parser)


def add_lora_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--adapters", type=int, default=0, help="LoRA adapters the requests name (0: base model)")
    parser.add_argument("--adapter-zipf", type=float, default=1.0, help="Zipf exponent of adapter popularity")
    parser.add_argument("--max-loras", type=int, default=8, help="LoRA device slots per node")
    parser.add_argument("--max-lora-rank", type=int, default=16, help="rank every adapter is padded to")
    parser.add_argument("--max-cpu-loras", type=int, default=None, help="adapters in a node's host RAM (LRU)")
    parser.add_argument(
        "--lora-affinity", choices=("all", "ours", "none"), default="all", help="policies preferring resident adapters"
    )


def lora_settings(args: argparse.Namespace, policy: str, seed: int) -> dict:
    """FleetSimulator's adapter arguments for ``policy`` (none without ``--adapters``)."""
    num = getattr(args, "adapters", 0)
    if not num:
        return {}
    affinity = args.lora_affinity == "all" or (args.lora_affinity == "ours" and policy in OURS)
    return {"adapters": AdapterMix(num, args.adapter_zipf, seed), "lora_affinity": affinity}


def build_workload(args: argparse.Namespace, fleet: Fleet) -> Workload:
    names = args.trace.split("+")
    if names == ["poisson"] or names == ["gamma"]:
        base = synthetic(20000, 10.0, arrival=names[0], seed=args.seed)
    else:
        split = getattr(args, "split", "all")
        parts = [load_trace(n, traffic_class=c or None).split(split) for n, _, c in (x.partition("@") for x in names)]
        base = merge(parts) if len(parts) > 1 else parts[0]
    return base


def scaled(base: Workload, fleet: Fleet, load: float, args: argparse.Namespace) -> tuple[Workload, float]:
    """The first ``--duration`` s of ``base`` scaled to ``load`` x capacity; the window itself is then rescaled so
    that *its* rate is exactly that (a trace's rate varies along it)."""
    capacity = fleet.capacity_req_per_s(base.mean_prompt_tokens, base.mean_output_tokens)
    workload = scale_to_load(base, load, capacity).window(args.duration, args.max_requests)
    if len(workload.requests) > 1:
        workload = scale_to_load(workload, load, capacity)
    return workload, capacity


def router_config(fleet: Fleet, policy: str, seed: int, args: argparse.Namespace) -> RouterConfig:
    """One run's router settings: the fleet's defaults, the operator's SLO told to every policy (the SLO-aware ones
    aim for it; the others ignore it), then --router-knobs."""
    return dataclasses.replace(
        default_router_config(fleet, policy, seed),
        slo_ttft_s=args.slo_ttft,
        slo_tpot_s=args.slo_tpot,
        **parse_router_knobs(getattr(args, "router_knobs", None)),
    )


def run_policies(
    fleet: Fleet,
    workload: Workload,
    policies: list[str],
    args: argparse.Namespace,
    log=None,
    seed: int | None = None,
    spans=None,
) -> list[SimResult]:
    """Each policy's run; ``spans``: a SpanExport (observe/span_export.py) each run's requests go to as spans."""
    results = []
    for name in policies:
        run_seed = args.seed if seed is None else seed
        epoch_ns = time.time_ns()
        sim = FleetSimulator(
            fleet,
            workload,
            name,
            router_config=router_config(fleet, name, run_seed, args),
            admission=admission_config(args),
            seed=run_seed,
            report_interval_s=args.report_interval,
            drain_limit_s=args.drain_limit,
            **lora_settings(args, name, run_seed),
        )
        result = sim.run()
        if log is not None:
            log(f"  {name}: {len(result.records)} requests, {result.end_s:.0f} virtual s in {result.wall_s:.1f} s")
            if result.info.get("lora_loads") is not None:
                log(f"    LoRA: {result.info}")
            if "overload" in result.info:  # hardware_aware's overload mode (controlplane/router/overload.py)
                mode = result.info["overload"]
                log(f"    overload mode: on {mode['activations']} times, {mode['share_of_decisions']:.0%} of decisions")
        send_run_spans(spans, result, epoch_ns=epoch_ns, seed=run_seed, model=fleet.model.name, log=log)
        results.append(result)
    split = pd_split_config(args)
    if split is not None:
        run_seed = args.seed if seed is None else seed
        epoch_ns = time.time_ns()
        sim = FleetSimulator(
            fleet,
            workload,
            "pd_split",
            router_config=router_config(fleet, "hardware_aware", run_seed, args),
            admission=admission_config(args),
            seed=run_seed,
            report_interval_s=args.report_interval,
            drain_limit_s=args.drain_limit,
            split=split,
            **lora_settings(args, "pd_split", run_seed),
        )
        result = sim.run()
        if log is not None:
            log(f"  pd_split: {len(result.records)} requests, {result.end_s:.0f} virtual s in {result.wall_s:.1f} s")
            log(f"    split: {result.info.get('pd_split')}")
        send_run_spans(spans, result, epoch_ns=epoch_ns, seed=run_seed, model=fleet.model.name, log=log)
        results.append(result)
    return results


def run_sim(args: argparse.Namespace, spans=None) -> int:
    """`zoo sim`; ``spans``: a SpanExport (observe/span_export.py) the runs' requests go to as spans (the runs made
    in this process: with it, --jobs above 1 is refused)."""
    if getattr(args, "realtime", False):
        return run_realtime_sim(args)
    if spans is not None and args.jobs != 1:  # the spans are the runs this process makes
        if getattr(args, "otlp_traces_endpoint", None):
            print("zoo sim: --otlp-traces-endpoint needs --jobs 1 (the runs this process makes)", file=sys.stderr)
            return 2
        print("zoo sim: no spans with --jobs other than 1 (OpenTelemetry's environment asked)", file=sys.stderr)
        spans = None
    try:
        fleet = load_fleet(args.fleet)
        if getattr(args, "adapters", 0):
            if args.adapters < 0:
                raise ValueError(f"--adapters must be >= 0, got {args.adapters}")
            fleet.engine.lora = LoraConfig(args.max_loras, args.max_lora_rank, args.max_cpu_loras)
            AdapterMix(args.adapters, args.adapter_zipf)  # checks the exponent now, not in the middle of a run
        policies = policy_list(args.policy)  # ValueError: unknown names
        base = build_workload(args, fleet)
        pd_split_config(args)  # a bad [kv_links]/[pd_split] section fails now
        knobs = parse_router_knobs(getattr(args, "router_knobs", None))  # a bad --router-knobs fails now
        apply_step_budget_args(args, fleet)
        fleet = apply_spec_pairs(args, fleet, base.mean_prompt_tokens + base.mean_output_tokens / 2)
    except (ValueError, FileNotFoundError) as e:
        print(f"zoo sim: {e}", file=sys.stderr)
        return 2
    slo = Slo(args.slo_ttft, args.slo_tpot)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.sweep:
        warn_too_long(base, fleet, log)
        loads = [float(x) for x in args.sweep_loads.split(",")]
        points: dict[str, list[tuple[float, float]]] = {p: [] for p in policies}
        jobs = _jobs(args, len(loads) * len(policies))
        if jobs > 1 and runs_apart(args):
            log(f"{len(loads)} loads x {len(policies)} policies, {jobs} runs at once (a process each)")
            for load, policy, goodput in sweep_in_processes(fleet, base, loads, policies, args, jobs):
                points[policy].append((load, goodput))
        else:
            for load in loads:
                workload, capacity = scaled(base, fleet, load, args)
                log(f"load {load:.2f}: {len(workload.requests)} requests, time scale x{workload.time_scale:.2f}")
                for result in run_policies(fleet, workload, policies, args, log, spans=spans):
                    points.setdefault(result.policy, []).append((load, summarize(result, slo).goodput))
        breaking = slo_breaking_load(points)
        if args.json:
            import json

            print(json.dumps({"points": points, "slo_breaking_load": breaking}, indent=2))
        else:
            print(f"{fleet.describe()}; trace {base.name}; SLO TTFT <= {slo.ttft_s:g} s, TPOT <= {slo.tpot_s:g} s")
            print(f"{'policy':24s} " + " ".join(f"{load:>6.2f}" for load in loads) + "   breaks at (goodput < 99%)")
            for p in points:  # the policies, then pd_split with --pd-split
                row = " ".join(f"{g:>6.1%}" for _, g in points[p])
                b = breaking[p]
                print(f"{p:24s} {row}   {'>' + str(loads[-1]) if b is None else f'{b:.2f}'}")
        return 0

    workload, capacity = scaled(base, fleet, args.load, args)
    info = {
        "fleet": fleet.describe(),
        "trace": base.name,
        "offered_load": args.load,
        "fleet_capacity_req_per_s": capacity,
        "offered_req_per_s": workload.rate_req_per_s,
        "time_scale": workload.time_scale,
        "num_requests": len(workload.requests),
        "duration_s": workload.duration_s,
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s},
        "router_knobs": knobs,
        "step_budget": {"mode": fleet.engine.step_budget or fleet.engine.fixed_budget_tokens},
        "context": warn_too_long(workload, fleet, log).as_info(),
    }
    log(f"step budget: {fleet.engine.describe_step_budget()}")
    log(
        f"{info['fleet']}\ntrace {base.name} x{workload.time_scale:.2f} (its arrivals compressed by that factor): "
        f"{len(workload.requests)} requests in {workload.duration_s:.0f} s = {workload.rate_req_per_s:.1f} req/s "
        f"= {args.load:.0%} of the fleet's capacity {capacity:.1f} req/s"
    )
    if args.seeds < 1:
        print(f"zoo sim: --seeds must be >= 1, got {args.seeds}", file=sys.stderr)
        return 2
    if args.jobs < 0:
        print(f"zoo sim: --jobs must be >= 0 (0: one per CPU), got {args.jobs}", file=sys.stderr)
        return 2
    apart = policies_apart(args, policies)
    if args.seeds == 1 and apart and (jobs := _jobs(args, len(policies))) > 1:
        log(f"{len(policies)} policies, {jobs} at once (a process each)")
        runs, budgets = run_seeds_in_processes(fleet, workload, policies, args, [args.seed], jobs, jitter=False)
        reports = runs[0]
    elif args.seeds == 1:
        results = run_policies(fleet, workload, policies, args, log, spans=spans)
        reports = [summarize(r, slo) for r in results]
        budgets = step_budgets_by_gpu(results[0])
        for r in results:
            if "pd_split" in r.info:
                info["pd_split"] = r.info["pd_split"]
        if getattr(args, "spec_pairs", "none") != "none":  # the pairs' counters of the last policy's run
            info["spec_pairs"] = spec_pairs_info(fleet)
            log(format_spec_pairs(info["spec_pairs"]))
        if getattr(args, "adapters", 0):
            info["lora"] = {
                r.policy: {**r.info, "affinity": lora_settings(args, r.policy, 0)["lora_affinity"]} for r in results
            }
    else:
        seeds = list(range(args.seed, args.seed + args.seeds))
        jobs = _jobs(args, len(seeds) * (len(policies) if apart else 1))
        if jobs > 1 and not args.plot:  # (a plot draws the last seed's records: kept in this process)
            log(f"seeds {seeds[0]}..{seeds[-1]}, {jobs} {'runs' if apart else 'seeds'} at once (a process each)")
            runs, budgets = run_seeds_in_processes(fleet, workload, policies, args, seeds, jobs)
        else:
            runs = []
            for seed in seeds:
                log(f"seed {seed}")
                results = run_policies(fleet, workload.jittered(seed), policies, args, log, seed=seed, spans=spans)
                runs.append([summarize(r, slo) for r in results])
            budgets = step_budgets_by_gpu(results[0])
        reports = aggregate(runs)
        info["seeds"] = seeds
    info["step_budget"]["tokens_by_gpu"] = budgets
    fight = fair_fight(reports)  # hardware_aware against the best fair anchor, when both ran (sim/fair_fight.py)
    if fight is not None:
        info["fair_fight"] = fight
    if args.json:
        print(dumps(reports, info))
    else:
        print(f"step budget: {fleet.engine.describe_step_budget()}: {info['step_budget']['tokens_by_gpu']}")
        print(format_table(reports, slo))
        if classes := format_classes(reports):
            print(classes)
        if fight is not None:
            print("\n" + format_fair_fight(fight))
    if args.plot:
        plot_cdfs(results, args.plot, f"{fleet.name}, {base.name} at {args.load:.0%} load")
    return 0


def run_realtime_sim(args: argparse.Namespace) -> int:
    """``zoo sim --realtime``: the trace slice through a real control plane and simulated agents
    (sim/realtime.py), then the same slice in virtual time, and the twin comparison per policy. Refuses
    ``--sweep`` (a sweep in real time is hours)."""
    import json

    from sim.realtime import run_twin

    if args.sweep:
        print("zoo sim --realtime: --sweep runs in virtual time only", file=sys.stderr)
        return 2
    if getattr(args, "spec_pairs", "none") != "none":
        print("zoo sim --realtime: --spec-pairs runs in virtual time only", file=sys.stderr)
        return 2
    if args.duration is None and args.max_requests is None:  # a whole trace in real time would take hours
        args.duration, args.max_requests = REALTIME_DURATION_S, REALTIME_MAX_REQUESTS
    try:  # refused before a control plane or an agent starts, as ``run_sim`` refuses them
        fleet = load_fleet(args.fleet)
        policies = policy_list(args.policy)
        workload, _ = scaled(build_workload(args, fleet), fleet, args.load, args)
    except (ValueError, FileNotFoundError) as e:
        print(f"zoo sim: {e}", file=sys.stderr)
        return 2
    fleet_path = args.fleet if Path(args.fleet).is_file() else str(FLEETS_DIR / f"{args.fleet}.toml")
    print(
        f"{fleet.describe()}: {len(workload.requests)} requests over {workload.duration_s:.1f} s in real time "
        f"(agents {'in this process' if args.agents_in_process else 'in one child process'})",
        file=sys.stderr,
        flush=True,
    )
    slo = Slo(args.slo_ttft, args.slo_tpot)
    reports, twins = [], {}
    for policy in policies:
        realtime, _virtual, twin = run_twin(
            fleet,
            workload,
            policy,
            seed=args.seed,
            report_interval_s=args.report_interval,
            admission=admission_config(args),
            agents_in_process=args.agents_in_process,
            fleet_path=fleet_path,
            timeout_s=args.realtime_timeout,
        )
        reports.append(summarize(realtime, slo))
        twins[policy] = twin
        if not args.json:
            print(f"\n{policy}: real time vs virtual time\n{twin.format()}")
    if args.json:
        twin_json = {p: {**{k: list(v) for k, v in t.rows.items()}, "same_node_share": t.same_node_share,
                         "num_unfinished": t.num_unfinished} for p, t in twins.items()}  # fmt: skip
        print(json.dumps({"realtime": json.loads(dumps(reports, {"mode": "realtime"})), "twin": twin_json}, indent=2))
    else:
        print("\nreal-time run:\n" + format_table(reports, slo))
    return 0


def add_realtime_args(parser: argparse.ArgumentParser) -> None:
    """The flags ``zoo sim --realtime`` adds."""
    parser.add_argument("--realtime", action="store_true", help="run the slice in real time and compare")
    parser.add_argument(
        "--agents-in-process",
        action="store_true",
        help="simulated agents in this process (default: one child process, python -m sim.sim_agents)",
    )
    parser.add_argument("--realtime-timeout", type=float, default=600.0, help="wall seconds before giving up")


def admission_config(args: argparse.Namespace) -> AdmissionConfig:
    """The control plane's admission limits, as ``zoo controlplane`` takes them."""
    return AdmissionConfig(max_queue_per_node=args.max_queue_per_node, max_queue_global=args.max_queue_global)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="zoo sim", description=__doc__.splitlines()[0])
    add_sim_args(parser)
    return run_sim(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())


def add_step_budget_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--step-budget",
        default=None,
        help="each node's step token budget: 'sarathi' (sized per node from its start-up profile and --slo-tpot, "
        "engine/step_budget.py) or a number of tokens for every node (default: the fleet file's step_budget)",
    )


def apply_step_budget_args(args: argparse.Namespace, fleet: Fleet) -> None:
    """``--step-budget`` and ``--slo-tpot`` into the fleet's engine settings (ValueError on a bad value)."""
    choice = getattr(args, "step_budget", None)
    if choice is not None:
        fleet.engine.step_budget = choice if choice == "sarathi" else _positive_int(choice)
        fleet.engine.__post_init__()
    fleet.engine.tpot_slo_s = args.slo_tpot


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--step-budget takes 'sarathi' or a number of tokens, got {text!r}") from None
    if value < 1:
        raise ValueError(f"--step-budget must be >= 1, got {value}")
    return value


def _jobs(args: argparse.Namespace, runs: int) -> int:
    """Processes for ``runs`` runs at once: ``--jobs`` (0: one per core this process may use), at most one a run."""
    return min(runs, args.jobs or usable_cores())


def runs_apart(args: argparse.Namespace) -> bool:
    """Whether each policy's run may go to a process of its own (``--jobs``): nothing the runs share in this process
    (the records a plot draws, the --pd-split run added once after them, the spec pairs' counters, the LoRA loads
    of each run's info)."""
    return (
        not args.plot
        and pd_split_config(args) is None
        and getattr(args, "spec_pairs", "none") == "none"
        and not getattr(args, "adapters", 0)
    )


def policies_apart(args: argparse.Namespace, policies: list[str]) -> bool:
    """``runs_apart`` with several policies: each policy's run of a seed in a process of its own."""
    return len(policies) > 1 and runs_apart(args)


def sweep_in_processes(
    fleet: Fleet, base: Workload, loads: list[float], policies: list[str], args: argparse.Namespace, jobs: int
) -> list[tuple[float, str, float]]:
    """``--sweep`` with ``--jobs``: each (load, policy) run in a spawned process, ``jobs`` at once, the trace
    scaled to each load as the sequential sweep scales it; (load, policy, goodput) in load, then policy order."""
    workloads = {load: scaled(base, fleet, load, args)[0] for load in loads}  # each load's trace, scaled once
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = [
            (load, policy, pool.submit(_run_seed, fleet, workloads[load], [policy], args, args.seed, False))
            for load in loads
            for policy in policies
        ]
        return [(load, policy, future.result()[0][0].goodput) for load, policy, future in futures]


def run_seeds_in_processes(
    fleet: Fleet,
    workload: Workload,
    policies: list[str],
    args: argparse.Namespace,
    seeds: list[int],
    jobs: int,
    jitter: bool = True,
) -> tuple[list[list[PolicyReport]], dict[str, list[int]]]:
    """``--jobs``: each seed's runs in a spawned process, or each run of a seed and a policy where the policies may
    run apart (``policies_apart``), ``jobs`` at once (``_run_seed``: the same runs as in this process, given the same
    fleet, trace and arguments; jitter: each seed's replica of the trace, else the trace itself, as one seed runs
    it); each seed's reports in seed order, its policies in order, and the last seed's step budgets by GPU (as the
    sequential path reports them). A failed run raises here."""
    groups = [[policy] for policy in policies] if policies_apart(args, policies) else [policies]
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no thread or lock of this one copied
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = [[pool.submit(_run_seed, fleet, workload, g, args, seed, jitter) for g in groups] for seed in seeds]
        outcomes = [[future.result() for future in row] for row in futures]
    runs = [[report for reports, _ in row for report in reports] for row in outcomes]
    return runs, outcomes[-1][0][1]


def _run_seed(
    fleet: Fleet, workload: Workload, policies: list[str], args: argparse.Namespace, seed: int, jitter: bool = True
) -> tuple[list[PolicyReport], dict[str, list[int]]]:
    """One seed's runs of ``policies`` (in a child process): their reports and the step budgets by GPU of the first;
    its log lines name the seed."""

    def log(msg: str) -> None:
        print(f"[seed {seed}] {msg.strip()}", file=sys.stderr, flush=True)

    results = run_policies(fleet, workload.jittered(seed) if jitter else workload, policies, args, log, seed=seed)
    slo = Slo(args.slo_ttft, args.slo_tpot)
    return [summarize(r, slo) for r in results], step_budgets_by_gpu(results[0])


def step_budgets_by_gpu(result: SimResult) -> dict[str, list[int]]:
    """The distinct step budgets the run's nodes had, per GPU profile."""
    budgets: dict[str, list[int]] = {}
    for node in result.nodes:
        seen = budgets.setdefault(node.profile, [])
        if node.step_budget_tokens not in seen:
            seen.append(node.step_budget_tokens)
    return budgets
