"""Every `zoo bench TARGET` names a function that exists (the CLI imports it only when chosen)."""

from __future__ import annotations

import importlib

from zoo.cli import BENCH_TARGETS, build_parser


def test_every_bench_target_resolves_to_a_function_and_is_offered_by_the_parser():
    for target, (module, function) in BENCH_TARGETS.items():
        assert callable(getattr(importlib.import_module(module), function)), target
        assert build_parser().parse_args(["bench", target]).target == target
