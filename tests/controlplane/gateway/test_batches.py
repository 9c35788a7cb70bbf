"""OpenAI's Files and Batch APIs (gateway/batch_routes.py, batch_runner.py, batches.py, file_store.py): the official
``openai`` package against the gateway on loopback, over a scripted frontend. A batch runs each line through its
route and ends with output and error files; a bad file fails it with numbered errors; an overloaded fleet delays a
line instead of failing it; cancel and the window keep what finished; owners are kept apart."""

from __future__ import annotations

import argparse
import socket
import threading
import time

import httpx
import msgspec
import openai
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from controlplane.frontend import FrontendError
from controlplane.gateway import create_app
from controlplane.gateway.api_keys import ApiKeyConfig
from controlplane.gateway.app import GatewayConfig
from controlplane.gateway.batch_journal import BatchJournal
from controlplane.gateway.batch_runner import BatchRunnerConfig
from controlplane.gateway.batches import Batch, output_line, read_lines
from observe.batch_metrics import batch_metrics
from observe.exporter import SnapshotCollector
from transport.messages import ErrorCode
from zoo.serve import add_controlplane_args, gateway_config_from_args

MODEL = "smol"
CHAT = "/v1/chat/completions"


def _line(custom_id: str, url: str = CHAT, method: str = "POST", **body) -> dict:
    body = body or {"model": MODEL, "messages": [{"role": "user", "content": f"Hi {custom_id}"}], "max_tokens": 5}
    return {"custom_id": custom_id, "method": method, "url": url, "body": body}


def _jsonl(*lines) -> bytes:
    return b"".join((line if isinstance(line, bytes) else msgspec.json.encode(line)) + b"\n" for line in lines)


