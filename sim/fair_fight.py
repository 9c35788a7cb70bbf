"""hardware_aware against the best fair anchor of the same ``zoo sim`` run: issue 10's targets, read off the reports.

The fair anchors are the routers as their users run them (controlplane/router/policies/anchors/: each one's source
and version in its docstring), each seeing the information freshness of its own deployment: Envoy's weighted least
request, llm-d's default profile, Dynamo's KV router, SGLang's cache-aware router, vLLM production-stack's
round-robin and prefix-aware routers, and least outstanding requests. Round-robin (ours) and the other policies
that are not anyone's shipped router are left out, and so is production-stack's session router: the traces carry no
session key, so it only runs its lowest-QPS fallback. Of those that ran::

    best P99 anchor      the least mean P99 TTFT     target: hardware_aware's P99 at least P99_LEAD (1.5) x lower
    best goodput anchor  the largest mean goodput    target: hardware_aware's goodput at least as large
                                                     target: hardware_aware's P99/P50 TTFT at most MAX_TAIL_RATIO (3)

The best goodput anchor's own P99 TTFT comes along (``best_goodput_anchor_ttft_p99_s``, and how many times ours
it is: ``best_goodput_anchor_p99_over_ours``): where an anchor is ahead on goodput by giving up the tail (on code at
TTFT 2 s / TPOT 50 ms the anchors ahead serve their P99 request 2-5x later than hardware_aware:
bench/results/2026-12-04-tpot-lost-probe.json), the two targets are a trade, and the report says so.

With ``--seeds`` the figures are the means over the seeds (sim/report.py's ``aggregate``), and each side's 95%
interval half-width comes along (``*_ci95``), so a margin inside the intervals reads as a tie, not a win. The
verdicts are about the policies that ran: ``anchors`` names them, ``missing_anchors`` the fair ones that did not.
"""

from __future__ import annotations

import math

from sim.report import PolicyReport

FAIR_ANCHORS = (
    "envoy_wlr",
    "llm_d",
    "dynamo_kv",
    "sglang_cache_aware",
    "vllm_ps_roundrobin",
    "vllm_ps_prefixaware",
    "least_requests",
)
P99_LEAD = 1.5
MAX_TAIL_RATIO = 3.0
SUBJECT = "hardware_aware"


def _lead(anchor_p99_s: float, subject_p99_s: float) -> float:
    """How many times lower the subject's P99 is (inf: the anchor never served its P99, the subject did)."""
    if math.isnan(anchor_p99_s) or math.isnan(subject_p99_s):
        return math.nan
    if subject_p99_s == math.inf:
        return 0.0 if anchor_p99_s < math.inf else math.nan
    if subject_p99_s <= 0.0:
        return math.inf if anchor_p99_s > 0.0 else math.nan
    return anchor_p99_s / subject_p99_s


def _ci(report: PolicyReport, key: str) -> float | None:
    ci = report.ci95.get(key)
    return ci.get(99) if isinstance(ci, dict) else ci


def fair_fight(reports: list[PolicyReport], subject: str = SUBJECT) -> dict | None:
    """The targets' figures and verdicts, or None when ``subject`` or every fair anchor is missing from the run."""
    by_name = {r.policy: r for r in reports}
    ours = by_name.get(subject)
    anchors = [by_name[name] for name in FAIR_ANCHORS if name in by_name]
    if ours is None or not anchors:
        return None
    best_p99 = min(anchors, key=lambda r: (math.isnan(r.ttft_s[99]), r.ttft_s[99]))
    best_goodput = max(anchors, key=lambda r: r.goodput)
    lead = _lead(best_p99.ttft_s[99], ours.ttft_s[99])
    margin = ours.goodput - best_goodput.goodput
    return {
        "subject": subject,
        "anchors": [r.policy for r in anchors],
        "missing_anchors": [name for name in FAIR_ANCHORS if name not in by_name],
        "seeds": ours.seeds,
        "ttft_p99_s": ours.ttft_s[99],
        "ttft_p99_ci95_s": _ci(ours, "ttft_s"),
        "best_p99_anchor": best_p99.policy,
        "best_p99_anchor_ttft_p99_s": best_p99.ttft_s[99],
        "best_p99_anchor_ttft_p99_ci95_s": _ci(best_p99, "ttft_s"),
        "p99_lead": lead,
        "p99_lead_target": P99_LEAD,
        "p99_lead_met": lead >= P99_LEAD,
        "goodput": ours.goodput,
        "goodput_ci95": _ci(ours, "goodput"),
        "best_goodput_anchor": best_goodput.policy,
        "best_anchor_goodput": best_goodput.goodput,
        "best_anchor_goodput_ci95": _ci(best_goodput, "goodput"),
        "goodput_margin": margin,
        "goodput_met": margin >= 0.0,
        "best_goodput_anchor_ttft_p99_s": best_goodput.ttft_s[99],
        "best_goodput_anchor_ttft_p99_ci95_s": _ci(best_goodput, "ttft_s"),
        "best_goodput_anchor_p99_over_ours": _lead(best_goodput.ttft_s[99], ours.ttft_s[99]),
        "ttft_p99_over_p50": ours.ttft_p99_over_p50,
        "ttft_p99_over_p50_target": MAX_TAIL_RATIO,
        "ttft_p99_over_p50_met": ours.ttft_p99_over_p50 <= MAX_TAIL_RATIO,
    }


def _s(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}" if math.isfinite(x) else ("inf" if x > 0 else str(x))


def _pm(x: float | None) -> str:
    return "" if x is None else f" +-{_s(x)}"


def format_fair_fight(fight: dict) -> str:
    """A few lines for ``zoo sim``'s text report."""
    seeds = f", means over {fight['seeds']} seeds" if fight["seeds"] > 1 else ""
    missing = f" (not run: {', '.join(fight['missing_anchors'])})" if fight["missing_anchors"] else ""
    verdict = {True: "met", False: "missed"}
    lines = [
        f"{fight['subject']} against the best fair anchor of this run{seeds}: of "
        f"{', '.join(fight['anchors'])}{missing}",
        f"  P99 TTFT {_s(fight['ttft_p99_s'])}{_pm(fight['ttft_p99_ci95_s'])} s vs {fight['best_p99_anchor']}'s "
        f"{_s(fight['best_p99_anchor_ttft_p99_s'])}{_pm(fight['best_p99_anchor_ttft_p99_ci95_s'])} s: "
        f"{_s(fight['p99_lead'])}x lower (target >= {fight['p99_lead_target']:g}x): {verdict[fight['p99_lead_met']]}",
        f"  goodput {fight['goodput']:.3f}{_pm(fight['goodput_ci95'])} vs {fight['best_goodput_anchor']}'s "
        f"{fight['best_anchor_goodput']:.3f}{_pm(fight['best_anchor_goodput_ci95'])}: margin "
        f"{fight['goodput_margin']:+.3f} (target >= 0): {verdict[fight['goodput_met']]}; its P99 TTFT "
        f"{_s(fight['best_goodput_anchor_ttft_p99_s'])}{_pm(fight['best_goodput_anchor_ttft_p99_ci95_s'])} s, "
        f"{_s(fight['best_goodput_anchor_p99_over_ours'])}x ours",
        f"  P99/P50 TTFT {_s(fight['ttft_p99_over_p50'])} (target <= {fight['ttft_p99_over_p50_target']:g}): "
        f"{verdict[fight['ttft_p99_over_p50_met']]}",
    ]
    return "\n".join(lines)
