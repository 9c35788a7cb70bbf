"""What a simulated run says, per policy: latency percentiles, goodput against an SLO, preemption, use.

    TTFT   first token time - arrival (at the router)          TPOT  (finish - first token) / (outputs - 1)
    E2E    finish - arrival                                    P99/P50 of TTFT: the tail ratio
    goodput  share of *offered* requests with TTFT <= slo_ttft_s and TPOT <= slo_tpot_s (a request that was
             refused or did not finish before the drain limit fails the SLO and counts as +inf latency)
    refused  requests the control plane's intake refused, by reason (overloaded = a 429 from admission
             control, no_node, prompt_too_long)
    utilisation per GPU profile: predicted busy time / (nodes of that profile x simulated time)
    slo_by_gpu  per GPU profile, the shares of its requests meeting TTFT, TPOT and both (sim/slo_by_gpu.py)

Percentiles are empirical (``inverted_cdf``), so an unfinished request makes a high percentile +inf
instead of interpolating it away.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

import numpy as np

from sim.des import SimResult
from sim.slo_by_gpu import format_slo_by_gpu, mean_slo_by_gpu, slo_by_gpu

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_s: float = 1.0
    tpot_s: float = 0.1


@dataclass(slots=True)
class PolicyReport:
    policy: str
    num_requests: int
    num_unserved: int  # refused, or unfinished at the drain limit
    ttft_s: dict[int, float]
    tpot_s: dict[int, float]
    e2e_s: dict[int, float]
    ttft_p99_over_p50: float
    goodput: float
    num_preemptions: int
    num_swapped_out_blocks: int
    num_swapped_in_blocks: int
    num_recomputed_tokens: int
    prefix_cache_hit_rate: float
    utilisation: dict[str, float]
    requests_by_gpu: dict[str, int]
    simulated_s: float
    wall_s: float
    speedup: float
    refused: dict[str, int] = field(default_factory=dict)  # by ErrorCode value
    seeds: int = 1  # runs averaged into this report (``aggregate``)
    ci95: dict = field(default_factory=dict)  # half-widths of 95% intervals of the means, when seeds > 1
    slo_by_gpu: dict = field(default_factory=dict)  # where the SLO is met, per GPU type (sim/slo_by_gpu.py)
    extra: dict = field(default_factory=dict)


def _percentiles(values: np.ndarray) -> dict[int, float]:
    if len(values) == 0:
        return {p: math.nan for p in PERCENTILES}
    return {p: float(np.percentile(values, p, method="inverted_cdf")) for p in PERCENTILES}


def summarize(result: SimResult, slo: Slo | None = None) -> PolicyReport:
    slo = slo or Slo()
    records = result.records
    ttft = np.array([r.ttft_s for r in records])
    tpot = np.array([r.tpot_s for r in records])
    e2e = np.array([r.e2e_s for r in records])
    ok = (ttft <= slo.ttft_s) & (tpot <= slo.tpot_s)
    ttft_pct = _percentiles(ttft)
    busy: dict[str, float] = {}
    count: dict[str, int] = {}
    requests_by_gpu: dict[str, int] = {}
    for n in result.nodes:
        busy[n.profile] = busy.get(n.profile, 0.0) + n.busy_s
        count[n.profile] = count.get(n.profile, 0) + 1
        requests_by_gpu[n.profile] = requests_by_gpu.get(n.profile, 0) + n.num_requests
    end_s = max(result.end_s, 1e-9)
    queries = sum(n.num_requests for n in result.nodes)
    hit_rate = (
        sum(n.prefix_cache_hit_rate * n.num_requests for n in result.nodes) / queries if queries else 0.0
    )  # request-weighted mean of the nodes' token hit rates
    return PolicyReport(
        policy=result.policy,
        num_requests=len(records),
        num_unserved=int(np.sum(~np.isfinite(e2e))),
        ttft_s=ttft_pct,
        tpot_s=_percentiles(tpot),
        e2e_s=_percentiles(e2e),
        ttft_p99_over_p50=ttft_pct[99] / ttft_pct[50] if ttft_pct[50] > 0 else math.inf,
        goodput=float(ok.mean()) if len(records) else math.nan,
        num_preemptions=sum(n.num_preemptions for n in result.nodes),
        num_swapped_out_blocks=sum(n.num_swapped_out_blocks for n in result.nodes),
        num_swapped_in_blocks=sum(n.num_swapped_in_blocks for n in result.nodes),
        num_recomputed_tokens=sum(n.num_recomputed_tokens for n in result.nodes),
        prefix_cache_hit_rate=hit_rate,
        utilisation={p: busy[p] / (count[p] * end_s) for p in busy},
        requests_by_gpu=requests_by_gpu,
        simulated_s=result.end_s,
        wall_s=result.wall_s,
        speedup=result.speedup,
        refused=_count_refusals(records),
        slo_by_gpu=slo_by_gpu(result, slo.ttft_s, slo.tpot_s),
        extra={
            **({"classes": by_class(records, slo)} if len({r.traffic_class for r in records}) > 1 else {}),
            **({"overload": result.info["overload"]} if "overload" in result.info else {}),
        },
    )


def by_class(records, slo: Slo) -> dict[str, dict]:
    """Per traffic class (controlplane/cells.py): requests, refusals, TTFT P50/P99 in ms, goodput — what
    the control plane's ``zoo:class_*`` metrics show for a real fleet."""
    out = {}
    for name in sorted({r.traffic_class for r in records}):
        mine = [r for r in records if r.traffic_class == name]
        ttft = _percentiles(np.array([r.ttft_s for r in mine]))
        ok = [r.ttft_s <= slo.ttft_s and r.tpot_s <= slo.tpot_s for r in mine]
        out[name] = {
            "requests": len(mine),
            "refused": sum(r.refusal is not None for r in mine),
            "ttft_ms_p50": 1e3 * ttft[50],
            "ttft_ms_p99": 1e3 * ttft[99],
            "goodput": sum(ok) / len(mine),
        }
    return out


