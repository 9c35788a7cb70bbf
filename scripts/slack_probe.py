"""A probe, not a feature: each node's waiting queue in least-slack order instead of FCFS, on the declared tuning
split (seed 0, default router knobs, scripts/tune_router.py's cases), for every policy given.

With one TTFT target for every request, a request's slack at time t is ``arrival + target - t - prefill``, where
``prefill`` is its prompt's prefill time on this node (prompt tokens / the node's measured prefill rate, from its
start-up profile, as in its hello). Least slack first is then a fixed order: by ``arrival - w * prefill`` (w = 1;
w = 0 is FCFS). A preempted request still goes back to the front. Measures whether a tail-aware queue order lowers
P99/P50 TTFT (the conv tail is long prompts waiting behind short ones: bench/results/2026-12-02-tail-diag-conv.json)
before anything is built.

    PYTHONPATH=. python scripts/slack_probe.py --weights 0,1 --policies hardware_aware conv80 code80

Prints one JSON line per (case, policy, weight).
"""

from __future__ import annotations

import argparse
import json

from tune_router import CASES, simulate_split

import sim.des as des
from engine.scheduler import Scheduler
from sim.report import Slo, summarize

CASES = {**CASES, "conv60": ("conv", "zoo", 0.6), "mooncake60": ("mooncake", "zoo_long", 0.6)}


def patched(weight: float):
    """Patch SimNode (each scheduler learns its node's seconds per prompt token) and Scheduler._queue_waiting."""
    real_init, real_queue = des.SimNode.__init__, Scheduler._queue_waiting

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.core.engine.scheduler._s_per_token = 1.0 / self.hello.prefill_tok_per_s

    def queue_waiting(self, request, *, front):
        if front or weight == 0.0:
            return real_queue(self, request, front=front)
        s_per_token = getattr(self, "_s_per_token", 0.0)  # 0 while the node profiles itself at start
        key = request.arrival_time_s - weight * request.num_prompt_tokens * s_per_token
        waiting, i = self._waiting, len(self._waiting)
        while i > 0 and (
            waiting[i - 1].priority < request.priority
            or (
                waiting[i - 1].priority == request.priority
                and waiting[i - 1].num_computed_tokens == 0
                and waiting[i - 1].arrival_time_s - weight * waiting[i - 1].num_prompt_tokens * s_per_token > key
            )
        ):
            i -= 1
        waiting.insert(i, request)

    return init, queue_waiting, real_init, real_queue


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*", default=list(CASES))
    ap.add_argument("--weights", default="0,1")
    ap.add_argument("--policies", default="hardware_aware")
    ap.add_argument("--split", default="tune")
    a = ap.parse_args()
    for case in a.cases:
        for policy in a.policies.split(","):
            for w in map(float, a.weights.split(",")):
                init, queue, real_init, real_queue = patched(w)
                des.SimNode.__init__, Scheduler._queue_waiting = init, queue
                try:
                    result, config = simulate_split(*CASES[case], {}, split=a.split, policy=policy)
                finally:
                    des.SimNode.__init__, Scheduler._queue_waiting = real_init, real_queue
                r = summarize(result, Slo(config.slo_ttft_s, config.slo_tpot_s))
                row = {"case": case, "policy": policy, "weight": w, "p50": r.ttft_s[50], "p99": r.ttft_s[99],
                       "p99_over_p50": r.ttft_p99_over_p50, "goodput": r.goodput}  # fmt: skip
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
