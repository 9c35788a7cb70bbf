"""Anthropic's Message Batches API (gateway/message_batches.py, message_batch_routes.py): the official ``anthropic``
package's ``client.messages.batches`` against the gateway on loopback, over a scripted frontend. A batch runs each
request through /v1/messages at the batch priority and ends with a result per request in the order sent (succeeded,
errored in Anthropic's shape); cancelled, its unrun requests are canceled; past its window, expired; listed as
Anthropic's pages; deleted with its files; its owner's alone, apart from OpenAI's batches; bad bodies are 400s naming
their field; and a restarted gateway (``files_dir``) resumes it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from controlplane.gateway import create_app
from controlplane.gateway.api_keys import ApiKeyConfig
from controlplane.gateway.app import GatewayConfig
from controlplane.gateway.batch_runner import BatchRunnerConfig
from transport.chat_wire import ChatMessage

MODEL = "smol"


def _request(custom_id: str, **params) -> dict:
    params = params or {"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": f"Hi {custom_id}"}]}
    return {"custom_id": custom_id, "params": params}


@pytest.fixture
def app_config():
    return GatewayConfig()


@pytest.fixture
def served_app(frontend, app_config, serve) -> Iterator[str]:
    with serve(create_app(frontend, config=app_config)) as url:
        yield url


@pytest.fixture
def client(served_app) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=served_app, api_key="x", max_retries=0, timeout=30) as c:
        yield c


def _wait(client: anthropic.Anthropic, batch_id: str, until: str = "ended"):
    """Polls the batch until its processing_status is ``until`` (a bounded wait, not a timing check)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        batch = client.messages.batches.retrieve(batch_id)
        if batch.processing_status == until:
            return batch
        time.sleep(0.02)
    raise AssertionError(f"batch {batch_id} stayed {batch.processing_status}")


def test_a_batch_runs_each_request_as_a_message_and_ends_with_its_results(client, frontend):
    bad = {"model": MODEL, "messages": [{"role": "user", "content": "no max_tokens"}]}
    made = client.messages.batches.create(requests=[_request("a"), _request("b", **bad), _request("c")])
    assert made.id.startswith("msgbatch_") and made.type == "message_batch"
    assert made.processing_status == "in_progress" and made.results_url is None
    assert made.request_counts.processing == 3 and made.expires_at > made.created_at
    done = _wait(client, made.id)
    assert done.ended_at is not None and done.results_url.endswith(f"/v1/messages/batches/{made.id}/results")
    counts = done.request_counts
    assert (counts.processing, counts.succeeded, counts.errored, counts.canceled, counts.expired) == (0, 2, 1, 0, 0)
    results = list(client.messages.batches.results(made.id))
    assert [r.custom_id for r in results] == ["a", "b", "c"]  # in the order sent
    assert [r.result.type for r in results] == ["succeeded", "errored", "succeeded"]
    message = results[0].result.message
    assert message.id.startswith("msg_") and [b.text for b in message.content] == ["Hello, world"]
    assert results[1].result.error.error.type == "invalid_request_error"
    assert "max_tokens" in results[1].result.error.error.message
    assert sorted(call["messages"][0].content for call in frontend.calls) == ["Hi a", "Hi c"]
    assert [call["priority"] for call in frontend.calls] == [1, 1]  # after live requests (BatchRunnerConfig)


def test_cancel_ends_it_and_its_unrun_requests_are_canceled(client, frontend):
    frontend.hang_after = 1
    made = client.messages.batches.create(requests=[_request("a"), _request("b")])
    assert frontend.num_streaming.acquire(timeout=30)  # a request has begun, and hangs
    cancelling = client.messages.batches.cancel(made.id)
    assert cancelling.processing_status == "canceling" and cancelling.cancel_initiated_at is not None
    done = _wait(client, made.id)
    assert done.request_counts.canceled == 2 and frontend.cancelled.wait(timeout=30)
    results = list(client.messages.batches.results(made.id))
    assert [(r.custom_id, r.result.type) for r in results] == [("a", "canceled"), ("b", "canceled")]
    with pytest.raises(anthropic.BadRequestError, match="cannot be cancelled"):
        client.messages.batches.cancel(made.id)


