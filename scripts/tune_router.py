"""Tune hardware_aware's knobs on the declared tuning split (the first fifth of each trace) only.

Cases: conv 80%, code 80% and code 60% on the zoo fleet, mooncake 80% on zoo_long; seed 0; the default SLO
(TTFT 1 s, TPOT 100 ms). Grid (``--grid``, JSON knob -> values; every combination; or a JSON list of settings,
each knob -> value, run as listed): by default the fourth
grid, SLO triage sparing the capable nodes when fewer than a fraction of the nodes could serve the prompt in
time (slo_triage_spare_capable_below) x the TPOT term counting only the excess over the SLO (router_config.py),
at the chosen penalties (triage 5 s, decode protection 3 s). The second grid (GRID_2, those two penalties)
chose them (bench/results/2026-12-01-sim-eval-goodput.json); the third (GRID_3: sparing whenever some node
could not, i.e. the fraction 1) kept the defaults. The rule below is the one the second grid ran under,
unchanged for the third and fourth (written before they ran; their results:
bench/results/2026-12-01-sim-tune-3.json). A switch that does not win by this rule stays off.
The grids since the fifth (GRID_5 on), each declared and committed here before it ran, why, and its result:
docs/TUNING.md (moved there verbatim when this file outgrew its room; ``git log -p scripts/tune_router.py`` shows
each declaration's commit before its run). A new grid is declared there, and committed, before it runs.

Selection rule (fixed before the grid ran; the first rule, for tpot_weight x slo_tpot_miss_penalty_s, and
its result are in bench/results/2026-12-01-router-tune.json):
1. A setting is admissible when, on every case, its P99 TTFT is at most the best fair anchor's P99 / 1.5 (the
   anchors' figures on the same split and seed, from ``zoo sim --split tune --json`` files given by --anchors).
2. Among admissible settings (all settings if none is), the one with the largest smallest goodput margin over
   the cases (hardware_aware's goodput - the best fair anchor's goodput on that case) wins; settings within
   0.005 of the largest are tied, and the tie goes to the lowest worst-case P99/P50 TTFT, then to the
   earliest in the grid (the grid lists smaller penalties first).
3. With --seeds N (N > 1; from GRID_21 on): each case's figures, a setting's and each fair anchor's
   (FAIR_ANCHORS), are the means over seeds 0..N-1 of the tuning split (seed s > 0: its arrivals jittered, as
   ``zoo sim --seeds`` does); the best fair anchor's goodput is the largest mean goodput among the anchors and its
   P99 the least mean P99; points 1 and 2 then read the means.
4. With --fewest-p99-misses (from GRID_23 on): when no setting is admissible, point 2's pool is the settings that
   break the fewest P99 bounds (cases whose P99 is above the best fair anchor's P99 / 1.5), not all of them.
Prints one JSON object per setting (--seeds: per run), then the choice.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import multiprocessing

from sim.cli import apply_step_budget_args
from sim.des import FleetSimulator, default_router_config
from sim.fair_fight import FAIR_ANCHORS  # the fair anchors of the reports (zoo sim --policy list since GRID_16)
from sim.fleet import load_fleet
from sim.report import Slo, summarize
from sim.router_knobs import parse_router_knobs
from sim.workload import load_trace, scale_to_load

CASES = {"conv80": ("conv", "zoo", 0.8), "code80": ("code", "zoo", 0.8), "code60": ("code", "zoo", 0.6),
         "mooncake80": ("mooncake", "zoo_long", 0.8)}  # fmt: skip
GRID_2 = {"slo_triage_penalty_s": [0.0, 3.0, 5.0, 10.0], "slo_tpot_harm_penalty_s": [0.0, 3.0]}
GRID_3 = {"slo_triage_spare_capable_below": [0.0, 1.0], "tpot_excess_only": [False, True],
          "tpot_weight": [0.1, 0.3]}  # fmt: skip
GRID_5 = {"slo_pack_weight": [0.0, 1.0, 2.0]}
GRID_6 = {"slo_pack_weight": [0.0, 1.0, 2.0], "slo_pack_needs_tpot": [True]}
GRID_7 = {"slo_sacrifice_weight": [0.0, 1.0, 3.0, 10.0]}
GRID_8 = [{"slo_sacrifice_weight": 0.0}] + [
    {"slo_sacrifice_weight": w, "slo_sacrifice_max_ttft_s": b} for w in (10.0, 30.0) for b in (2.0, 3.0)
]
GRID_9 = [{"slo_sacrifice_weight": 0.0}] + [
    {"slo_sacrifice_weight": w, "slo_sacrifice_max_rate_ratio": 0.2, "slo_sacrifice_max_ttft_s": b}
    for w, b in ((10.0, 0.0), (10.0, 3.0), (10.0, 4.0), (30.0, 3.0))
]
GRID_10 = {"slo_sacrifice_weight": [0.0, 5.0, 7.0]}
GRID_11 = {"kv_full_penalty_s": [30.0, 10.0, 3.0, 1.0]}
GRID_12 = {"slo_tpot_miss_penalty_s": [0.0, 1.0, 2.0, 3.0]}
GRID_13 = {"slo_triage_penalty_s": [5.0, 10.0, 15.0]}
# GRID_14 and GRID_15 pinned as they ran (RouterConfig's overload defaults moved after: the off row is window 0; at
# 8809a77 there was no hold and both escalations defaulted to 0; at a41f504 the triage escalation defaulted to 10 s)
GRID_14 = [{"overload_window_s": 0.0}] + [
    {"overload_window_s": 10.0, "overload_late_share": share, "overload_hold_s": 0.0, **escalation}
    for share in (0.5, 0.75)
    for escalation in (
        {"overload_triage_penalty_s": 10.0, "overload_sacrifice_weight": 0.0},
        {"overload_triage_penalty_s": 15.0, "overload_sacrifice_weight": 0.0},
        {"overload_triage_penalty_s": 0.0, "overload_sacrifice_weight": 10.0},
    )
]
GRID_15 = [{"overload_window_s": 0.0}] + [
    {"overload_window_s": 10.0, "overload_late_share": 0.5, "overload_hold_s": hold, **escalation}
    for hold in (5.0, 10.0)
    for escalation in (
        {"overload_triage_penalty_s": 10.0, "overload_sacrifice_weight": 0.0},
        {"overload_triage_penalty_s": 15.0, "overload_sacrifice_weight": 0.0},
        {"overload_triage_penalty_s": 10.0, "overload_sacrifice_weight": 10.0},  # as it ran (see the docstring)
    )
]
STRESS_CASES = {"conv100": ("conv", "zoo", 1.0), "code100": ("code", "zoo", 1.0),
                "mooncake100": ("mooncake", "zoo_long", 1.0)}  # fmt: skip
ALL_CASES = {**CASES, **STRESS_CASES}
GRID_16 = {"slo_tpot_miss_penalty_s": [0.0, 1.0, 2.0, 3.0]}
GRID_17 = {"tpot_measured_steps": [False, True]}  # ran with the mean over every step (at c2635fc)
GRID_18 = {"tpot_measured_steps": [False, True]}  # the mean over the steps with decode rows
GRID_19 = {"slo_tpot_floor_miss": [False, True]}
GRID_20 = {"slo_tpot_harm_triage": [False, True]}
GRID_21 = {"slo_tpot_harm_decoders": [False, True]}  # run with --stress --slo2 --seeds 3
GRID_22 = {"slo_tpot_harm_count": [False, True]}  # run with --stress --slo2 --seeds 3
GRID_23 = [{"slo_tpot_harm_count_cap_s": cap} for cap in (0.0, 10.0, 6.0, 3.0)] + [{"slo_tpot_harm_count": False}]
GRID_24 = [{"slo_tpot_harm_count": False}, {"slo_tpot_harm_count": True, "slo_tpot_harm_reported": True}]
_REPORTED = {"slo_tpot_harm_count": True, "slo_tpot_harm_reported": True}
GRID_25 = [{"slo_ttft_late_weight": w} for w in (0.0, 1.0, 3.0)] + [
    {**_REPORTED, "slo_ttft_late_weight": w} for w in (0.0, 1.0, 3.0)
]
GRID_26 = [{"slo_tpot_harm_penalty_s": penalty} for penalty in (3.0, 6.0, 10.0)]  # 3.0: the default row
GRID_27 = [{"slo_sacrifice_weight": weight} for weight in (5.0, 10.0, 15.0)]  # 5.0: the default row
GRID_28 = [{"overload_sacrifice_long_share": share} for share in (0.0, 0.2, 0.3, 0.5)]  # 0.0: the default row
GRID_29 = [{"slo_sacrifice_long_share": share} for share in (0.0, 0.05, 0.1, 0.2)]  # 0.0: the default row
# GRID_30's first row pinned as it ran (the default row then, GRID_29's choice: share 0.2; the default is 0.1 since)
GRID_30 = [{"slo_sacrifice_long_vs_late": False, "slo_sacrifice_long_share": 0.2}] + [
    {"slo_sacrifice_long_vs_late": True, "slo_sacrifice_long_share": share} for share in (0.2, 0.1, 0.05)
]
GRID_31 = [{"slo_tpot_lost_to_doomed": False}] + [  # off: the default row (GRID_30's choice)
    {"slo_tpot_lost_to_doomed": True, "slo_tpot_lost_ttft_factor": factor} for factor in (0.0, 3.0, 2.0, 1.5)
]
SLO2 = {"slo_ttft_s": 2.0, "slo_tpot_s": 0.05}  # the reports' second SLO setting, told to every router
SLO2_CASES = {f"{name}@slo2": case for name, case in ALL_CASES.items()}  # each case of ALL_CASES at SLO2
DEFAULT_GRID = {"slo_triage_spare_capable_below": [0.0, 0.25, 0.5], "tpot_excess_only": [False, True]}
TIE = 0.005


def simulate_tune_split(trace: str, fleet_name: str, load: float, knobs: dict):
    """hardware_aware with ``knobs`` over the tuning split of ``trace`` at ``load``, seed 0: (result, config)."""
    return simulate_split(trace, fleet_name, load, knobs)


def simulate_split(
    trace: str,
    fleet_name: str,
    load: float,
    knobs: dict,
    split: str = "tune",
    policy: str = "hardware_aware",
    seed: int = 0,
    step_budget: str | None = None,
):
    """``policy`` with ``knobs`` (RouterConfig fields) over ``split`` of ``trace`` at ``load``: (result, config).
    Seed 0: the split as it is; another seed: its arrivals jittered as ``zoo sim --seeds`` does (the same seed
    for the prompts' tokens and the router). The eval split is for diagnosis only: knobs are tuned on the tuning
    split. ``step_budget``: the nodes' step token budget as ``zoo sim --step-budget`` takes it ("sarathi": sized
    to the TPOT SLO the router is told; None: the fleet file's)."""
    fleet = load_fleet(fleet_name)
    base = load_trace(trace).split(split)
    capacity = fleet.capacity_req_per_s(base.mean_prompt_tokens, base.mean_output_tokens)
    workload = scale_to_load(base, load, capacity)
    if seed:
        workload = workload.jittered(seed)
    config = dataclasses.replace(default_router_config(fleet, policy, seed), **knobs)
    # as zoo sim: a "sarathi" budget (this one, or the fleet file's) is sized to the TPOT SLO the router is told
    apply_step_budget_args(argparse.Namespace(step_budget=step_budget, slo_tpot=config.slo_tpot_s), fleet)
    return FleetSimulator(fleet, workload, policy, router_config=config, seed=seed).run(), config


def case_parser(
    trace: str = "code", load: float = 0.8, split: str = "tune", policy: bool = True, knobs: bool = False
) -> argparse.ArgumentParser:
    """The diagnostics' common arguments: --trace, --fleet, --load, --policy (comma-separated where a script takes
    several), --split (``tune``, where knobs may be tuned, or ``eval``, for diagnosis only) and, with ``knobs``,
    --knobs (read by ``parsed_knobs``)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", default=trace)
    parser.add_argument("--fleet", default="zoo")
    parser.add_argument("--load", type=float, default=load)
    if policy:
        parser.add_argument("--policy", default="hardware_aware")
    parser.add_argument("--split", default=split, choices=("tune", "eval"), help="eval: diagnosis only")
    if knobs:
        parser.add_argument("--knobs", default="", help="JSON RouterConfig overrides, as zoo sim --router-knobs")
    parser.add_argument(
        "--step-budget",
        default=None,
        type=_step_budget,
        help="the nodes' step token budget, as zoo sim --step-budget ('sarathi' | N)",
    )
    return parser


def _step_budget(text: str) -> str:
    """--step-budget checked as zoo sim checks it (a usage error, not a traceback in the middle of a run)."""
    try:
        apply_step_budget_args(argparse.Namespace(step_budget=text, slo_tpot=0.1), load_fleet("zoo"))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def parsed_knobs(
    parser: argparse.ArgumentParser, text: str, set_elsewhere: frozenset[str] = frozenset({"policy"})
) -> dict:
    """--knobs as RouterConfig's fields, typed and range-checked as zoo sim --router-knobs checks them; a bad,
    unknown or out-of-range one is a usage error (``set_elsewhere``: the fields the script's other options set)."""
    try:
        return parse_router_knobs(text, "--knobs", set_elsewhere)
    except ValueError as e:
        parser.error(str(e))


def run(case: str, knobs: dict, seed: int = 0, policy: str = "hardware_aware") -> dict:
    if case in SLO2_CASES:  # the case's SLO over the setting's (a setting names no SLO)
        result, config = simulate_split(*SLO2_CASES[case], {**knobs, **SLO2}, policy=policy, seed=seed)
    else:
        result, config = simulate_split(*ALL_CASES[case], knobs, policy=policy, seed=seed)
    r = summarize(result, Slo(config.slo_ttft_s, config.slo_tpot_s))
    return {
        "p50": r.ttft_s[50],
        "p99": r.ttft_s[99],
        "p99_over_p50": r.ttft_p99_over_p50,
        "goodput": r.goodput,
        "tpot_p50": r.tpot_s[50],
        "util": r.utilisation,
    }


def best_anchors(paths: list[str], cases=CASES) -> dict[str, dict]:
    """Per case (one ``zoo sim --json`` file each, in ``cases``' order): the best fair anchor's goodput and P99
    TTFT (each the best over the anchors) on the tune split."""
    if len(paths) != len(cases):
        raise SystemExit(f"{len(paths)} anchor files for {len(cases)} cases ({', '.join(cases)})")
    out = {}
    for case, path in zip(cases, paths):
        with open(path) as f:
            rows = [p for p in json.load(f)["policies"] if p["policy"] != "hardware_aware"]
        out[case] = {
            "goodput": max(p["goodput"] for p in rows),
            "goodput_by": max(rows, key=lambda p: p["goodput"])["policy"],
            "p99": min(p["ttft_s"]["99"] for p in rows),
            "p99_by": min(rows, key=lambda p: p["ttft_s"]["99"])["policy"],
        }
    return out


def anchors_from(path: str, cases=CASES, seeds: int = 1) -> dict[str, dict]:
    """The best fair anchors' tune-split figures recorded by an earlier grid's result file, every case of ``cases``
    there: ``best_fair_anchor_on_tune`` (seed 0, as ``best_anchors`` made them) or, for ``seeds`` > 1,
    ``best_fair_anchor_on_tune_<seeds>_seeds`` (as ``seeded_anchors`` made them: the same seeds on the same
    simulator give the same anchor runs, each deterministic per seed, so a grid that changes no anchor may read them
    instead of running them again; its default row, equal bit for bit to the earlier grid's chosen row, checks that
    the simulator is the same)."""
    key = "best_fair_anchor_on_tune" if seeds == 1 else f"best_fair_anchor_on_tune_{seeds}_seeds"
    with open(path) as f:
        recorded = json.load(f).get(key)
    if not isinstance(recorded, dict):
        raise SystemExit(f"{path}: no {key}")
    missing = set(cases) - set(recorded)
    if missing:
        raise SystemExit(f"{path}: no {key} for {sorted(missing)}")
    return {case: recorded[case] for case in cases}


def choose(rows: list[dict], anchors: dict[str, dict], fewest_p99_misses: bool = False) -> dict:
    """The selection rule (the module docstring's); ``fewest_p99_misses``: its fourth point. Marks each row with
    what the rule read (admissible, p99_bounds_broken, min_goodput_margin, worst_p99_over_p50)."""
    for row in rows:
        t = row["cases"]
        row["p99_bounds_broken"] = sum(not t[c]["p99"] <= anchors[c]["p99"] / 1.5 for c in t)
        row["admissible"] = row["p99_bounds_broken"] == 0
        row["min_goodput_margin"] = min(t[c]["goodput"] - anchors[c]["goodput"] for c in t)
        row["worst_p99_over_p50"] = max(t[c]["p99_over_p50"] for c in t)
    pool = [r for r in rows if r["admissible"]] or rows
    if fewest_p99_misses:
        fewest = min(r["p99_bounds_broken"] for r in pool)
        pool = [r for r in pool if r["p99_bounds_broken"] == fewest]
    top = max(r["min_goodput_margin"] for r in pool)
    tied = [r for r in pool if r["min_goodput_margin"] >= top - TIE]
    return min(tied, key=lambda r: (r["worst_p99_over_p50"], rows.index(r)))


def _run_setting(knobs: dict, cases: tuple[str, ...] = tuple(CASES)) -> dict:
    return {"knobs": knobs, "cases": {case: run(case, knobs) for case in cases}}


def _mean(runs: list[dict]) -> dict:
    """A case's figures over seeds (``--seeds``): the mean of each, and each seed's goodput and P99 as run."""
    out = {key: sum(r[key] for r in runs) / len(runs) for key in ("p50", "p99", "p99_over_p50", "goodput", "tpot_p50")}
    return out | {"goodput_by_seed": [r["goodput"] for r in runs], "p99_by_seed": [r["p99"] for r in runs]}


def _run_anchor(job: tuple[str, str, int]) -> tuple[str, str, int, dict]:
    case, policy, seed = job
    return case, policy, seed, run(case, {}, seed, policy)


def seeded_anchors(cases: tuple[str, ...], seeds: int, pool) -> dict[str, dict]:
    """Per case, the best fair anchor (FAIR_ANCHORS) over seeds 0..seeds-1, as ``best_anchors`` reads a
    ``zoo sim --json`` file: the largest mean goodput, and the least mean P99 TTFT (each over the anchors); each
    run told the case's SLO, as ``zoo sim --slo-ttft/--slo-tpot`` tells an SLO-aware anchor."""
    jobs = [(case, policy, seed) for case in cases for policy in FAIR_ANCHORS for seed in range(seeds)]
    runs: dict[tuple[str, str], list[dict]] = {}
    for case, policy, _seed, row in pool.imap(_run_anchor, jobs):
        runs.setdefault((case, policy), []).append(row)
    out = {}
    for case in cases:
        means = {policy: _mean(runs[case, policy]) for policy in FAIR_ANCHORS}
        by_goodput = max(FAIR_ANCHORS, key=lambda p: means[p]["goodput"])
        by_p99 = min(FAIR_ANCHORS, key=lambda p: means[p]["p99"])
        out[case] = {
            "goodput": means[by_goodput]["goodput"],
            "goodput_by": by_goodput,
            "p99": means[by_p99]["p99"],
            "p99_by": by_p99,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--grid", default=json.dumps(DEFAULT_GRID), help="JSON: knob -> list of values, or a list of settings"
    )
    anchor_source = parser.add_mutually_exclusive_group()
    anchor_source.add_argument("--anchors", help="comma-separated zoo sim --json files, one per case")
    anchor_source.add_argument(
        "--anchors-from",
        help="an earlier grid's result JSON: its best_fair_anchor_on_tune[_N_seeds] (same simulator; N: --seeds)",
    )
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="each case over seeds 0..N-1 (N > 1: jittered arrivals, the means compared, the anchors run here)",
    )
    parser.add_argument("--stress", action="store_true", help="also the stress cases (STRESS_CASES: 100%% load)")
    parser.add_argument(
        "--stress-anchors",
        help="with --stress: zoo sim --json files, one per stress case (else --anchors-from's recorded ones)",
    )
    parser.add_argument(
        "--slo2", action="store_true", help="also every case at the second SLO (SLO2_CASES; needs --stress)"
    )
    parser.add_argument(
        "--fewest-p99-misses", action="store_true", help="the rule's fourth point (from GRID_23 on; with --seeds)"
    )
    parser.add_argument(
        "--slo2-anchors",
        help="with --slo2: zoo sim --json files at SLO2, one per SLO2_CASES case (else --anchors-from's recorded ones)",
    )
    args = parser.parse_args()
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, got {args.seeds}")
    if args.seeds > 1:
        return _main_seeded(parser, args)
    if args.fewest_p99_misses:
        parser.error("--fewest-p99-misses goes with --seeds N > 1")
    if not (args.anchors or args.anchors_from):
        parser.error("one of --anchors or --anchors-from is required (or --seeds N > 1)")
    if args.stress_anchors and not args.stress:
        parser.error("--stress-anchors goes with --stress")
    if args.stress and not args.stress_anchors and not args.anchors_from:
        parser.error("--stress needs --stress-anchors, or --anchors-from a file that recorded the stress cases")
    if (args.slo2_anchors and not args.slo2) or (args.slo2 and not args.stress):
        parser.error("--slo2-anchors goes with --slo2, and --slo2 with --stress")
    if args.slo2 and not args.slo2_anchors and not args.anchors_from:
        parser.error("--slo2 needs --slo2-anchors, or --anchors-from a file that recorded the SLO2 cases")
    grid = json.loads(args.grid)
    recorded_cases = dict(ALL_CASES if args.stress and not args.stress_anchors else CASES)
    if args.slo2 and not args.slo2_anchors:
        recorded_cases |= SLO2_CASES
    recorded = anchors_from(args.anchors_from, recorded_cases) if args.anchors_from else None  # fail early
    cases = tuple(ALL_CASES if args.stress else CASES) + (tuple(SLO2_CASES) if args.slo2 else ())
    settings = _settings(grid)
    with multiprocessing.Pool(args.jobs) as pool:
        rows = []
        for row in pool.imap(functools.partial(_run_setting, cases=cases), settings):
            print(json.dumps(row), flush=True)
            rows.append(row)
    anchors = recorded or best_anchors(args.anchors.split(","))  # files read at the end: may run beside the grid
    if args.stress_anchors:
        anchors |= best_anchors(args.stress_anchors.split(","), STRESS_CASES)
    if args.slo2_anchors:
        anchors |= best_anchors(args.slo2_anchors.split(","), SLO2_CASES)
    chosen = choose(rows, anchors)
    print(json.dumps({"rule": _rule_text(), "anchors": anchors,
                      "chosen": chosen["knobs"], "grid": rows}))  # fmt: skip


def _settings(grid: dict | list) -> list[dict]:
    """``--grid``'s settings: a list is the settings themselves, in order; a dict, every combination of its values."""
    if isinstance(grid, list):
        return grid
    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]


