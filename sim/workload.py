"""Workloads for the fleet simulator: trace replay and synthetic arrivals, scaled to a fleet.

Traces (package data in ``sim/traces/``, gzipped, with their sources and licences in its README.md):
    conv / code   Azure LLM inference 2023 (arrived_at s, num_prefill_tokens, num_decode_tokens)
    mooncake      Mooncake synthetic (timestamp ms, input_length, output_length, hash_ids of 512-token blocks)
Synthetic:
    poisson / gamma   exponential or gamma(CV) inter-arrival times, lognormal prompt and output lengths

A request's prompt token ids are made when it is replayed (``prompt_token_ids``), deterministically from
the seed: a mooncake hash id h always gives the same 512 tokens (equal hash ids → equal token blocks →
real prefix-cache hits in the engine's block manager and in the router's prefix index); a request without
hash ids gets tokens of its own, so it never shares a block with another.

Scaling: ``scale_to_load`` compresses (or stretches) arrival times so that the offered request rate is
``load`` x the fleet's capacity for this workload's mean request; the report states the factor.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

MOONCAKE_BLOCK_TOKENS = 512
TRACE_FILES = {
    "conv": "azure_conv_2023.csv",
    "code": "azure_code_2023.csv",
    "mooncake": "mooncake_synthetic.jsonl",
}
_MIN_TOKEN_ID = 10  # keep clear of the usual special ids
_HEAD_TOKENS = 3  # a request's own tokens begin with its index in this many ids (PromptFactory.own_tokens)
_POOL_TOKENS = 1 << 16  # the seeded pool the rest of a request's own tokens are read from
# The tuning split: hardware_aware's knobs (controlplane/router/router_config.py) may be tuned on the first
# fifth of each trace only; reports use the rest (``zoo sim --split eval``) or the whole trace
TUNE_SHARE = 0.2


TRACE_SUFFIXES = (".csv", ".jsonl", ".csv.gz", ".jsonl.gz")


def default_traces_dir() -> Path:
    """The traces shipped inside the package (``sim/traces/``, package data: an installed wheel has them)."""
    return Path(__file__).resolve().parent / "traces"


def trace_path(name: str, traces_dir: Path | None = None) -> Path:
    """Where trace ``name`` (``conv``, ``code``, ``mooncake``, a file name, or a path ending in one of
    ``TRACE_SUFFIXES``) is: the file itself, else its gzipped copy (``.gz``). FileNotFoundError if neither."""
    traces_dir = default_traces_dir() if traces_dir is None else traces_dir
    is_path = name.endswith(TRACE_SUFFIXES)
    path = Path(name) if is_path else traces_dir / TRACE_FILES.get(name, name)
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"trace {name!r} not found at {path}[.gz] (known: {', '.join(TRACE_FILES)})")


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a workload. ``max_tokens`` is its output length (simulated runners never sample EOS)."""

    arrival_s: float
    num_prompt_tokens: int
    max_tokens: int
    traffic_class: str = "default"
    hash_ids: tuple[int, ...] = ()  # prefix blocks of MOONCAKE_BLOCK_TOKENS tokens (mooncake)


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    requests: tuple[TraceRequest, ...]  # by arrival time
    time_scale: float = 1.0  # arrival times were divided by this (1 = the trace's own rate)

    @property
    def duration_s(self) -> float:
        return self.requests[-1].arrival_s - self.requests[0].arrival_s if len(self.requests) > 1 else 0.0

    @property
    def rate_req_per_s(self) -> float:
        return (len(self.requests) - 1) / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def mean_prompt_tokens(self) -> float:
        return float(np.mean([r.num_prompt_tokens for r in self.requests]))

    @property
    def mean_output_tokens(self) -> float:
        return float(np.mean([r.max_tokens for r in self.requests]))

    def window(self, duration_s: float | None = None, max_requests: int | None = None) -> Workload:
        """The first ``duration_s`` seconds and/or ``max_requests`` requests, arrivals shifted to start at 0."""
        reqs = self.requests
        if not reqs:
            return self
        t0 = reqs[0].arrival_s
        kept = [r for r in reqs if duration_s is None or r.arrival_s - t0 <= duration_s]
        if max_requests is not None:
            kept = kept[:max_requests]
        return replace(self, requests=tuple(replace(r, arrival_s=r.arrival_s - t0) for r in kept))

    def split(self, part: str, tune_share: float = TUNE_SHARE) -> Workload:
        """``tune``: the first ``tune_share`` of the requests (by arrival), the split the router's knobs may be
        tuned on; ``eval``: the rest, arrivals shifted to start at 0, where results are reported; ``all``."""
        if part == "all":
            return self
        if part not in ("tune", "eval"):
            raise ValueError(f"split must be 'tune', 'eval' or 'all', got {part!r}")
        cut = int(len(self.requests) * tune_share)
        kept = self.requests[:cut] if part == "tune" else self.requests[cut:]
        if not kept:
            return replace(self, requests=())
        t0 = kept[0].arrival_s
        return replace(
            self, name=f"{self.name}[{part}]", requests=tuple(replace(r, arrival_s=r.arrival_s - t0) for r in kept)
        )

    def jittered(self, seed: int) -> Workload:
        """The same requests with each arrival moved by a uniform draw in [0, one mean inter-arrival gap),
        seeded: a replica of the trace for ``zoo sim --seeds`` (same lengths, same rate, other interleaving)."""
        if len(self.requests) < 2:
            return self
        gap_s = self.duration_s / (len(self.requests) - 1)
        shifts = np.random.default_rng((seed, 3)).uniform(0.0, gap_s, len(self.requests))
        moved = sorted(
            (replace(r, arrival_s=r.arrival_s + float(d)) for r, d in zip(self.requests, shifts, strict=True)),
            key=lambda r: r.arrival_s,
        )
        return replace(self, requests=tuple(moved))