@pytest.mark.parametrize("app_config", [GatewayConfig(batches=BatchRunnerConfig(window_s=0.3))])
def test_requests_left_unrun_when_the_window_closes_are_expired(client, frontend, app_config):
    frontend.hang_after = 1
    made = client.messages.batches.create(requests=[_request("a"), _request("b")])
    done = _wait(client, made.id)
    assert done.request_counts.expired == 2 and done.request_counts.errored == 0
    assert [r.result.type for r in client.messages.batches.results(made.id)] == ["expired", "expired"]


def test_list_pages_delete_and_the_results_before_the_end(client, frontend, served_app):
    made = [client.messages.batches.create(requests=[_request(f"r{i}")]) for i in range(5)]
    for batch in made:
        _wait(client, batch.id)
    page = client.messages.batches.list(limit=2)
    assert [b.id for b in page.data] == [made[4].id, made[3].id] and page.has_more
    assert [b.id for b in client.messages.batches.list(limit=2)] == [b.id for b in reversed(made)]  # every page
    before = httpx.get(f"{served_app}/v1/messages/batches", params={"before_id": made[1].id, "limit": 2}).json()
    assert [b["id"] for b in before["data"]] == [made[3].id, made[2].id] and before["has_more"] is True
    files_before = len(httpx.get(f"{served_app}/v1/files").json()["data"])
    deleted = client.messages.batches.delete(made[0].id)
    assert (deleted.id, deleted.type) == (made[0].id, "message_batch_deleted")
    assert len(httpx.get(f"{served_app}/v1/files").json()["data"]) == files_before - 2  # its input and output
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(made[0].id)
    frontend.hang_after = 1
    running = client.messages.batches.create(requests=[_request("x")])
    assert frontend.num_streaming.acquire(timeout=30)
    early = httpx.get(f"{served_app}/v1/messages/batches/{running.id}/results")
    assert early.status_code == 400 and early.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError, match="cannot be deleted"):
        client.messages.batches.delete(running.id)
    with pytest.raises(anthropic.AnthropicError, match="results_url"):  # the SDK's own check
        client.messages.batches.results(running.id)
    client.messages.batches.cancel(running.id)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"requests": []}, "requests"),
        ({"requests": [_request("a b")]}, "requests.0.custom_id"),
        ({"requests": [_request("a"), _request("a")]}, "requests.1.custom_id"),
        ({"requests": [{"custom_id": "a", "params": [1]}]}, "requests.0.params"),
        ({"requests": [{"custom_id": "a"}]}, None),
        ({"requests": [_request("a")], "extra": 1}, None),
        ({"requests": "a"}, None),
    ],
)
def test_bad_create_bodies_are_400s_in_anthropics_shape(served_app, body, param):
    r = httpx.post(f"{served_app}/v1/messages/batches", json=body, timeout=30)
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"
    if param is not None:
        assert param in r.json()["error"]["message"]


def test_a_batch_past_the_request_bound_or_the_file_store_is_refused(frontend, serve):
    config = GatewayConfig(batches=BatchRunnerConfig(max_requests=2), files_max=0)
    with serve(create_app(frontend, config=config)) as url:
        many = httpx.post(f"{url}/v1/messages/batches", json={"requests": [_request(f"r{i}") for i in range(3)]})
        assert many.status_code == 400 and "at most 2" in many.json()["error"]["message"]
        full = httpx.post(f"{url}/v1/messages/batches", json={"requests": [_request("a")]})
        assert full.status_code == 413 and full.json()["error"]["type"] == "request_too_large"


def test_batches_are_their_owners_and_apart_from_openais(frontend, serve):
    keys = ApiKeyConfig(frozenset({"key-a", "key-b"}))
    with (
        serve(create_app(frontend, api_keys=keys)) as url,
        anthropic.Anthropic(base_url=url, api_key="key-a", max_retries=0) as a,
        anthropic.Anthropic(base_url=url, api_key="key-b", max_retries=0) as b,
        openai.OpenAI(base_url=f"{url}/v1", api_key="key-a", max_retries=0) as a_openai,
    ):
        made = a.messages.batches.create(requests=[_request("a")])
        _wait(a, made.id)
        with pytest.raises(anthropic.NotFoundError):
            b.messages.batches.retrieve(made.id)
        assert list(b.messages.batches.list()) == []
        with pytest.raises(openai.NotFoundError):  # an OpenAI batch's id is not a message batch's, and back
            a_openai.batches.retrieve("batch_" + made.id.removeprefix("msgbatch_"))
        assert list(a_openai.batches.list()) == []
        with pytest.raises(anthropic.NotFoundError):
            a.messages.batches.retrieve("batch_nope")


