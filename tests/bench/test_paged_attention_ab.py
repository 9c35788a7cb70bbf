"""bench/paged_attention_ab.py's quick half: the flash-decoding launch and the one-split launch it replaced give
the same attention on every case it would time (the tiny shape; on CUDA where there is one, else under the
interpreter)."""

from __future__ import annotations

import argparse
import json

import torch

from bench.paged_attention_ab import run_ab

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_before_and_after_agree():
    report = run_ab(argparse.Namespace(device=DEVICE, quick=True, steps=2))
    assert len(report["kernel"]) == 8
    assert {r["splits"] for r in report["kernel"]} > {1}  # wide tables split (the interpreter counts 4 "SMs")
    assert report["kernel_max_abs_diff"] <= (1e-4 if DEVICE == "cpu" else 2e-2)  # bf16 on CUDA
    assert report["decode"] == []  # --quick times no whole decode steps


def test_zoo_bench_runs_it(capsys):
    from zoo.cli import main

    assert main(["bench", "paged-attention", "--quick", "--json", "--device", DEVICE]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["kernel"]) == 8 and report["kernel_max_abs_diff"] <= (1e-4 if DEVICE == "cpu" else 2e-2)