def _wait(client: openai.OpenAI, batch_id: str, *, until=("completed", "failed", "cancelled", "expired")):
    """Polls the batch until its status is one of ``until`` (a bounded wait, not a timing check)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in until:
            return batch
        time.sleep(0.02)
    raise AssertionError(f"batch {batch_id} stayed {batch.status}")


def _lines(client: openai.OpenAI, file_id: str) -> list[dict]:
    return [msgspec.json.decode(line) for line in client.files.content(file_id).text.splitlines()]


@pytest.fixture
def app_config():
    return GatewayConfig()


@pytest.fixture
def client(frontend, app_config, serve):
    with (
        serve(create_app(frontend, config=app_config)) as url,
        openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30) as c,
    ):
        yield c


def _run(client: openai.OpenAI, content: bytes, endpoint: str = CHAT, **more):
    upload = client.files.create(file=("in.jsonl", content), purpose="batch")
    batch = client.batches.create(input_file_id=upload.id, endpoint=endpoint, completion_window="24h", **more)
    return upload, batch


def test_a_batch_runs_every_line_through_its_route_and_ends_with_an_output_file(client, frontend):
    upload, batch = _run(client, _jsonl(*(_line(f"q{i}") for i in range(3))), metadata={"job": "nightly"})
    assert upload.purpose == "batch" and upload.filename == "in.jsonl" and upload.bytes > 0
    assert batch.status == "validating" and batch.input_file_id == upload.id and batch.metadata == {"job": "nightly"}
    assert batch.expires_at - batch.created_at == 24 * 3600
    done = _wait(client, batch.id)
    assert done.status == "completed" and done.error_file_id is None and done.errors is None and done.model == MODEL
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (3, 3, 0)
    assert done.in_progress_at and done.finalizing_at and done.completed_at
    assert (done.usage.input_tokens, done.usage.output_tokens, done.usage.total_tokens) == (15, 9, 24)
    lines = _lines(client, done.output_file_id)
    assert [line["custom_id"] for line in lines] == ["q0", "q1", "q2"]  # in the input's order
    for line in lines:
        assert line["id"].startswith("batch_req_") and line["error"] is None
        response = line["response"]
        assert response["status_code"] == 200 and response["request_id"].startswith("chatcmpl-")
        assert response["body"]["choices"][0]["message"]["content"] == "Hello, world"
    prompts = sorted(call["messages"][0].content for call in frontend.calls)
    assert prompts == ["Hi q0", "Hi q1", "Hi q2"]
    output = client.files.retrieve(done.output_file_id)
    assert output.purpose == "batch_output" and output.filename == f"{batch.id}_output.jsonl"
    assert {f.id for f in client.files.list()} == {upload.id, done.output_file_id}
    assert [b.id for b in client.batches.list()] == [batch.id]


def test_other_endpoints_and_a_line_per_outcome(client, frontend):
    completion = {"model": MODEL, "prompt": "Once", "max_tokens": 3}
    _, batch = _run(client, _jsonl(_line("a", "/v1/completions", **completion)), endpoint="/v1/completions")
    done = _wait(client, batch.id)
    (line,) = _lines(client, done.output_file_id)
    assert line["response"]["body"]["choices"][0]["text"] == "Hello, world"
    response = {"model": MODEL, "input": "Hi?"}
    _, batch = _run(client, _jsonl(_line("r", "/v1/responses", **response)), endpoint="/v1/responses")
    (line,) = _lines(client, _wait(client, batch.id).output_file_id)
    assert line["response"]["body"]["output"][0]["content"][0]["text"] == "Hello, world"
    # one line per outcome: answered, refused by the route (unknown model), a stream asked for
    content = _jsonl(
        _line("ok"),
        _line("nomodel", model="nope", messages=[{"role": "user", "content": "x"}]),
        _line("stream", model=MODEL, messages=[{"role": "user", "content": "x"}], stream=True),
    )
    _, batch = _run(client, content)
    done = _wait(client, batch.id)
    assert done.status == "completed"
    assert (done.request_counts.completed, done.request_counts.failed) == (1, 2)
    assert done.model is None  # the requests name two models
    assert [line["custom_id"] for line in _lines(client, done.output_file_id)] == ["ok"]
    errors = {line["custom_id"]: line["response"] for line in _lines(client, done.error_file_id)}
    assert errors["nomodel"]["status_code"] == 404 and errors["nomodel"]["body"]["error"]["code"] == "model_not_found"
    assert errors["stream"]["status_code"] == 400 and errors["stream"]["body"]["error"]["param"] == "stream"


def test_a_bad_input_file_fails_the_batch_with_each_line_numbered(client, frontend):
    content = _jsonl(
        _line("a"),
        b"{not json",
        _line("a"),
        _line("b", url="/v1/completions"),
        _line("c", method="GET"),
        {"custom_id": "d", "method": "POST", "url": CHAT},
        {"custom_id": "e", "method": "POST", "url": CHAT, "body": [1]},
    )
    _, batch = _run(client, content)
    done = _wait(client, batch.id)
    assert done.status == "failed" and done.failed_at and done.output_file_id is None
    found = [(e.line, e.code, e.param) for e in done.errors.data]
    assert found == [
        (2, "invalid_json_line", None),
        (3, "duplicate_custom_id", "custom_id"),
        (4, "mismatched_endpoint", "url"),
        (5, "invalid_request", "method"),
        (6, "invalid_request", "body"),
        (7, "invalid_request", "body"),
    ]
    assert frontend.calls == []  # nothing of a failed batch runs
    _, empty = _run(client, b"\n  \n")
    assert [e.code for e in _wait(client, empty.id).errors.data] == ["empty_file"]


def test_read_lines_caps_its_error_list_and_the_request_count():
    lines, errors = read_lines(b"x\n" * 150, CHAT, 10)
    assert (
        lines == []
        and len(errors) == 101
        and errors[-1]
        == {
            "code": "more_errors",
            "message": "50 more lines are bad",
            "param": None,
            "line": None,
        }
    )
    lines, errors = read_lines(_jsonl(*(_line(f"q{i}") for i in range(3))), CHAT, 2)
    assert [e["code"] for e in errors] == ["too_many_requests"]


@pytest.mark.parametrize("status_code", [ErrorCode.OVERLOADED, ErrorCode.NO_NODE, ErrorCode.NODE_FAILED])
def test_an_overloaded_or_restarting_fleet_delays_a_line_and_loses_nothing(make_frontend, serve, status_code):
    class Flaky(make_frontend):
        refusals = 3

        def generate(self, request_id, **kwargs):
            if self.refusals:
                self.refusals -= 1
                self.calls.append({"refused": True})
                return self._refuse()
            return super().generate(request_id, **kwargs)

        async def _refuse(self):
            raise FrontendError(status_code, "busy", retry_after_s=0.01)
            yield  # an async generator, as generate's

    frontend = Flaky()
    config = GatewayConfig(batches=BatchRunnerConfig(max_retries=3, backoff_s=0.01))
    with serve(create_app(frontend, config=config)) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="x") as c:
        _, batch = _run(c, _jsonl(_line("q")))
        done = _wait(c, batch.id)
        assert (done.request_counts.completed, done.request_counts.failed) == (1, 0)
        assert len(frontend.calls) == 4  # refused three times, answered the fourth
        frontend.refusals = 5  # more refusals than retries: the last refusal is the line's answer
        _, batch = _run(c, _jsonl(_line("q")))
        done = _wait(c, batch.id)
        (line,) = _lines(c, done.error_file_id)
        assert line["response"]["status_code"] in (429, 502, 503) and done.request_counts.failed == 1


def test_cancel_cancels_the_requests_in_flight_and_keeps_what_finished(client, frontend):
    frontend.hang_after = 1
    _, batch = _run(client, _jsonl(_line("a"), _line("b")))
    assert frontend.num_streaming.acquire(timeout=30)
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at
    done = _wait(client, batch.id)
    assert done.status == "cancelled" and done.cancelled_at and frontend.cancelled.is_set()
    assert done.output_file_id is None and done.error_file_id is None
    with pytest.raises(openai.BadRequestError, match="cannot be cancelled"):
        client.batches.cancel(batch.id)


@pytest.mark.parametrize("app_config", [GatewayConfig(batches=BatchRunnerConfig(window_s=0.3))])
def test_a_line_left_unrun_when_the_window_closes_gets_batch_expired(client, frontend, app_config):
    frontend.hang_after = 1
    _, batch = _run(client, _jsonl(_line("a"), _line("b")))
    done = _wait(client, batch.id)
    assert done.status == "expired" and done.expired_at and done.request_counts.failed == 2
    lines = _lines(client, done.error_file_id)
    assert [(line["custom_id"], line["response"], line["error"]["code"]) for line in lines] == [
        ("a", None, "batch_expired"),
        ("b", None, "batch_expired"),
    ]


@pytest.mark.parametrize("app_config", [GatewayConfig(batches=BatchRunnerConfig(traffic_class="batch"))])
def test_a_batch_runs_in_the_configured_traffic_class(client, frontend, app_config):
    _wait(client, _run(client, _jsonl(_line("a")))[1].id)
    assert [call["traffic_class"] for call in frontend.calls] == ["batch"]


def test_batch_lines_run_after_live_requests_unless_they_name_a_priority(client, frontend):
    own = {"model": MODEL, "messages": [{"role": "user", "content": "urgent"}], "max_tokens": 5, "priority": -3}
    tier = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "fast"}],
        "max_tokens": 5,
        "service_tier": "priority",
    }
    _wait(client, _run(client, _jsonl(_line("a"), _line("b", **own), _line("c", **tier)))[1].id)
    # vLLM's priority, lower earlier: 1 (BatchRunnerConfig.priority) after the live requests' 0; a line's own kept,
    # and a line's service tier ("priority": -1)
    assert sorted(call["priority"] for call in frontend.calls) == [-3, -1, 1]


def test_a_batchs_requests_join_the_trace_of_the_request_that_created_it(client, frontend):
    traceparent = f"00-{0xABC:032x}-{0x123:016x}-01"
    batch = _run(client, _jsonl(_line("a"), _line("b")), extra_headers={"traceparent": traceparent})[1]
    _wait(client, batch.id)
    assert [call["trace_headers"] for call in frontend.calls] == [{"traceparent": traceparent}] * 2
    _wait(client, _run(client, _jsonl(_line("c")))[1].id)  # created without one: its requests carry none
    assert frontend.calls[-1]["trace_headers"] is None


def test_files_and_batches_are_their_owners(frontend, serve):
    keys = ApiKeyConfig(frozenset({"key-a", "key-b"}))
    with serve(create_app(frontend, api_keys=keys)) as url:
        a = openai.OpenAI(base_url=f"{url}/v1", api_key="key-a", max_retries=0)
        b = openai.OpenAI(base_url=f"{url}/v1", api_key="key-b", max_retries=0)
        upload, batch = _run(a, _jsonl(_line("q")))
        done = _wait(a, batch.id)
        for call in (
            lambda: b.files.retrieve(upload.id),
            lambda: b.files.content(done.output_file_id),
            lambda: b.files.delete(upload.id),
            lambda: b.batches.retrieve(batch.id),
            lambda: b.batches.cancel(batch.id),
        ):
            with pytest.raises(openai.NotFoundError):
                call()
        with pytest.raises(openai.BadRequestError) as refused:
            b.batches.create(input_file_id=upload.id, endpoint=CHAT, completion_window="24h")
        assert refused.value.body["param"] == "input_file_id"
        assert list(b.files.list()) == [] and list(b.batches.list()) == []
        assert a.files.delete(upload.id).deleted and list(a.files.list(purpose="batch")) == []


def test_lists_page_with_the_sdk(client):
    ids = [client.files.create(file=(f"f{i}.jsonl", b"{}\n"), purpose="user_data").id for i in range(5)]
    assert [f.id for f in client.files.list(limit=2)] == ids[::-1]  # the SDK follows the pages
    page = client.files.list(limit=2, order="asc")
    assert [f.id for f in page.data] == ids[:2] and page.has_more


@pytest.mark.parametrize(
    "app_config", [GatewayConfig(files_upload_max_bytes=1000, files_max=3, files_store_bytes=2000)]
)
def test_uploads_refused_by_name(client, app_config):
    with pytest.raises(openai.BadRequestError) as refused:
        client.files.create(file=("x.jsonl", b"{}"), purpose="fine-tune")
    assert refused.value.body["param"] == "purpose"
    with pytest.raises(openai.APIStatusError) as refused:
        client.files.create(file=("x.jsonl", b"x" * 2000), purpose="batch")
    assert refused.value.status_code == 413
    for i in range(3):
        client.files.create(file=(f"{i}.jsonl", b"x" * 500), purpose="batch")
    with pytest.raises(openai.APIStatusError) as refused:  # a fourth file: the store is full
        client.files.create(file=("3.jsonl", b"x"), purpose="batch")
    assert refused.value.status_code == 413 and "delete files" in refused.value.message
    url = str(client.base_url)
    not_multipart = httpx.post(f"{url}files", json={"purpose": "batch"})
    assert not_multipart.status_code == 400 and not_multipart.json()["error"]["param"] == "file"
    extra = httpx.post(f"{url}files", files={"file": ("a", b"x")}, data={"purpose": "batch", "expires_after": "1"})
    assert extra.status_code == 400 and extra.json()["error"]["param"] == "expires_after"
    no_file = httpx.post(f"{url}files", files={"purpose": (None, "batch")})
    assert no_file.status_code == 400 and no_file.json()["error"]["param"] == "file"


def test_batch_creation_refused_by_name(client):
    upload = client.files.create(file=("in.jsonl", _jsonl(_line("q"))), purpose="batch")
    other = client.files.create(file=("data.jsonl", _jsonl(_line("q"))), purpose="user_data")
    url = str(client.base_url)
    for body, param in (
        ({"input_file_id": "file-nope", "endpoint": CHAT, "completion_window": "24h"}, "input_file_id"),
        ({"input_file_id": other.id, "endpoint": CHAT, "completion_window": "24h"}, "input_file_id"),
        ({"input_file_id": upload.id, "endpoint": "/v1/messages", "completion_window": "24h"}, "endpoint"),
        ({"input_file_id": upload.id, "endpoint": CHAT, "completion_window": "1h"}, "completion_window"),
        ({"input_file_id": upload.id, "endpoint": CHAT, "completion_window": "24h", "extra": 1}, "extra"),
        ({"input_file_id": upload.id, "endpoint": CHAT}, "completion_window"),
        (
            {
                "input_file_id": upload.id,
                "endpoint": CHAT,
                "completion_window": "24h",
                "metadata": {str(i): "v" for i in range(17)},
            },
            "metadata",
        ),
    ):
        reply = httpx.post(f"{url}batches", json=body)
        assert reply.status_code == 400 and reply.json()["error"]["param"] == param, body
    for path in ("files/file-nope", "files/file-nope/content", "batches/batch_nope"):
        reply = httpx.get(f"{url}{path}")
        assert reply.status_code == 404 and reply.json()["error"]["code"] == "not_found"
    assert httpx.get(f"{url}batches", params={"limit": 101}).json()["error"]["param"] == "limit"
    assert httpx.get(f"{url}files", params={"after": "file-nope"}).json()["error"]["param"] == "after"


@pytest.mark.anyio
async def test_without_its_lifespan_the_app_refuses_batches(frontend):
    """Served with its lifespan off (nothing would ever run a batch), creation is a 503, not a batch left waiting."""
    app = create_app(frontend)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as http:
        upload = await http.post(
            "/v1/files", files={"file": ("a.jsonl", _jsonl(_line("q")))}, data={"purpose": "batch"}
        )
        body = {"input_file_id": upload.json()["id"], "endpoint": CHAT, "completion_window": "24h"}
        reply = await http.post("/v1/batches", json=body)
    assert reply.status_code == 503 and "lifespan" in reply.json()["error"]["message"]


def test_a_batch_object_is_the_sdks():
    batch = Batch("batch_1", None, CHAT, "file-1", "24h", 10, 20, None)
    batch.set_status("in_progress")
    parsed = openai.types.Batch.model_validate(batch.object())
    assert parsed.status == "in_progress" and parsed.request_counts.total == 0 and parsed.usage.total_tokens == 0


def test_zoo_controlplane_flags_set_how_batches_run():
    parser = argparse.ArgumentParser()
    add_controlplane_args(parser)
    flags = ["--batch-class", "batch", "--batch-concurrency", "4", "--files-dir", "/var/lib/zoo"]
    config = gateway_config_from_args(parser.parse_args(flags))
    assert (config.batches.traffic_class, config.batches.concurrency, config.files_dir) == ("batch", 4, "/var/lib/zoo")
    assert gateway_config_from_args(parser.parse_args([])).batches == BatchRunnerConfig()
    with pytest.raises(SystemExit, match="--batch-concurrency"):
        gateway_config_from_args(parser.parse_args(["--batch-concurrency", "0"]))


def test_zoo_controlplane_flags_bound_the_response_conversation_and_chat_completion_stores():
    parser = argparse.ArgumentParser()
    add_controlplane_args(parser)
    flags = ["--responses-store", "10,2", "--conversations-store", "0,0", "--store-owner-share", "0.5"]
    config = gateway_config_from_args(parser.parse_args([*flags, "--chat-completions-store", "7,0.5"]))
    assert (config.responses_store_max, config.responses_store_bytes) == (10, 2 * 1024 * 1024)
    assert (config.conversations_max, config.conversations_bytes) == (0, 0)
    assert (config.chat_completions_store_max, config.chat_completions_store_bytes) == (7, 512 * 1024)
    assert config.responses_owner_share == config.conversations_owner_share == 0.5
    assert config.chat_completions_owner_share == 0.5
    default = gateway_config_from_args(parser.parse_args([]))
    assert (default.responses_store_max, default.responses_owner_share) == (1024, 0.25)
    bads = (["--responses-store", "10"], ["--conversations-store=-1,5"], ["--responses-store", "1,inf"],
            ["--chat-completions-store", "x,1"])  # fmt: skip
    for bad in bads:
        with pytest.raises(SystemExit, match=bad[0].split("=")[0]):
            gateway_config_from_args(parser.parse_args(bad))
    for share in ("0", "1.5", "nan"):
        with pytest.raises(SystemExit, match="--store-owner-share"):
            gateway_config_from_args(parser.parse_args(["--store-owner-share", share]))


def test_files_and_a_batch_survive_a_restart_and_the_batch_resumes(make_frontend, first_only, serve, tmp_path):
    """A gateway with ``files_dir`` answers a batch's first request, then stops (the second hangs until then); the
    next gateway on the same directory has the files and the batch, runs only the requests it lacks, and ends with
    every answer in the input's order."""
    config = GatewayConfig(files_dir=str(tmp_path), batches=BatchRunnerConfig(concurrency=1))
    with serve(create_app(first_only(), config=config)) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="x") as c:
        upload, batch = _run(c, _jsonl(_line("q0"), _line("q1"), _line("q2")))
        running = _wait(c, batch.id, until=("in_progress",))
        deadline = time.monotonic() + 30
        while running.request_counts.completed < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
            running = c.batches.retrieve(batch.id)
        assert running.request_counts.completed == 1 and running.status == "in_progress"
    second = make_frontend()
    with serve(create_app(second, config=config)) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="x") as c:
        assert c.files.retrieve(upload.id).filename == "in.jsonl"  # the input, uploaded before the restart
        done = _wait(c, batch.id)
        assert done.status == "completed" and done.request_counts.completed == 3 and done.usage.total_tokens == 24
        assert [line["custom_id"] for line in _lines(c, done.output_file_id)] == ["q0", "q1", "q2"]
        assert sorted(call["messages"][0].content for call in second.calls) == ["Hi q1", "Hi q2"]  # q0: not again
    with (
        serve(create_app(make_frontend(), config=config)) as url,
        openai.OpenAI(base_url=f"{url}/v1", api_key="x") as c,
    ):
        again = c.batches.retrieve(batch.id)  # a finished batch is read back as it ended
        assert again.status == "completed" and again.output_file_id == done.output_file_id
        assert [line["custom_id"] for line in _lines(c, again.output_file_id)] == ["q0", "q1", "q2"]
    assert not list((tmp_path / "batches").glob("*.results"))  # its results are in its files now