def test_a_batch_resumes_after_a_restart(make_frontend, first_only, serve, tmp_path):
    """A gateway with ``files_dir`` answers a batch's first request and stops while the second hangs; the next one
    on the same directory runs only the request it lacks, and the results hold both."""
    config = GatewayConfig(files_dir=str(tmp_path), batches=BatchRunnerConfig(concurrency=1))
    with serve(create_app(first_only(), config=config)) as url, anthropic.Anthropic(base_url=url, api_key="x") as c:
        made = c.messages.batches.create(requests=[_request("a"), _request("b")])
        deadline = time.monotonic() + 30
        while not any(path.read_bytes() for path in (tmp_path / "batches").glob("*.results")):  # "a" answered
            assert time.monotonic() < deadline, "the first request was never answered"
            time.sleep(0.02)
    second = make_frontend()
    with serve(create_app(second, config=config)) as url, anthropic.Anthropic(base_url=url, api_key="x") as c:
        done = _wait(c, made.id)
        assert done.request_counts.succeeded == 2
        assert [(r.custom_id, r.result.type) for r in c.messages.batches.results(made.id)] == [
            ("a", "succeeded"),
            ("b", "succeeded"),
        ]
        assert [call["messages"] for call in second.calls] == [[ChatMessage("user", "Hi b")]]


@pytest.mark.anyio
async def test_a_batch_the_runner_refuses_leaves_no_input_file(frontend):
    app = create_app(frontend)  # its lifespan not run: the runner refuses every batch (503)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        r = await c.post("/v1/messages/batches", json={"requests": [_request("a")]})
    assert r.status_code == 503 and r.json()["type"] == "error"
    assert len(app.state.batch_routes.files) == 0  # the input file it wrote first is gone again


def test_results_are_archived_29_days_after_creation_and_never_made_up_without_their_files(frontend, serve):
    """Anthropic keeps a batch's results 29 days: its files expire then (the input's expiry is RESULTS_KEPT_S), and
    from then ``archived_at`` says when, ``results_url`` is null and the results are a 404. A batch whose output file
    is gone sooner gets the same 404, not every request "canceled"."""
    from controlplane.gateway.message_batches import RESULTS_KEPT_S, batch_id

    app = create_app(frontend)
    with serve(app) as url, anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=30) as c:
        kept, lost = (c.messages.batches.create(requests=[_request(name)]) for name in ("kept", "lost"))
        for made in (kept, lost):
            _wait(c, made.id)
        done = c.messages.batches.retrieve(kept.id)
        assert done.archived_at is None and done.results_url is not None
        runner, files = app.state.batches, app.state.batch_routes.files
        batch = runner.get(None, batch_id(kept.id))
        assert files.get(None, batch.input_file_id)["expires_at"] == batch.created_at + RESULTS_KEPT_S
        assert files.get(None, batch.output_file_id)["expires_at"] >= batch.created_at + RESULTS_KEPT_S
        batch.created_at -= RESULTS_KEPT_S  # 29 days on
        archived = c.messages.batches.retrieve(kept.id)
        assert archived.archived_at is not None and archived.results_url is None
        assert int(archived.archived_at.timestamp()) == batch.created_at + RESULTS_KEPT_S
        gone = httpx.get(f"{url}/v1/messages/batches/{kept.id}/results")
        assert gone.status_code == 404 and "archived" in gone.json()["error"]["message"]
        other = runner.get(None, batch_id(lost.id))
        files.delete(None, other.output_file_id)  # its answers gone (deleted, or a store that lost them)
        missing = httpx.get(f"{url}/v1/messages/batches/{lost.id}/results")
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
