"""Small fleets and workloads for simulator tests (fixtures: --import-mode=importlib)."""

from __future__ import annotations

import argparse
import json

import pytest

from sim.cli import add_sim_args, run_sim
from sim.fleet import parse_fleet
from sim.workload import TraceRequest, Workload, default_traces_dir


def _small_fleet(cells: list[dict] | None = None):
    return parse_fleet(
        {
            "name": "t",
            "model": "sim:llama-3-8b",
            "scheduler": {"max_num_batched_tokens": 512, "max_num_seqs": 32},
            "cells": cells or [{"name": "c", "pools": [{"gpu": "h100-sxm", "count": 1}, {"gpu": "l4", "count": 2}]}],
        }
    )


@pytest.fixture
def small_fleet():
    return _small_fleet


@pytest.fixture
def tiny_workload():
    def make(num: int = 60, gap_s: float = 0.05, prompt: int = 300, output: int = 20, hash_ids=None, cls="default"):
        reqs = tuple(
            TraceRequest(i * gap_s, prompt, output, cls, tuple(hash_ids(i)) if hash_ids else ()) for i in range(num)
        )
        return Workload("tiny", reqs)

    return make


@pytest.fixture
def traces_dir():
    return default_traces_dir()  # package data (sim/traces/): always there


@pytest.fixture
def sim_json_by_jobs(capfd):
    """``run(argv)``: `zoo sim argv --jobs 1`, then `--jobs 2`; (the two JSON outputs, the second run's log)."""

    def run(argv: list[str]) -> tuple[list[dict], str]:
        parser = argparse.ArgumentParser()
        add_sim_args(parser)
        outs, err = [], ""
        for jobs in ("1", "2"):
            assert run_sim(parser.parse_args([*argv, "--jobs", jobs])) == 0
            captured = capfd.readouterr()
            outs.append(json.loads(captured.out))
            err = captured.err
        return outs, err

    return run
