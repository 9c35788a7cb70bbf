"""Fit the cost model's efficiency factors to measured per-operator timings, and report its error.

Data: ``<repo>/../shared/calibration/{a100,h100}_*_mlp.csv`` (Vidur; median time in ms of each operator of
one decoder layer, against num_tokens and the tensor-parallel degree, for Llama-2-7B, Llama-3-8B and
Llama-2-70B shapes). Per GPU, six factors (``Efficiency``: compute, memory, knee, linear overhead,
elementwise bandwidth, elementwise overhead) minimise the mean squared log error over every operator of
every row (Nelder-Mead, numpy only). ``emb`` is left out: it runs once per step, not per layer.

Errors are reported on the layer time (sum of the measured operators of a row, what a step is made of) and
per operator: |predicted - measured| / measured, median and worst, per GPU.

    python -m backends.sim.calibration          # fit, print the errors, and the constants for cost_model.py
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from backends.checkpoint.model_config import ModelConfig
from backends.gpu_table import GPU_TABLE
from backends.sim.cost_model import (
    BYTES_PER_VALUE,
    FITTED_EFFICIENCY,
    Efficiency,
    elementwise_bytes_per_token,
    linear_shapes,
)
from backends.sim.model_shapes import sim_model

CSV_GPU = {"a100": "a100-80gb", "h100": "h100-sxm"}
LINEAR_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
OPS = LINEAR_OPS + ELEMENTWISE_OPS


def default_calibration_dir() -> Path:
    """``shared/calibration`` beside the repository (the repository's parent folder's ``shared``)."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "calibration"


def _model_of(n_embd: int, n_expanded: int, n_kv_head: int) -> ModelConfig:
    if n_embd == 8192:
        return sim_model("llama-2-70b")
    if n_expanded == 14336:
        return sim_model("llama-3-8b")
    if n_kv_head == 32:
        return sim_model("llama-2-7b")
    raise ValueError(f"no model shape for n_embd={n_embd}, n_expanded_embd={n_expanded}, n_kv_head={n_kv_head}")


@dataclass(slots=True)
class OpData:
    """Every (row, operator) sample of one GPU, as arrays [num_samples]."""

    profile: str
    row: np.ndarray  # row index (for layer sums)
    op: np.ndarray  # index into OPS
    flops: np.ndarray  # 0 for elementwise
    num_bytes: np.ndarray
    is_linear: np.ndarray
    measured_s: np.ndarray
    num_rows: int


def load_samples(directory: Path | None = None) -> dict[str, OpData]:
    """Samples per GPU profile from every ``*_mlp.csv`` in ``directory``."""
    directory = default_calibration_dir() if directory is None else directory
    files = sorted(directory.glob("*_mlp.csv"))
    if not files:
        raise FileNotFoundError(f"no *_mlp.csv calibration files in {directory}")
    columns: dict[str, dict[str, list]] = {}
    row_counts: dict[str, int] = {}
    for path in files:
        profile = CSV_GPU[path.name.split("_")[0]]
        cols = columns.setdefault(profile, {k: [] for k in ("row", "op", "flops", "bytes", "lin", "t")})
        with path.open() as f:
            for record in csv.DictReader(f):
                model = _model_of(int(record["n_embd"]), int(record["n_expanded_embd"]), int(record["n_kv_head"]))
                tp = int(record["num_tensor_parallel_workers"])
                tokens = int(record["num_tokens"])
                row = row_counts.get(profile, 0)
                row_counts[profile] = row + 1
                shapes = {name: (k, n) for name, k, n in linear_shapes(model, tp)}
                per_token = {name: b for name, b, _ in elementwise_bytes_per_token(model, tp)}
                for i, op in enumerate(OPS):
                    measured_ms = float(record[f"time_stats.{op}.median"])
                    if not measured_ms > 0:
                        continue
                    if op in shapes:
                        k, n = shapes[op]
                        flops, num_bytes = 2.0 * tokens * k * n, BYTES_PER_VALUE * (k * n + tokens * (k + n))
                    else:
                        flops, num_bytes = 0.0, per_token[op] * tokens
                    cols["row"].append(row)
                    cols["op"].append(i)
                    cols["flops"].append(flops)
                    cols["bytes"].append(num_bytes)
                    cols["lin"].append(op in shapes)
                    cols["t"].append(measured_ms / 1e3)
    return {
        profile: OpData(
            profile,
            np.array(c["row"]),
            np.array(c["op"]),
            np.array(c["flops"]),
            np.array(c["bytes"], dtype=np.float64),
            np.array(c["lin"], dtype=bool),
            np.array(c["t"]),
            row_counts[profile],
        )
        for profile, c in columns.items()
    }