def format_classes(reports: list[PolicyReport]) -> str:
    """One line per policy and traffic class, when a run had several classes (else empty)."""
    lines = []
    for report in reports:
        for name, row in report.extra.get("classes", {}).items():
            lines.append(
                f"{report.policy:24s} {name:12s} {row['requests']:6d} requests  {row['refused']:5d} refused  "
                f"TTFT p50 {_ms(row['ttft_ms_p50'] / 1e3):>7s}  p99 {_ms(row['ttft_ms_p99'] / 1e3):>7s} ms  "
                f"goodput {row['goodput']:.1%}"
            )
    return "\n".join(["by traffic class:", *lines]) if lines else ""


def _count_refusals(records) -> dict[str, int]:
    refused: dict[str, int] = {}
    for r in records:
        if r.refusal is not None:
            refused[r.refusal] = refused.get(r.refusal, 0) + 1
    return refused


# Student's t, 97.5% quantile, by degrees of freedom 1..30 (a 95% two-sided interval); 1.96 beyond
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
    2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def _mean_ci(values: list[float]) -> tuple[float, float | None]:
    """(mean, half-width of its 95% interval); an infinite value makes both infinite; one value: no interval."""
    if any(not math.isfinite(v) for v in values):
        return (math.inf if any(v == math.inf for v in values) else math.nan), math.inf
    mean = float(np.mean(values))
    if len(values) < 2:
        return mean, None
    t = _T975[len(values) - 2] if len(values) - 1 <= len(_T975) else 1.96
    return mean, float(t * np.std(values, ddof=1) / math.sqrt(len(values)))


def _mean_count(values) -> int:
    return round(float(np.mean(list(values))))


