"""`zoo sim` says up front how many prompts its fleet refuses as too long (sim/context_fit.py), rather than leaving a
table of inf for every policy alike: the count at the boundary the control plane refuses at, the bundled fleets of a
longer context, the run's JSON, and the refused requests counted unserved in the same run."""

from __future__ import annotations

import argparse
import json

from sim.cli import add_sim_args, run_sim
from sim.context_fit import context_fit
from sim.fleet import parse_fleet
from sim.workload import TraceRequest, Workload, load_trace


def _fleet(max_model_len: int, name: str = "t"):
    return parse_fleet(
        {
            "name": name,
            "model": "sim:llama-3.1-8b",
            "scheduler": {"max_num_batched_tokens": 512, "max_num_seqs": 32, "max_model_len": max_model_len},
            "cells": [{"name": "c", "pools": [{"gpu": "h100-sxm", "count": 1}]}],
        }
    )


def _workload(*prompts: int) -> Workload:
    return Workload("w", tuple(TraceRequest(0.1 * i, n, 8) for i, n in enumerate(prompts)))


def test_a_prompt_of_the_whole_context_is_too_long_one_token_less_fits(tmp_path):
    """check_prompt_length's boundary: a prompt needs room for one output token."""
    for name, context in (("short", 2048), ("long", 8192), ("longest", 65536)):
        (tmp_path / f"{name}.toml").write_text(
            f'name = "{name}"\nmodel = "sim:llama-3.1-8b"\n[scheduler]\nmax_model_len = {context}\n'
            '[[cells]]\nname = "c"\npools = [{ gpu = "h100-sxm", count = 1 }]\n'
        )
    fit = context_fit(_workload(100, 4095, 4096, 9000, 70000), _fleet(4096), fleets_dir=tmp_path)
    assert (fit.num_prompts, fit.num_too_long, fit.max_model_len, fit.longest_prompt) == (5, 3, 4096, 70000)
    assert fit.longer_fleets == (("long", 8192, 2), ("longest", 65536, 1))  # short (2048) is not longer
    warning = fit.warning("t")
    assert warning.startswith("warning: 3 of 5 prompts (60%; the longest 70000 tokens) do not fit fleet t's context")
    assert "PROMPT_TOO_LONG" in warning
    assert "longer context: long (8192 tokens: refuses 2), longest (65536 tokens: refuses 1)" in warning
    assert fit.as_info() == {"max_model_len": 4096, "num_prompts_too_long": 3, "longest_prompt_tokens": 70000}
    every_one_fits = context_fit(_workload(100, 4095), _fleet(4096), fleets_dir=tmp_path)
    assert every_one_fits.warning("t") is None and every_one_fits.longer_fleets == ()


def test_zoo_sim_warns_before_the_runs_and_counts_them_unserved(capsys):
    """mooncake's first 40 requests on zoo (8,192 tokens): the warning on stderr, the count in info.context, and
    each refused prompt unserved in the run's own report; on zoo_long none is refused and nothing is said."""
    parser = argparse.ArgumentParser()
    add_sim_args(parser)
    argv = ["--trace", "mooncake", "--max-requests", "40", "--policy", "round_robin", "--json"]
    assert run_sim(parser.parse_args(["--fleet", "zoo", *argv])) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    prompts = [r.num_prompt_tokens for r in load_trace("mooncake").requests[:40]]
    too_long = sum(n >= 8192 for n in prompts)
    assert too_long > 0 and out["info"]["context"]["num_prompts_too_long"] == too_long
    assert out["info"]["context"]["max_model_len"] == 8192
    assert f"warning: {too_long} of 40 prompts" in captured.err and "zoo_long (131072 tokens" in captured.err
    assert out["policies"][0]["num_unserved"] >= too_long
    assert run_sim(parser.parse_args(["--fleet", "zoo_long", *argv])) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["info"]["context"]["num_prompts_too_long"] == 0
    assert "do not fit" not in captured.err
