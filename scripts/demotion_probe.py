"""A probe, not a router feature: hardware_aware with every request it predicts to miss its TTFT target on the chosen
node demoted one engine priority level (it runs after the requests that can still meet theirs), on the declared
tuning split, seed 0, default knobs (scripts/tune_router.py's cases). Measures whether SLO-aware demotion of lost
causes would lift goodput where hardware_aware loses it (code80, mooncake80), before building it for real.

    PYTHONPATH=. python scripts/demotion_probe.py code80 code60 conv80 mooncake80

Wraps HardwareAwarePolicy.choose (scripts/record_choices.py; records predict_ttft_s of the chosen node) and the
simulator's place_request (lowers Placement.priority by one for the requests predicted to miss). Prints one JSON
line per case.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from record_choices import recording_choices  # scripts/ beside this file (sys.path[0] when run as a script)
from tune_router import CASES, simulate_tune_split

import sim.des as des
from controlplane import request_intake
from controlplane.router.policies import node_predictions
from sim.report import Slo, summarize


def main(cases: list[str]) -> None:
    predicted_miss: dict[str, bool] = {}
    real_place = request_intake.place_request

    def on_choice(request, snapshot, chosen, config):
        for v in snapshot.nodes:
            if v.node_id == chosen:
                miss = node_predictions.predict_ttft_s(v, request.num_prompt_tokens, config) > config.slo_ttft_s
                predicted_miss[request.request_id] = miss

    def place(msg, **kwargs):
        placed = real_place(msg, **kwargs)
        if isinstance(placed, request_intake.Placement) and predicted_miss.get(msg.request_id):
            placed = dataclasses.replace(placed, priority=placed.priority - 1)
        return placed

    des.place_request = place
    try:
        with recording_choices(on_choice):
            for case in cases:
                result, config = simulate_tune_split(*CASES[case], {})
                r = summarize(result, Slo(config.slo_ttft_s, config.slo_tpot_s))
                row = {"case": case, "p50": r.ttft_s[50], "p99": r.ttft_s[99], "goodput": r.goodput}
                print(json.dumps({**row, "demoted": sum(predicted_miss.values())}), flush=True)
                predicted_miss.clear()
    finally:
        des.place_request = real_place


if __name__ == "__main__":
    main(sys.argv[1:] or list(CASES))