def _rule_text() -> str:
    """The selection rule as this module's docstring states it (printed with the choice)."""
    return __doc__.split("Selection rule")[1].split("Prints")[0].strip()


def _run_case(job: tuple[int, dict, str, int]) -> tuple[int, str, int, dict]:
    i, knobs, case, seed = job
    return i, case, seed, run(case, knobs, seed)


def _main_seeded(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--seeds N`` (N > 1): every setting and every fair anchor over seeds 0..N-1 of each case, in one pool;
    the rule compares the means (the rule's third point). ``--anchors-from``: an earlier seeded grid's anchors
    (``anchors_from`` with ``seeds``) instead of running them."""
    if args.anchors or args.stress_anchors or args.slo2_anchors:
        parser.error(
            "--seeds N > 1 runs the anchors itself over the same seeds (or reads --anchors-from): no anchor files"
        )
    if args.slo2 and not args.stress:
        parser.error("--slo2 goes with --stress")
    grid = json.loads(args.grid)
    cases = tuple(ALL_CASES if args.stress else CASES) + (tuple(SLO2_CASES) if args.slo2 else ())
    recorded = anchors_from(args.anchors_from, cases, args.seeds) if args.anchors_from else None  # fail early
    settings = _settings(grid)
    jobs = [(i, knobs, case, seed) for i, knobs in enumerate(settings) for case in cases for seed in range(args.seeds)]
    runs: dict[tuple[int, str], list[dict]] = {}
    with multiprocessing.Pool(args.jobs) as pool:
        for i, case, seed, row in pool.imap(_run_case, jobs):
            print(json.dumps({"setting": i, "case": case, "seed": seed, "goodput": row["goodput"], "p99": row["p99"]}))
            runs.setdefault((i, case), []).append(row)
        anchors = recorded if recorded is not None else seeded_anchors(cases, args.seeds, pool)
    rows = [
        {"knobs": knobs, "cases": {case: _mean(runs[i, case]) for case in cases}} for i, knobs in enumerate(settings)
    ]
    chosen = choose(rows, anchors, args.fewest_p99_misses)
    print(json.dumps({"rule": _rule_text(), "seeds": args.seeds, "fewest_p99_misses": args.fewest_p99_misses,
                      "anchors": anchors, "anchors_from": args.anchors_from, "chosen": chosen["knobs"],
                      "grid": rows}))  # fmt: skip


if __name__ == "__main__":
    main()
