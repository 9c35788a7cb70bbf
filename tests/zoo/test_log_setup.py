"""A process's logging (transport/process.py ``configure_logging``; zoo/log_args.py's flags): text, or one JSON object
per line whose keys include the fields a call passes in ``extra``; a level; or vLLM's logging configuration file. A bad
value of any is an error naming it."""

from __future__ import annotations

import json
import logging

import pytest

from controlplane.request_log import RequestLog
from transport.process import configure_logging
from zoo.cli import build_parser
from zoo.log_args import configure_logging_from_args


@pytest.fixture(autouse=True)
def _restore_root_logging():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line]


def test_json_lines_carry_the_calls_fields_and_the_exception(capsys):
    configure_logging("info", "json")
    log = logging.getLogger("zoo.test")
    log.info("served %s", "r1", extra={"request_id": "r1", "node_id": "l4-0", "http_status": 200})
    log.debug("not at info")
    try:
        raise ZeroDivisionError("boom")
    except ZeroDivisionError:
        log.exception("failed")
    served, failed = (json.loads(line) for line in _lines(capsys))
    assert served["message"] == "served r1" and served["logger"] == "zoo.test" and served["level"] == "INFO"
    assert (served["request_id"], served["node_id"], served["http_status"]) == ("r1", "l4-0", 200)
    assert served["time"].endswith("+00:00")  # ISO 8601, UTC
    assert failed["level"] == "ERROR" and "ZeroDivisionError: boom" in failed["exc_info"]


def test_text_lines_and_the_level(capsys):
    configure_logging("warning", "text")
    log = logging.getLogger("zoo.test")
    log.info("quiet")
    log.warning("loud %d", 1, extra={"request_id": "r1"})
    (line,) = _lines(capsys)
    assert line.endswith("zoo.test WARNING loud 1")


def test_the_request_logs_lines_carry_their_fields(caplog):
    from backends.fake import ByteTokenizer

    with caplog.at_level(logging.INFO, logger="zoo.requests"):
        RequestLog(ByteTokenizer(), log_outputs=True).done("r9", [104, 105], "completed")
    (record,) = caplog.records
    assert (record.request_id, record.outcome, record.finish_reason) == ("r9", "completed", None)


def test_a_logging_configuration_file_replaces_the_flags(tmp_path):
    out = tmp_path / "zoo.log"
    config = {
        "version": 1,
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(out)}},
        "root": {"handlers": ["file"], "level": "DEBUG"},
        "disable_existing_loggers": False,
    }
    path = tmp_path / "logging.json"
    path.write_text(json.dumps(config))
    configure_logging("info", "json", str(path))
    logging.getLogger("zoo.test").debug("into the file")
    for handler in logging.getLogger().handlers:
        handler.flush()
    assert out.read_text() == "into the file\n"


@pytest.mark.parametrize(
    "text, error",
    [(None, "No such file"), ("{bad", "Expecting"), ("[1]", "a JSON object"), ('{"version": 7}', "version")],
)
def test_a_bad_configuration_file_says_what_is_wrong(tmp_path, text, error):
    path = tmp_path / "logging.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError, match=error):
        configure_logging(config_file=str(path))


def test_the_flags_their_environment_defaults_and_their_errors(monkeypatch, tmp_path):
    monkeypatch.setenv("ZOO_LOG_FORMAT", "json")
    monkeypatch.setenv("ZOO_LOG_LEVEL", "debug")
    args = build_parser().parse_args(["agent"])
    assert (args.log_format, args.log_level, args.log_config_file) == ("json", "debug", None)
    monkeypatch.setenv("VLLM_LOGGING_CONFIG_PATH", str(tmp_path / "missing.json"))
    for command in ("controlplane", "agent", "draft-server"):
        args = build_parser().parse_args([command, "--log-format", "text"])
        assert args.log_format == "text"
        with pytest.raises(SystemExit, match=f"zoo {command}: --log-config-file: .*missing.json"):
            configure_logging_from_args(args, command)
    monkeypatch.delenv("VLLM_LOGGING_CONFIG_PATH")
    for flags, flag in ((["--log-level", "loud"], "--log-level"), (["--log-format", "xml"], "--log-format")):
        with pytest.raises(SystemExit, match=f"zoo agent: {flag}: "):
            configure_logging_from_args(build_parser().parse_args(["agent", *flags]), "agent")