def _aggregate_one(reports: tuple[PolicyReport, ...]) -> PolicyReport:
    first = reports[0]
    ci: dict = {}
    percentiles: dict[str, dict[int, float]] = {}
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        pairs = {p: _mean_ci([getattr(r, name)[p] for r in reports]) for p in PERCENTILES}
        percentiles[name] = {p: mean for p, (mean, _) in pairs.items()}
        ci[name] = {p: half for p, (_, half) in pairs.items()}
    goodput, ci["goodput"] = _mean_ci([r.goodput for r in reports])
    ratio, ci["ttft_p99_over_p50"] = _mean_ci([r.ttft_p99_over_p50 for r in reports])
    return PolicyReport(
        policy=first.policy,
        num_requests=first.num_requests,
        num_unserved=_mean_count(r.num_unserved for r in reports),
        ttft_s=percentiles["ttft_s"],
        tpot_s=percentiles["tpot_s"],
        e2e_s=percentiles["e2e_s"],
        ttft_p99_over_p50=ratio,
        goodput=goodput,
        num_preemptions=_mean_count(r.num_preemptions for r in reports),
        num_swapped_out_blocks=_mean_count(r.num_swapped_out_blocks for r in reports),
        num_swapped_in_blocks=_mean_count(r.num_swapped_in_blocks for r in reports),
        num_recomputed_tokens=_mean_count(r.num_recomputed_tokens for r in reports),
        prefix_cache_hit_rate=float(np.mean([r.prefix_cache_hit_rate for r in reports])),
        utilisation={p: float(np.mean([r.utilisation.get(p, 0.0) for r in reports])) for p in first.utilisation},
        requests_by_gpu={p: _mean_count(r.requests_by_gpu.get(p, 0) for r in reports) for p in first.requests_by_gpu},
        simulated_s=float(np.mean([r.simulated_s for r in reports])),
        wall_s=sum(r.wall_s for r in reports),
        speedup=float(np.mean([r.speedup for r in reports])),
        refused={k: _mean_count(r.refused.get(k, 0) for r in reports) for k in {k for r in reports for k in r.refused}},
        seeds=len(reports),
        ci95=ci,
        slo_by_gpu=mean_slo_by_gpu([r.slo_by_gpu for r in reports]),
        extra=_aggregate_overload(reports),
    )


def _aggregate_overload(reports: list[PolicyReport]) -> dict:
    """hardware_aware's overload mode over the seeds: mean activations and share of decisions made in it."""
    runs = [r.extra["overload"] for r in reports if "overload" in r.extra]
    if not runs:
        return {}
    return {"overload": {k: float(np.mean([run[k] for run in runs])) for k in ("activations", "share_of_decisions")}}


def aggregate(runs: list[list[PolicyReport]]) -> list[PolicyReport]:
    """One report per policy over several seeds (each inner list: one seed's reports, in the same policy
    order): latency percentiles, goodput and the tail ratio are means over the seeds with the half-width of
    their 95% interval (Student's t) in ``ci95``; utilisation is a mean; counts are means, rounded."""
    return [_aggregate_one(reports) for reports in zip(*runs, strict=True)]


def _ms(x: float) -> str:
    if not math.isfinite(x):
        return "inf"
    return f"{1e3 * x:.0f}" if x >= 0.1 else f"{1e3 * x:.1f}"


