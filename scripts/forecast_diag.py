"""The SLO forecast (controlplane/slo_forecast.py) as an operator's overload signal, checked in the simulator: each
placement forecast as the control plane forecasts it (the chosen node's view before the request is counted there),
then per window of arrival the share forecast late beside the share that missed the TTFT target and the goodput;
and over the run, how often a request forecast late (or in time) then missed. Any policy.

    PYTHONPATH=. python scripts/forecast_diag.py --trace code --load 0.8 --policy hardware_aware,round_robin

``--split eval`` is for diagnosis only (the router's knobs are tuned on the tuning split). One JSON line per policy.
"""

from __future__ import annotations

import json

import numpy as np
from tune_router import case_parser, simulate_split  # scripts/ beside this file (sys.path[0] when run as a script)

import sim.des as des
from controlplane.request_intake import Placement
from controlplane.slo_forecast import SloForecast
from sim.report import Slo


def forecast_run(
    trace: str, fleet: str, load: float, split: str, policy: str, window_s: float, step_budget: str | None = None
) -> dict:
    late_of: dict[str, bool] = {}
    forecasts: list[SloForecast] = []
    real_place = des.place_request

    def place(msg, **kwargs):
        placed = real_place(msg, **kwargs)
        if isinstance(placed, Placement):
            if not forecasts:
                forecasts.append(SloForecast(kwargs["router"]))
            forecast, view = forecasts[0], kwargs["registry"].view(placed.node_id)
            late_of[msg.request_id] = forecast.on_placed(placed.route, view) > forecast.target_s(placed.route)
        return placed

    des.place_request = place
    try:
        result, config = simulate_split(trace, fleet, load, {}, split, policy, step_budget=step_budget)
    finally:
        des.place_request = real_place
    slo = Slo(config.slo_ttft_s, config.slo_tpot_s)
    recs = [r for r in result.records if r.req_id in late_of]
    forecast_late = np.array([late_of[r.req_id] for r in recs])
    missed = np.array([r.ttft_s > slo.ttft_s for r in recs])
    good = np.array([r.ttft_s <= slo.ttft_s and r.tpot_s <= slo.tpot_s for r in recs])
    t0 = min(r.arrival_s for r in recs)
    window = np.array([int((r.arrival_s - t0) // window_s) for r in recs])
    rows = [
        {
            "window": int(w),
            "requests": int((window == w).sum()),
            "forecast_late": round(float(forecast_late[window == w].mean()), 3),
            "ttft_missed": round(float(missed[window == w].mean()), 3),
            "goodput": round(float(good[window == w].mean()), 3),
        }
        for w in np.unique(window)
    ]
    late_share = np.array([r["forecast_late"] for r in rows])
    miss_share = np.array([r["ttft_missed"] for r in rows])
    return {
        "policy": policy,
        "trace": trace,
        "load": load,
        "split": split,
        "placements": len(recs),
        "forecast_late": round(float(forecast_late.mean()), 4),
        "ttft_missed": round(float(missed.mean()), 4),
        "missed_when_forecast_late": round(float(missed[forecast_late].mean()), 3) if forecast_late.any() else None,
        "missed_when_forecast_in_time": round(float(missed[~forecast_late].mean()), 3)
        if (~forecast_late).any()
        else None,
        "window_correlation": round(float(np.corrcoef(late_share, miss_share)[0, 1]), 3)
        if len(rows) > 2 and late_share.std() > 0 and miss_share.std() > 0
        else None,
        "by_window": rows,
    }


def main() -> None:
    parser = case_parser()
    parser.add_argument("--window", type=float, default=10.0, help="virtual seconds per window")
    args = parser.parse_args()
    if args.window <= 0 or args.load <= 0:
        parser.error("--window and --load must be > 0")
    for policy in args.policy.split(","):
        run = forecast_run(args.trace, args.fleet, args.load, args.split, policy, args.window, args.step_budget)
        print(json.dumps(run), flush=True)


if __name__ == "__main__":
    main()