def load_trace(name: str, traces_dir: Path | None = None, traffic_class: str | None = None) -> Workload:
    """``conv``, ``code`` or ``mooncake`` from ``traces_dir`` (or a path to such a file). Requests carry
    ``traffic_class`` (default: the trace's name)."""
    path = trace_path(name, traces_dir)
    stem = path.name.removesuffix(".gz").rsplit(".", 1)[0]
    label = traffic_class or (name if name in TRACE_FILES else stem)
    reqs: list[TraceRequest] = []
    if path.name.removesuffix(".gz").endswith(".csv"):
        with _open_text(path) as f:
            for row in csv.DictReader(f):
                reqs.append(
                    TraceRequest(
                        float(row["arrived_at"]),
                        max(1, int(float(row["num_prefill_tokens"]))),
                        max(1, int(float(row["num_decode_tokens"]))),
                        label,
                    )
                )
    else:
        with _open_text(path) as f:
            for line in f:
                if not line.strip():
                    continue
                row = json.loads(line)
                reqs.append(
                    TraceRequest(
                        float(row["timestamp"]) / 1e3,
                        max(1, int(row["input_length"])),
                        max(1, int(row["output_length"])),
                        label,
                        tuple(int(h) for h in row.get("hash_ids", ())),
                    )
                )
    reqs.sort(key=lambda r: r.arrival_s)
    return Workload(label, tuple(reqs)).window()


def _open_text(path: Path):
    """A trace file for reading as text, gunzipped on the fly when its name ends in ``.gz``."""
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return path.open(encoding="utf-8", newline="")


def merge(workloads: list[Workload], name: str | None = None) -> Workload:
    """Several workloads replayed together (each keeps its traffic class), arrivals interleaved."""
    reqs = sorted((r for w in workloads for r in w.requests), key=lambda r: r.arrival_s)
    return Workload(name or "+".join(w.name for w in workloads), tuple(reqs))


def synthetic(
    num_requests: int,
    rate_req_per_s: float,
    *,
    arrival: str = "poisson",
    cv: float = 4.0,
    prompt_median: float = 1000.0,
    prompt_sigma: float = 1.0,
    output_median: float = 128.0,
    output_sigma: float = 1.0,
    max_prompt_tokens: int = 7000,
    max_output_tokens: int = 1000,
    seed: int = 0,
    traffic_class: str = "synthetic",
) -> Workload:
    """Poisson (exponential gaps) or gamma-bursty (gaps of coefficient of variation ``cv``) arrivals at
    ``rate_req_per_s``; lognormal prompt and output lengths (median, sigma of the log), clipped."""
    if rate_req_per_s <= 0 or num_requests < 1:
        raise ValueError("rate_req_per_s must be > 0 and num_requests >= 1")
    rng = np.random.default_rng(seed)
    mean_gap = 1.0 / rate_req_per_s
    if arrival == "poisson":
        gaps = rng.exponential(mean_gap, num_requests)
    elif arrival == "gamma":
        shape = 1.0 / (cv * cv)
        gaps = rng.gamma(shape, mean_gap / shape, num_requests)
    else:
        raise ValueError(f"arrival must be 'poisson' or 'gamma', got {arrival!r}")
    times = np.cumsum(gaps) - gaps[0]
    prompts = np.clip(rng.lognormal(math.log(prompt_median), prompt_sigma, num_requests), 1, max_prompt_tokens)
    outputs = np.clip(rng.lognormal(math.log(output_median), output_sigma, num_requests), 1, max_output_tokens)
    reqs = tuple(
        TraceRequest(float(t), int(p), int(o), traffic_class) for t, p, o in zip(times, prompts, outputs, strict=True)
    )
    return Workload(f"{arrival}-synthetic", reqs)