def test_the_journal_skips_a_torn_line_and_recounts(tmp_path):
    journal = BatchJournal(tmp_path)
    batch = Batch("batch_" + "a" * 32, None, CHAT, "file-1", "24h", 10, 20, None)
    batch.set_status("in_progress")
    journal.save(batch)
    body = {"usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}
    journal.record(batch.id, True, output_line("q0", 200, "r0", body, None))
    journal.record(batch.id, False, output_line("q1", 404, "r1", {"error": {}}, None))
    with open(tmp_path / "batches" / f"{batch.id}.results", "ab") as f:
        f.write(b'1{"id": "batch_req_x", "custom_id": "q2", "resp')  # a crash while writing it
    (loaded, done), *_ = journal.load()
    assert sorted(done) == ["q0", "q1"] and done["q0"][0] and not done["q1"][0]
    assert (loaded.completed, loaded.failed, loaded.usage["total_tokens"]) == (1, 1, 8)
    journal.drop(batch.id)
    assert journal.load() == []


def test_a_line_nested_too_deeply_fails_the_file_and_an_oversized_one_is_its_413(client, app_config):
    nested = b'{"model": "smol", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    line = b'{"custom_id": "nested", "method": "POST", "url": "/v1/chat/completions", "body": ' + nested + b"}\n"
    _, batch = _run(client, line + _jsonl(_line("ok")))
    failed = _wait(client, batch.id)
    assert failed.status == "failed" and [(e.line, e.code) for e in failed.errors.data] == [(1, "invalid_json_line")]
    assert "nested too deeply" in failed.errors.data[0].message
    big = {"model": MODEL, "messages": [{"role": "user", "content": "x" * (app_config.max_body_bytes + 1)}]}
    _, batch = _run(client, _jsonl(_line("big", **big), _line("ok")))
    done = _wait(client, batch.id)
    errors = {line["custom_id"]: line["response"]["status_code"] for line in _lines(client, done.error_file_id)}
    assert errors == {"big": 413} and done.request_counts.completed == 1


def test_batches_and_files_on_the_control_planes_metrics(frontend, serve):
    """observe/batch_metrics.py, registered on an exporter as zoo/serve.py registers it: batches by status, the
    requests answered by outcome, the requests still waiting, the files and their bytes."""
    app = create_app(frontend)
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(batch_metrics(app.state.batches)))
    with serve(app) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="x") as c:
        _, batch = _run(c, _jsonl(_line("a"), _line("b", model="nope", messages=[{"role": "user", "content": "x"}])))
        done = _wait(c, batch.id)
        sizes = [f.bytes for f in c.files.list()]
    text = generate_latest(registry).decode()
    assert 'zoo:batches{status="completed"} 1.0' in text and 'zoo:batches{status="in_progress"} 0.0' in text
    assert 'zoo:batch_requests_total{outcome="completed"} 1.0' in text
    assert 'zoo:batch_requests_total{outcome="failed"} 1.0' in text
    assert "zoo:batch_requests_waiting 0.0" in text
    assert f"zoo:files {len(sizes)}.0" in text and len(sizes) == 3 and done.error_file_id
    assert f"zoo:files_bytes {float(sum(sizes))}" in text


