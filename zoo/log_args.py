"""The log flags every long-running process takes (`zoo controlplane`, `zoo agent`, `zoo draft-server`):
``--log-level``, ``--log-format text|json`` and vLLM's ``--log-config-file``. Their defaults come from the environment
($ZOO_LOG_LEVEL, $ZOO_LOG_FORMAT, vLLM's $VLLM_LOGGING_CONFIG_PATH), so `zoo up`'s and `zoo serve`'s children log alike
when the parent's environment says so. A bad value: SystemExit naming the flag."""

from __future__ import annotations

import argparse
import os

from transport.process import LOG_FORMATS, LOG_LEVELS, configure_logging


def add_log_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--log-level",
        default=os.environ.get("ZOO_LOG_LEVEL", "info"),
        metavar="|".join(LOG_LEVELS),
        help="the lowest level logged (default $ZOO_LOG_LEVEL, else info)",
    )
    p.add_argument(
        "--log-format",
        default=os.environ.get("ZOO_LOG_FORMAT", "text"),
        metavar="|".join(LOG_FORMATS),
        help="'json': one JSON object per line (time, level, logger, message and the line's fields: a request's id, "
        "node, status...) for a log shipper; default $ZOO_LOG_FORMAT, else text",
    )
    p.add_argument(
        "--log-config-file",
        default=os.environ.get("VLLM_LOGGING_CONFIG_PATH"),
        metavar="JSON",
        help="a logging.config.dictConfig JSON file instead of the two flags above (vLLM's flag; default "
        "$VLLM_LOGGING_CONFIG_PATH)",
    )


def configure_logging_from_args(args: argparse.Namespace, command: str) -> None:
    try:
        configure_logging(
            getattr(args, "log_level", "info"),
            getattr(args, "log_format", "text"),
            getattr(args, "log_config_file", None),
        )
    except ValueError as e:
        flag = "--log-level" if "log level" in str(e) else "--log-format" if "log format" in str(e) else ""
        flag = flag or "--log-config-file"
        raise SystemExit(f"zoo {command}: {flag}: {e}") from None