def predict_s(data: OpData, eff: Efficiency) -> np.ndarray:
    """The cost model's time of every sample (same formulas as cost_model.linear_op_s / elementwise_op_s)."""
    gpu = GPU_TABLE[data.profile]
    tc = data.flops / (gpu.peak_tflops * 1e12 * eff.compute)
    tm = data.num_bytes / (gpu.memory_bandwidth_gbps * 1e9 * eff.memory)
    hi = np.maximum(tc, tm)
    k = eff.knee
    linear = eff.linear_overhead_s + hi * ((tc / hi) ** k + (tm / hi) ** k) ** (1.0 / k)
    elementwise = eff.elementwise_overhead_s + data.num_bytes / (
        gpu.memory_bandwidth_gbps * 1e9 * eff.elementwise_memory
    )
    return np.where(data.is_linear, linear, elementwise)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _to_efficiency(x: np.ndarray) -> Efficiency:
    return Efficiency(
        compute=_sigmoid(x[0]),
        memory=_sigmoid(x[1]),
        knee=1.0 + math.exp(x[2]),
        linear_overhead_s=math.exp(x[3]),
        elementwise_memory=_sigmoid(x[4]),
        elementwise_overhead_s=math.exp(x[5]),
    )


def _from_efficiency(eff: Efficiency) -> np.ndarray:
    def logit(p: float) -> float:
        return math.log(p / (1 - p))

    return np.array(
        [
            logit(eff.compute),
            logit(eff.memory),
            math.log(eff.knee - 1.0),
            math.log(eff.linear_overhead_s),
            logit(eff.elementwise_memory),
            math.log(eff.elementwise_overhead_s),
        ]
    )


def nelder_mead(f, x0: np.ndarray, step: float = 0.5, max_iter: int = 3000, tol: float = 1e-10) -> np.ndarray:
    """Minimise ``f`` from ``x0`` (standard coefficients: reflect 1, expand 2, contract 0.5, shrink 0.5)."""
    n = len(x0)
    simplex = [x0] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(max_iter):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if values[-1] - values[0] < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        fr = f(reflected)
        if fr < values[0]:
            expanded = centroid + 2.0 * (centroid - simplex[-1])
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best] + [best + 0.5 * (x - best) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    return simplex[int(np.argmin(values))]


def fit(data: OpData, start: Efficiency | None = None) -> Efficiency:
    """Efficiency minimising the mean squared log error of every operator sample of ``data``."""
    log_measured = np.log(data.measured_s)

    def loss(x: np.ndarray) -> float:
        pred = predict_s(data, _to_efficiency(x))
        return float(np.mean((np.log(pred) - log_measured) ** 2))

    start = start or Efficiency(0.7, 0.8, 3.0, 5e-6, 0.5, 3e-6)
    x = nelder_mead(loss, _from_efficiency(start))
    x = nelder_mead(loss, x, step=0.1)  # restart: Nelder-Mead stalls on a collapsed simplex
    return _to_efficiency(x)


@dataclass(frozen=True, slots=True)
class ErrorReport:
    profile: str
    num_rows: int
    layer_median: float  # relative error of the layer time (sum of a row's operators)
    layer_worst: float
    op_median: float  # relative error of single operators
    op_worst: float
    op_p90: float


def errors(data: OpData, eff: Efficiency) -> ErrorReport:
    pred = predict_s(data, eff)
    op_err = np.abs(pred - data.measured_s) / data.measured_s
    layer_pred = np.bincount(data.row, weights=pred, minlength=data.num_rows)
    layer_meas = np.bincount(data.row, weights=data.measured_s, minlength=data.num_rows)
    present = layer_meas > 0
    layer_err = np.abs(layer_pred[present] - layer_meas[present]) / layer_meas[present]
    return ErrorReport(
        data.profile,
        int(present.sum()),
        float(np.median(layer_err)),
        float(layer_err.max()),
        float(np.median(op_err)),
        float(op_err.max()),
        float(np.quantile(op_err, 0.9)),
    )


def main() -> None:
    samples = load_samples()
    for profile, data in sorted(samples.items()):
        eff = fit(data)
        rep = errors(data, eff)
        shipped = errors(data, FITTED_EFFICIENCY[profile])
        print(
            f"{profile}: compute={eff.compute:.3f} memory={eff.memory:.3f} knee={eff.knee:.2f} "
            f"linear_overhead_s={eff.linear_overhead_s:.2e} elementwise_memory={eff.elementwise_memory:.3f} "
            f"elementwise_overhead_s={eff.elementwise_overhead_s:.2e}"
        )
        for name, r in (("refit", rep), ("shipped", shipped)):
            print(
                f"  {name:8s} rows={r.num_rows} layer error median {r.layer_median:.1%} worst {r.layer_worst:.1%}; "
                f"operator error median {r.op_median:.1%} p90 {r.op_p90:.1%} worst {r.op_worst:.1%}"
            )


if __name__ == "__main__":
    main()