def test_one_owner_cannot_take_every_running_batch(frontend, serve):
    frontend.hang_after = 0  # every batch's requests wait: its batch stays running
    keys = ApiKeyConfig(frozenset({"key-a", "key-b"}))
    config = GatewayConfig(batches=BatchRunnerConfig(max_active_per_owner=1))
    with serve(create_app(frontend, config=config, api_keys=keys)) as url:
        a = openai.OpenAI(base_url=f"{url}/v1", api_key="key-a", max_retries=0)
        b = openai.OpenAI(base_url=f"{url}/v1", api_key="key-b", max_retries=0)
        _run(a, _jsonl(_line("q")))
        with pytest.raises(openai.RateLimitError, match="the most one owner may run"):
            _run(a, _jsonl(_line("q")))
        _, other = _run(b, _jsonl(_line("q")))  # another owner still may
        assert other.status == "validating"
        for client in (a, b):
            for batch in client.batches.list():
                client.batches.cancel(batch.id)


def test_uploads_past_the_concurrency_wait_for_one_to_finish(frontend, serve):
    """A slow upload holds the only upload slot: a second waits (it does not fail) until the first is read."""
    app = create_app(frontend, config=GatewayConfig(files_upload_concurrency=1))
    with serve(app) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as client:
        _two_uploads(client, app.state.batch_routes.uploads)