def scale_to_load(workload: Workload, load: float, capacity_req_per_s: float) -> Workload:
    """Arrival times divided by the factor that makes the offered rate ``load`` x ``capacity_req_per_s``."""
    if load <= 0 or capacity_req_per_s <= 0:
        raise ValueError(f"load and capacity must be > 0, got {load}, {capacity_req_per_s}")
    rate = workload.rate_req_per_s
    if rate <= 0:
        return workload
    factor = load * capacity_req_per_s / rate
    reqs = tuple(replace(r, arrival_s=r.arrival_s / factor) for r in workload.requests)
    return Workload(workload.name, reqs, workload.time_scale * factor)


class PromptFactory:
    """Deterministic prompt token ids for the requests of a workload (see the module docstring).

    A request's own tokens (after its hash-id blocks) begin with a head of ``_HEAD_TOKENS`` ids that spell its
    index in base ``vocab_size - _MIN_TOKEN_ID`` (so no two requests' own tokens share a first block: their
    hash chains part there, whatever follows), then run on through one seeded pool of random ids from an
    offset drawn from the index, wrapping round: a list slice per request instead of a generator per request.
    A hash-id block is made the same way from its hash id, through a second pool (so a block never spells a
    request's own tokens): equal ids give equal blocks, different ids part at their first tokens.
    """

    def __init__(self, vocab_size: int, seed: int = 0) -> None:
        self.vocab_size = vocab_size
        self.seed = seed
        self._base = vocab_size - _MIN_TOKEN_ID
        if self._base < 2:
            raise ValueError(f"vocab_size must be > {_MIN_TOKEN_ID + 1}, got {vocab_size}")
        self._pool: list[int] = (
            np.random.default_rng((seed, 2)).integers(_MIN_TOKEN_ID, vocab_size, _POOL_TOKENS).tolist()
        )
        self._block_pool: list[int] = (
            np.random.default_rng((seed, 3)).integers(_MIN_TOKEN_ID, vocab_size, _POOL_TOKENS).tolist()
        )

    def block(self, hash_id: int) -> list[int]:
        """The MOONCAKE_BLOCK_TOKENS tokens of prefix block ``hash_id`` (same id → same tokens)."""
        return self._spelt(hash_id, MOONCAKE_BLOCK_TOKENS, self._block_pool)

    def own_tokens(self, index: int, count: int) -> list[int]:
        """``count`` ids unique to request ``index``: its head (the index spelt out), then the pool from an
        offset drawn from the index."""
        return self._spelt(index, count, self._pool)

    def _spelt(self, number: int, count: int, pool: list[int]) -> list[int]:
        """``count`` ids: ``number`` in ``_HEAD_TOKENS`` digits, then ``pool`` from an offset drawn from them."""
        base, head = self._base, []
        for _ in range(_HEAD_TOKENS):
            number, digit = divmod(number, base)
            head.append(_MIN_TOKEN_ID + digit)
        if count <= _HEAD_TOKENS:
            return head[:count]
        offset = ((head[0] * 0x9E3779B1) ^ (head[1] * 0x85EBCA77) ^ head[2]) % _POOL_TOKENS
        rest = count - _HEAD_TOKENS
        tokens = head + pool[offset : offset + rest]
        while len(tokens) < count:  # wrap round the pool
            tokens += pool[: count - len(tokens)]
        return tokens

    def prompt_token_ids(self, request: TraceRequest, index: int) -> list[int]:
        """``request.num_prompt_tokens`` ids: its hash-id blocks, then tokens unique to request ``index``."""
        n = request.num_prompt_tokens
        tokens: list[int] = []
        for hash_id in request.hash_ids:
            if len(tokens) >= n:
                break
            tokens.extend(self.block(hash_id))
        if len(tokens) < n:
            tokens.extend(self.own_tokens(index, n - len(tokens)))
        del tokens[n:]
        return tokens