def format_table(reports: list[PolicyReport], slo: Slo | None = None) -> str:
    """One row per policy (times in ms), then utilisation and request share per GPU profile."""
    slo = slo or Slo()
    head = (
        f"{'policy':24s} {'TTFT p50':>8s} {'p90':>7s} {'p99':>8s} {'p99/p50':>7s} | {'TPOT p50':>8s} {'p90':>6s} "
        f"{'p99':>6s} | {'E2E p50':>7s} {'p90':>7s} {'p99':>8s} | {'goodput':>7s} {'preempt':>7s} {'swap o/i':>11s} "
        f"{'unserved':>8s} {'429s':>6s}"
    )
    lines = [f"latencies in ms; goodput = share of requests with TTFT <= {slo.ttft_s:g} s and TPOT <= "
             f"{1e3 * slo.tpot_s:g} ms", head, "-" * len(head)]  # fmt: skip
    for r in reports:
        ratio = f"{r.ttft_p99_over_p50:.1f}" if math.isfinite(r.ttft_p99_over_p50) else "inf"
        lines.append(
            f"{r.policy:24s} {_ms(r.ttft_s[50]):>8s} {_ms(r.ttft_s[90]):>7s} {_ms(r.ttft_s[99]):>8s} {ratio:>7s} | "
            f"{_ms(r.tpot_s[50]):>8s} {_ms(r.tpot_s[90]):>6s} {_ms(r.tpot_s[99]):>6s} | {_ms(r.e2e_s[50]):>7s} "
            f"{_ms(r.e2e_s[90]):>7s} {_ms(r.e2e_s[99]):>8s} | {r.goodput:>7.1%} {r.num_preemptions:>7d} "
            f"{f'{r.num_swapped_out_blocks}/{r.num_swapped_in_blocks}':>11s} {r.num_unserved:>8d} "
            f"{r.refused.get('overloaded', 0):>6d}"
        )
    if any(r.seeds > 1 for r in reports):
        lines.append("")
        lines.append(f"means over {reports[0].seeds} seeds; 95% intervals (+-):")
        for r in reports:
            ttft99, tpot99, good = r.ci95["ttft_s"][99], r.ci95["tpot_s"][99], r.ci95["goodput"]
            lines.append(
                f"{r.policy:24s} TTFT p99 +-{_ms(ttft99) if ttft99 is not None else '-':>7s} ms   "
                f"TPOT p99 +-{_ms(tpot99) if tpot99 is not None else '-':>6s} ms   "
                f"goodput +-{good if good is not None else math.nan:>6.1%}"
            )
    profiles = sorted({p for r in reports for p in r.utilisation})
    lines.append("")
    lines.append(f"{'utilisation / requests':24s} " + " ".join(f"{p:>18s}" for p in profiles) + "   sim speed")
    for r in reports:
        cells = [f"{r.utilisation.get(p, 0):>7.0%} / {r.requests_by_gpu.get(p, 0):>7d}" for p in profiles]
        lines.append(f"{r.policy:24s} " + " ".join(f"{c:>18s}" for c in cells) + f"   {r.speedup:>6.1f}x")
    where = format_slo_by_gpu([(r.policy, r.slo_by_gpu) for r in reports], slo.ttft_s, slo.tpot_s)
    if where:
        lines += ["", where]
    return "\n".join(lines)


def to_jsonable(reports: list[PolicyReport], info: dict) -> dict:
    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
        if isinstance(x, dict):
            return {str(k): clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    return clean({"info": info, "policies": [asdict(r) for r in reports]})


def dumps(reports: list[PolicyReport], info: dict) -> str:
    return json.dumps(to_jsonable(reports, info), indent=2)


def slo_breaking_load(points: dict[str, list[tuple[float, float]]], target: float = 0.99) -> dict[str, float | None]:
    """Per policy, from (offered load, goodput) points: the lowest load at which goodput falls below
    ``target`` (None: it never does over the loads tried)."""
    out: dict[str, float | None] = {}
    for policy, pts in points.items():
        failing = [load for load, goodput in sorted(pts) if not goodput >= target]
        out[policy] = failing[0] if failing else None
    return out


def plot_cdfs(results: list[SimResult], path: str, title: str = "") -> None:
    """Latency CDFs (TTFT, TPOT, E2E) per policy into a PNG. Needs matplotlib (optional dependency)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise RuntimeError("--plot needs matplotlib: pip install matplotlib") from e
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, (label, attr) in zip(axes, (("TTFT (s)", "ttft_s"), ("TPOT (s)", "tpot_s"), ("E2E (s)", "e2e_s"))):
        for result in results:
            values = np.sort([getattr(r, attr) for r in result.records])
            finite = values[np.isfinite(values)]
            if len(finite) == 0:
                continue
            y = np.arange(1, len(finite) + 1) / len(values)
            ax.plot(finite, y, label=result.policy)
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("share of requests")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
