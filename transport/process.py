"""What every long-running actor process does the same way: log to stderr (as text, or as one JSON object per line
for a log shipper: the fields a call passes in ``extra`` become the object's keys), stop cleanly on a signal; and how
a parent stops the actor processes it started."""

from __future__ import annotations

import json
import logging
import logging.config
import signal
import subprocess
import sys
from collections.abc import Iterable

import anyio

log = logging.getLogger(__name__)


LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
# a JSON line's own keys (python-json-logger's names for the record's fields; "time": ISO 8601, UTC); every
# ``extra`` field is added beside them
JSON_FIELDS = {"levelname": "level", "name": "logger"}


def configure_logging(level: str = "info", fmt: str = "text", config_file: str | None = None) -> None:
    """The process's root logger: ``level`` and ``fmt`` (LOG_LEVELS, LOG_FORMATS) on stderr; or, with
    ``config_file``, a JSON logging configuration (``logging.config.dictConfig``'s schema: vLLM's
    ``VLLM_LOGGING_CONFIG_PATH``) instead. ValueError saying what is wrong with either."""
    if config_file is not None:
        try:
            with open(config_file, encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise ValueError(f"{config_file}: {e}") from None
        if not isinstance(config, dict):
            raise ValueError(f"{config_file}: a logging configuration is a JSON object, got {type(config).__name__}")
        try:
            logging.config.dictConfig(config)
        except (ValueError, TypeError, AttributeError, ImportError) as e:
            raise ValueError(f"{config_file}: {e}") from None
        return
    if level not in LOG_LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(json_formatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def json_formatter() -> logging.Formatter:
    """A JSON object per record: time, level, logger, message, the ``extra`` fields, and exc_info if there is one."""
    from pythonjsonlogger.json import JsonFormatter

    return JsonFormatter("%(name)s %(levelname)s %(message)s", rename_fields=JSON_FIELDS, timestamp="time")


async def stop_on_signal(scope: anyio.CancelScope) -> None:
    """Cancel ``scope`` at the first SIGINT or SIGTERM (run it in the task group whose scope it is)."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("%s: shutting down", signal.Signals(signum).name)
            scope.cancel()
            return


def stop_processes(procs: Iterable[subprocess.Popen], timeout_s: float = 10.0) -> None:
    """SIGTERM every process still running (a clean shutdown: agents send NodeLeave), then wait for each;
    SIGKILL one that outlives ``timeout_s``."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=timeout_s)
