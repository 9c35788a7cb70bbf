"""vLLM's ``--enable-log-requests`` (controlplane/request_log.py): one line per request taken or refused, its prompt
and token ids cut at ``--max-log-len``; a chat's prompt decoded from its tokens; off, nothing written. Then the flags
on a real control plane process, a request through its gateway and one refused at its intake."""

from __future__ import annotations

import logging
import time

import httpx
import pytest

from backends.fake import ByteTokenizer
from controlplane.request_intake import Placement
from controlplane.request_log import RequestLog
from controlplane.router.policy import RouteRequest
from engine.sampling_params import SamplingParams
from transport.chat_wire import ChatMessage
from transport.messages import ClientGenerate, ErrorCode, ErrorReply
from zoo.cli import build_parser


def _placed(token_ids: list[int]) -> Placement:
    route = RouteRequest("r", "m", len(token_ids), 4, (), traffic_class="chat")
    return Placement(node_id="l4-0", route=route, token_ids=token_ids)


def test_a_request_is_logged_with_its_prompt_cut_at_max_log_len(caplog):
    tok = ByteTokenizer()
    text = "the pandas eat bamboo at dawn"
    ids = tok.encode(text)
    msg = ClientGenerate(request_id="r1", prompt=text, sampling=SamplingParams(max_tokens=4, temperature=0.5))
    with caplog.at_level(logging.INFO, logger="zoo.requests"):
        RequestLog(tok, max_log_len=10).received(msg, _placed(ids))
        RequestLog(tok).received(msg, _placed(ids))
    short, whole = (r.getMessage() for r in caplog.records)
    assert short.startswith("Received request r1: prompt: 'the pandas', params: SamplingParams(")
    assert f"prompt_token_ids: {ids[:10]}," in short and "temperature=0.5" in short
    assert "node: l4-0, traffic_class: chat." in short
    assert f"prompt: {text!r}" in whole and f"prompt_token_ids: {ids}," in whole


def test_a_chats_prompt_is_its_tokens_decoded_and_a_refusal_says_why(caplog):
    tok = ByteTokenizer()
    ids = tok.encode("user: hi\nassistant: ")
    chat = ClientGenerate(request_id="c1", messages=[ChatMessage(role="user", content="hi")])
    refusal = ErrorReply(request_id="c2", code=ErrorCode.INVALID_REQUEST, message="logit_bias: past the vocabulary")
    log = RequestLog(tok, max_log_len=6)
    with caplog.at_level(logging.INFO, logger="zoo.requests"):
        log.received(chat, _placed(ids))
        log.refused(ClientGenerate(request_id="c2", prompt="x"), refusal)
    received, refused = (r.getMessage() for r in caplog.records)
    assert "prompt: 'user: '" in received  # the first 6 tokens decoded (a byte each), cut at 6 characters
    assert refused == "Refused request c2: invalid_request: logit_bias: past the vocabulary."
    assert log.num_logged == 2
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="zoo.requests"):  # the logger not at INFO: nothing written
        log.received(chat, _placed(ids))
    assert not caplog.records and log.num_logged == 2
    with pytest.raises(ValueError, match="max_log_len"):
        RequestLog(tok, max_log_len=-1)


def test_an_output_is_logged_as_its_request_leaves_only_when_asked(caplog):
    tok = ByteTokenizer()
    ids = tok.encode("the otters")
    quiet, loud = RequestLog(tok), RequestLog(tok, max_log_len=4, log_outputs=True)
    with caplog.at_level(logging.INFO, logger="zoo.requests"):
        for log in (quiet, loud):
            log.finishing("r1", "length")
            log.done("r1", ids, "completed")
            log.done("r2", ids[:2], "cancelled")  # no last chunk came: no finish reason
    assert [r.getMessage() for r in caplog.records] == [
        f"Generated response r1: output: 'the ', output_token_ids: {ids[:4]}, finish_reason: length, "
        "outcome: completed.",
        f"Generated response r2: output: 'th', output_token_ids: {ids[:2]}, finish_reason: None, outcome: cancelled.",
    ]
    assert quiet.num_logged == 0 and not quiet._finish_reasons and not loud._finish_reasons  # nothing kept


def test_the_flags_on_a_control_plane_process(spawn_controlplane, spawn_agent):
    cp = spawn_controlplane(None, "--enable-log-requests", "--enable-log-outputs", "--max-log-len", "9")
    spawn_agent(cp.agent_endpoint, "a")
    base = f"http://{cp.http}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/health", timeout=5).status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    body = {"prompt": "the otters fish at noon", "max_tokens": 2}
    assert httpx.post(base + "/v1/completions", json=body, timeout=30).status_code == 200
    refused = httpx.post(base + "/v1/completions", json={**body, "logit_bias": {"999999": 1}}, timeout=30)
    assert refused.status_code == 400
    deadline = time.monotonic() + 10
    while "Refused request" not in cp.output() and time.monotonic() < deadline:
        time.sleep(0.1)
    out = cp.output()
    assert "Received request cmpl-" in out and "prompt: 'the otter'" in out and "node: a" in out
    assert "Refused request cmpl-" in out and "logit_bias" in out
    assert "Generated response cmpl-" in out and "finish_reason: length, outcome: completed." in out
    for bad in ("-1", "x"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["controlplane", "--max-log-len", bad])
