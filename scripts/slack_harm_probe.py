"""A probe, not a feature: decode protection that counts the decoders a prompt actually pushes over the TPOT target,
from each decoder's own progress (an oracle: the simulated nodes' step counts, which no router sees today), on the
declared tuning split (scripts/tune_router.py's cases and seeds).

Decode protection today (RouterConfig.slo_tpot_harm_penalty_s) charges a fixed penalty where the node's predicted
decode TPOT with this prompt's chunks is above the target: the whole batch counted as one. Here each decoder i on a
node has, at decision time, ``n_i = max_tokens_i - 1`` decode steps in all, ``k_i`` done (the node's steps since its
first token), ``e_i`` s since its first token, and with the node's predicted step ``s`` (the table's step column)

    slack_i = T * n_i - e_i - (n_i - k_i) * s     (how much extra time it can take and still meet TPOT T)

A prompt adds its prefill time to each step it shares, a chunk per step at most: decoder i takes
``min(X, r_i * c)`` of X s of prefill (``r_i = n_i - k_i`` steps left, ``c`` the chunk's time). The node's backlog
``B`` comes first, so the prompt (own time ``P``) pushes decoder i over iff

    min(B, r_i c) <= slack_i < min(B + P, r_i c)

and the cost adds ``weight * (that count)``; with ``--no-flat`` the fixed penalty stays, else it is set to 0 (the
count replaces it). weight 0 with the flat penalty is hardware_aware as it was when the probe ran
(RouterConfig.slo_tpot_harm_count off: the flat rows pin it off).

    PYTHONPATH=.:scripts python scripts/slack_harm_probe.py --weights 0,3,10 --seeds 3

Prints one JSON line per (case, weight, seed) and the means per weight at the end.
"""

from __future__ import annotations

import argparse

import numpy as np
import tune_router as tr
from harm_probe import numpy_table
from probe_runner import run_probe

import agent.node_core as node_core
import sim.des as des
from controlplane.router.policies import hardware_aware as ha

CORES: dict[str, node_core.NodeCore] = {}  # node id -> its NodeCore (this process's run)
STEPS: dict[str, int] = {}  # node id -> steps finished
REPORTED: dict[str, tuple[int, float]] = {}  # node id -> (steps finished, time) at its last load report


class SlackPolicy(ha.HardwareAwarePolicy):
    weight = 0.0
    router_side = False  # True: k_i estimated as e_i / the node's measured mean step (what a router can know)
    reported = False  # True: k_i exact as of the node's last load report, estimated since (a node-reported design)
    lengths_only = False  # True: slack_i = n_i * (T - s), no cap (the past at the predicted step: lengths alone)

    def __init__(self, config) -> None:
        super().__init__(config, use_kernel=False)
        self._max_tokens: dict[str, int] = {}
        self._decoders: dict[str, dict[str, tuple[float, int, int]]] = {}  # node -> req -> (t_ft, steps@ft, n)

    def on_routed(self, request, node_id: str) -> None:
        super().on_routed(request, node_id)
        self._max_tokens[request.request_id] = request.max_tokens

    def on_first_token(self, request_id: str, node_id: str) -> None:
        super().on_first_token(request_id, node_id)
        core = CORES.get(node_id)
        n = self._max_tokens.get(request_id, 0) - 1
        if core is not None and n > 0:
            now = core.engine.clock.now()
            self._decoders.setdefault(node_id, {})[request_id] = (now, STEPS.get(node_id, 0), n)

    def on_finished(self, request_id: str, node_id: str) -> None:
        super().on_finished(request_id, node_id)
        self._max_tokens.pop(request_id, None)
        self._decoders.get(node_id, {}).pop(request_id, None)

    def choose(self, request, snapshot):
        chosen = super().choose(request, snapshot)
        table = numpy_table(self, request, snapshot, chosen, self.weight)
        if table is None:
            return chosen
        cost, columns = self._cost, table.columns
        target = self.config.slo_tpot_s
        now = snapshot.now_s
        prompt = float(max(request.num_prompt_tokens, 1))
        harm = np.zeros(len(table.node_ids))
        for j, node_id in enumerate(table.node_ids):
            decoders = self._decoders.get(node_id)
            if not decoders:
                continue
            step_s = columns[ha._COL_STEP_S][j]
            chunk_s = columns[ha._COL_CHUNK_S][j]
            backlog_s = columns[ha._COL_BACKLOG_S][j]
            own_s = prompt * columns[ha._COL_INV_RATE][j]
            steps = STEPS.get(node_id, 0)
            past_s = table.nodes[j].step_mean_ms / 1000.0 or step_s
            count = 0
            for t_ft, steps_ft, n in decoders.values():
                if self.router_side:
                    done = (now - t_ft) / past_s
                elif self.reported:
                    rep_steps, rep_s = REPORTED.get(node_id, (0, -1.0))
                    if rep_s >= t_ft:
                        done = rep_steps - steps_ft + (now - rep_s) / past_s
                    else:
                        done = (now - t_ft) / past_s
                else:
                    done = steps - steps_ft
                left = max(n - done, 0)
                if self.lengths_only:
                    slack, cap = n * (target - step_s), np.inf
                else:
                    slack = target * n - (now - t_ft) - left * step_s
                    cap = left * chunk_s
                if min(backlog_s, cap) <= slack < min(backlog_s + own_s, cap):
                    count += 1
            harm[j] = count
        return table.node_ids[int((cost + self.weight * harm).argmin())]


