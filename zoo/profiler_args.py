"""vLLM's ``--profiler-config`` for `zoo agent` (the profiler its node runs between POST /start_profile and
/stop_profile, agent/node_profiler.py) and `zoo controlplane` (whether it serves those two routes,
controlplane/gateway/profile_routes.py). The same JSON keys as vLLM's (backends/profiler_config.py); without the flag,
vLLM's earlier ``$VLLM_TORCH_PROFILER_DIR`` turns the torch profiler on for both, so one variable set before `zoo up`
reaches its children."""

from __future__ import annotations

import argparse

from backends.profiler_config import ProfilerConfig, parse_profiler_config, profiler_config_from_env


def _parsed(text: str) -> ProfilerConfig:
    try:
        return parse_profiler_config(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_profiler_args(p: argparse.ArgumentParser, who: str) -> None:
    p.add_argument(
        "--profiler-config",
        type=_parsed,
        default=None,
        metavar="JSON",
        help=f'{who}, e.g. \'{{"profiler": "torch", "torch_profiler_dir": "/var/tmp/zoo-traces"}}\' (vLLM\'s keys; '
        "profiler torch|cuda|jax, delay_iterations, max_iterations...; default: $VLLM_TORCH_PROFILER_DIR's, else off)",
    )


def own_profile_dir(config: ProfilerConfig | None) -> str | None:
    """Where the control plane profiles its own loop (vLLM's frontend trace): the config's directory unless
    ``ignore_frontend`` (None: not profiled)."""
    return config.trace_dir or None if config is not None and not config.ignore_frontend else None


def profiler_config_from_args(args: argparse.Namespace) -> ProfilerConfig | None:
    """The flag's config, else ``$VLLM_TORCH_PROFILER_DIR``'s, else None (profiling off)."""
    config = getattr(args, "profiler_config", None)
    if config is None:
        try:
            config = profiler_config_from_env()
        except ValueError as e:
            raise SystemExit(f"$VLLM_TORCH_PROFILER_DIR: {e}") from None
    return config if config is not None and config.enabled else None