def _two_uploads(client: openai.OpenAI, slots) -> None:
    host, port = client.base_url.host, client.base_url.port
    body = (
        b'--zz\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--zz\r\n'
        b'Content-Disposition: form-data; name="file"; filename="a.jsonl"\r\n\r\n{}\r\n--zz--\r\n'
    )
    head = (
        f"POST /v1/files HTTP/1.1\r\nHost: {host}\r\nContent-Type: multipart/form-data; boundary=zz\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    second_done = threading.Event()
    with socket.create_connection((host, port)) as slow:
        slow.sendall(head + body[:10])  # the first upload: its body not all sent
        deadline = time.monotonic() + 30  # a bounded wait until it holds the slot
        while slots.borrowed_tokens < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert slots.borrowed_tokens == 1

        def second() -> None:
            client.files.create(file=("b.jsonl", b"{}"), purpose="batch")
            second_done.set()

        thread = threading.Thread(target=second, daemon=True)
        thread.start()
        assert not second_done.wait(0.5)  # waiting for the slot (without it, done in milliseconds)
        slow.sendall(body[10:])
        reply = slow.recv(4096)
        assert reply.startswith(b"HTTP/1.1 200")
    assert second_done.wait(30)
    assert sorted(f.filename for f in client.files.list()) == ["a.jsonl", "b.jsonl"]


def test_zoo_batch_runs_a_file_and_writes_the_answers(frontend, serve, tmp_path, capsys):
    """``zoo batch IN -o OUT`` against a gateway: the answers in input order, the failed ones beside them, exit 0;
    a file that fails validation: exit 1 with its errors; a batch the gateway refuses: exit 2."""
    from zoo.cli import main

    requests = tmp_path / "in.jsonl"
    requests.write_bytes(_jsonl(_line("q0"), _line("bad", model="nope", messages=[{"role": "user", "content": "x"}])))
    out = tmp_path / "out.jsonl"
    app = create_app(frontend)
    with serve(app) as url:
        assert main(["batch", str(requests), "-o", str(out), "--url", url, "--poll-s", "0.02"]) == 0
        answers = [msgspec.json.decode(line) for line in out.read_bytes().splitlines()]
        assert [a["custom_id"] for a in answers] == ["q0"] and answers[0]["response"]["status_code"] == 200
        (failed,) = [msgspec.json.decode(line) for line in (tmp_path / "out.errors.jsonl").read_bytes().splitlines()]
        assert failed["custom_id"] == "bad" and failed["response"]["status_code"] == 404
        assert "completed: 1 answered, 1 failed of 2" in capsys.readouterr().err
        requests.write_bytes(_jsonl(_line("a"), _line("a")))
        assert main(["batch", str(requests), "-o", str(out), "--url", url, "--poll-s", "0.02"]) == 1
        assert "line 2: duplicate_custom_id" in capsys.readouterr().err
        assert main(["batch", str(requests), "-o", str(out), "--url", url, "--endpoint", "/v1/messages"]) == 2
        assert "the batch was refused (400)" in capsys.readouterr().err
        requests.write_bytes(_jsonl(*(_line(f"p{i}") for i in range(6))))  # past the part size: /v1/uploads
        parted = ["batch", str(requests), "-o", str(out), "--url", url, "--poll-s", "0.02", "--part-mib", "0.0001"]
        assert main(parted) == 0 and len(out.read_bytes().splitlines()) == 6
        (upload,) = app.state.uploads._ended.values()  # the file went in parts, and the upload completed
        assert upload.object["status"] == "completed" and upload.object["bytes"] == len(requests.read_bytes())
        assert "completed: 6 answered, 0 failed of 6" in capsys.readouterr().err