_INSTALLED = []


def _install() -> None:
    if _INSTALLED:
        return
    _INSTALLED.append(True)
    real_make, real_init = des.make_policy, des.SimNode.__init__
    real_step, real_run = node_core.NodeCore.finish_step, node_core.NodeCore.finish_decode_steps
    real_report = node_core.NodeCore.load_report

    def load_report(self):
        REPORTED[self.node_id] = (STEPS.get(self.node_id, 0), self.engine.clock.now())
        return real_report(self)

    def make(name, config=None):
        return SlackPolicy(config) if name == "hardware_aware" else real_make(name, config)

    def init(self, spec, fleet, clock):
        real_init(self, spec, fleet, clock)
        CORES[spec.node_id] = self.core
        STEPS[spec.node_id] = 0

    def finish_step(self, *a, **k):
        out = real_step(self, *a, **k)
        STEPS[self.node_id] = STEPS.get(self.node_id, 0) + 1
        return out

    def finish_run(self, plan, **k):
        out = real_run(self, plan, **k)
        STEPS[self.node_id] = STEPS.get(self.node_id, 0) + plan.num_steps
        return out

    des.make_policy = make
    des.SimNode.__init__ = init
    node_core.NodeCore.finish_step = finish_step
    node_core.NodeCore.finish_decode_steps = finish_run
    node_core.NodeCore.load_report = load_report


def _job(job: tuple[str, float, bool, int, str]) -> dict:
    case, weight, flat, seed, mode = job
    SlackPolicy.router_side = mode == "router"
    SlackPolicy.lengths_only = mode == "lengths"
    SlackPolicy.reported = mode == "reported"
    _install()
    CORES.clear()
    STEPS.clear()
    REPORTED.clear()
    SlackPolicy.weight = weight
    knobs = {"slo_tpot_harm_count": False} if flat else {"slo_tpot_harm_penalty_s": 0.0}  # flat: as it ran
    r = tr.run(case, knobs, seed)
    return {"case": case, "weight": weight, "flat": flat, "seed": seed, "mode": mode,
            "goodput": round(r["goodput"], 4), "p50": round(r["p50"], 4), "p99": round(r["p99"], 4)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="*", default=[*tr.ALL_CASES, *tr.SLO2_CASES])
    ap.add_argument("--weights", default="0,3,10")
    ap.add_argument("--no-flat", action="store_true", help="keep the fixed harm penalty beside the count")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--mode", choices=("oracle", "router", "lengths", "reported"), default="oracle",
                    help="oracle: the nodes' step counts; router: k_i = e_i / the node's measured mean step; "
                    "lengths: slack_i = n_i * (T - s), no cap; reported: k_i exact at the node's last load report, "
                    "then e / the measured mean step")  # fmt: skip
    a = ap.parse_args()
    weights = [float(w) for w in a.weights.split(",")]
    jobs = [
        (case, w, a.no_flat or w == 0.0, seed, a.mode) for case in a.cases for w in weights for seed in range(a.seeds)
    ]
    run_probe(_job, jobs, a.jobs, a.cases, "weight", weights)


if __name__ == "__main__":
    main()
