"""Background responses (gateway/background_responses.py) and the Responses API's output logprobs, with the official
``openai`` package against the gateway on loopback (its lifespan run), over a scripted frontend: a background
response answered queued and read back finished, continued, listed; cancelled while it runs (upstream too) and the
cancel's answers for every other state; a failure kept as failed; a streamed one and its stream resumed after a
sequence number; deleted while it runs; the running bound; a gateway whose runner is not running; logprobs."""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio
import httpx
import openai
import pytest

from controlplane.frontend import FrontendError
from controlplane.gateway import GatewayConfig, create_app
from controlplane.gateway.background_responses import BackgroundJob, BackgroundResponses
from controlplane.gateway.openai_responses import parse_responses
from controlplane.gateway.responses_reply import ResponsesReply
from transport.chat_wire import ChatMessage
from transport.messages import ErrorCode, TokenChunk

MODEL = "smol"


@pytest.fixture
def client(served: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{served}/v1", api_key="x", max_retries=0, timeout=30) as c:
        yield c


def test_a_background_response_is_answered_queued_then_read_back_finished(client, frontend, response_until):
    created = client.responses.create(model=MODEL, input="Hi?", background=True)
    assert created.status == "queued" and created.background is True and created.output == []
    done = response_until(client, created.id, "completed")
    assert done.status == "completed" and done.output_text == "Hello, world" and done.background is True
    assert done.usage.output_tokens == 3
    (item,) = client.responses.input_items.list(created.id).data
    assert item.role == "user" and item.content[0].text == "Hi?"
    client.responses.create(model=MODEL, previous_response_id=created.id, input="More?")  # it goes on as any other
    said = [ChatMessage("assistant", "Hello, world"), ChatMessage("user", "More?")]
    assert frontend.calls[-1]["messages"][-2:] == said


def test_a_running_response_is_cancelled_upstream_and_cancel_answers_every_state(
    client, frontend, served, response_until
):
    frontend.hang_after = 1
    created = client.responses.create(model=MODEL, input="Hi?", background=True)
    assert frontend.num_streaming.acquire(timeout=30)  # its generation has begun and waits
    assert client.responses.retrieve(created.id).status == "in_progress"
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):  # it has not finished
        client.responses.create(model=MODEL, previous_response_id=created.id, input="?")
    assert client.responses.cancel(created.id).status == "cancelled"
    assert frontend.cancelled.wait(timeout=30)  # the request upstream was closed
    assert response_until(client, created.id, "cancelled").status == "cancelled"
    assert client.responses.cancel(created.id).status == "cancelled"  # again: as it is
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client.responses.create(model=MODEL, previous_response_id=created.id, input="?")

    frontend.hang_after = None
    finished = client.responses.create(model=MODEL, input="Hi?", background=True)
    response_until(client, finished.id, "completed")
    with pytest.raises(openai.BadRequestError, match="completed"):
        client.responses.cancel(finished.id)
    plain = client.responses.create(model=MODEL, input="Hi?")
    with pytest.raises(openai.BadRequestError, match="background"):
        client.responses.cancel(plain.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_nope")
    assert httpx.post(f"{served}/v1/responses", json={"model": MODEL, "input": "x"}).status_code == 200


def test_a_failure_is_kept_as_failed_with_its_error(client, frontend, response_until):
    frontend.fail_after = 1
    created = client.responses.create(model=MODEL, input="Hi?", background=True)
    failed = response_until(client, created.id, "failed")
    assert failed.status == "failed" and failed.error.code == "node_failed"


def test_a_streamed_background_response_and_its_stream_resumed(client):
    events = list(client.responses.create(model=MODEL, input="Hi?", background=True, stream=True))
    assert events[0].type == "response.created" and events[0].response.status == "queued"
    assert events[1].type == "response.in_progress" and events[-1].type == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "Hello, world" == events[-1].response.output_text
    response_id = events[0].response.id
    resumed = list(client.responses.retrieve(response_id, stream=True, starting_after=3))
    assert [e.sequence_number for e in resumed] == list(range(4, len(events)))
    assert [e.type for e in resumed] == [e.type for e in events[4:]]
    everything = list(client.responses.retrieve(response_id, stream=True))
    assert [e.type for e in everything] == [e.type for e in events]
    # its events are still kept for resuming, and it has finished: a later response continues it
    assert client.responses.create(model=MODEL, previous_response_id=response_id, input="More?").status == "completed"


def test_a_resumed_stream_is_refused_clearly(client, served):
    created = client.responses.create(model=MODEL, input="Hi?", background=True)  # not streamed: no events kept
    r = httpx.get(f"{served}/v1/responses/{created.id}", params={"stream": "true"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream"
    streamed = list(client.responses.create(model=MODEL, input="Hi?", background=True, stream=True))
    response_id = streamed[0].response.id
    r = httpx.get(f"{served}/v1/responses/{response_id}", params={"stream": "true", "starting_after": "x" * 500})
    assert r.status_code == 400 and r.json()["error"]["param"] == "starting_after"
    assert len(r.json()["error"]["message"]) < 400


def test_a_running_response_deleted_is_cancelled_and_kept_nowhere(client, frontend, served):
    frontend.hang_after = 1
    created = client.responses.create(model=MODEL, input="Hi?", background=True)
    assert frontend.num_streaming.acquire(timeout=30)
    assert client.responses.delete(created.id) is None
    with pytest.raises(openai.NotFoundError):  # at once
        client.responses.retrieve(created.id)
    assert frontend.cancelled.wait(timeout=30)
    deadline = time.monotonic() + 30
    while httpx.get(f"{served}/load").json()["server_load"]:  # its task ends (the cancel reached the generation)
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(openai.NotFoundError):  # and once it ended: not stored again
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)


def test_past_the_running_bound_is_a_429(make_frontend, serve):
    frontend = make_frontend(hang_after=1)
    with serve(create_app(frontend, config=GatewayConfig(responses_background_max=1))) as url:
        body = {"model": MODEL, "input": "Hi?", "background": True}
        first = httpx.post(f"{url}/v1/responses", json=body)
        assert first.status_code == 200
        second = httpx.post(f"{url}/v1/responses", json=body)
        assert second.status_code == 429 and "Retry-After" in second.headers
        assert httpx.post(f"{url}/v1/responses/{first.json()['id']}/cancel").json()["status"] == "cancelled"


@pytest.mark.anyio
async def test_without_a_running_runner_background_is_a_503(frontend):
    transport = httpx.ASGITransport(app=create_app(frontend))  # the app's lifespan is not run
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as asgi:
        r = await asgi.post("/v1/responses", json={"model": MODEL, "input": "Hi?", "background": True})
        assert r.status_code == 503 and "not running" in r.json()["error"]["message"]
        assert (await asgi.post("/v1/responses", json={"model": MODEL, "input": "Hi?"})).status_code == 200


def _logprob_chunks() -> list[TokenChunk]:
    h, i, capital_i, bang = (ord(c) + 3 for c in "HiI!")  # the ByteTokenizer's ids: a byte's value + 3
    return [
        TokenChunk(token_ids=[h], text="H", num_prompt_tokens=5, num_output_tokens=1,
                   logprobs=[(h, -0.5, [(h, -0.5), (capital_i, -1.5)])]),
        TokenChunk(token_ids=[i], text="i", finished=True, finish_reason="stop", num_prompt_tokens=5,
                   num_output_tokens=2, logprobs=[(i, float("-inf"), [(i, float("-inf")), (bang, -2.0)])]),
    ]  # fmt: skip


def test_output_logprobs_whole_and_streamed(client, frontend):
    frontend.chunks = _logprob_chunks()
    include = ["message.output_text.logprobs"]
    reply = client.responses.create(model=MODEL, input="Hi?", include=include, top_logprobs=2)
    assert frontend.calls[-1]["sampling"].logprobs == 2 and reply.top_logprobs == 2
    logprobs = reply.output[0].content[0].logprobs
    assert [(lp.token, lp.logprob, lp.bytes) for lp in logprobs] == [("H", -0.5, [72]), ("i", -9999.0, [105])]
    assert [(t.token, t.logprob) for t in logprobs[0].top_logprobs] == [("H", -0.5), ("I", -1.5)]
    events = list(client.responses.create(model=MODEL, input="Hi?", include=include, stream=True))
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert [[lp.token for lp in e.logprobs] for e in deltas] == [["H"], ["i"]]
    assert [lp.token for lp in events[-1].response.output[0].content[0].logprobs] == ["H", "i"]
    client.responses.create(model=MODEL, input="Hi?", top_logprobs=2)  # without include: none asked (vLLM's rule)
    assert frontend.calls[-1]["sampling"].logprobs is None


@pytest.mark.anyio
async def test_a_job_cancelled_before_it_starts_never_reads_its_stream():
    stored = []
    runner = BackgroundResponses(lambda *args: stored.append(args), max_running=4)
    parsed = parse_responses(b'{"input": "x"}', default_max_tokens=4, tool_call_parser=None, previous=lambda _: None)
    read = []

    async def chunks():
        read.append(True)
        yield TokenChunk(token_ids=[1], text="x", finished=True, finish_reason="stop")

    with pytest.raises(FrontendError) as refused:
        runner.submit(BackgroundJob(None, ResponsesReply("m", parsed), chunks(), streamed=False))
    assert refused.value.code == ErrorCode.NO_NODE
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run)
        await anyio.wait_all_tasks_blocked()
        job = BackgroundJob(None, ResponsesReply("m", parsed), chunks(), streamed=False)
        runner.submit(job)
        assert runner.cancel(None, job.reply.id)["status"] == "cancelled"
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    assert read == [] and job.done and stored[0][1]["status"] == "cancelled"
    assert runner.ended["cancelled"] == 1 and runner.num_running == 0


def test_the_responses_state_on_the_control_planes_metrics(frontend, serve, response_until):
    """observe/responses_metrics.py, registered as zoo/serve.py registers it: responses stored and their bytes,
    background ones running, and those ended by status."""
    from prometheus_client import CollectorRegistry, generate_latest

    from observe.exporter import SnapshotCollector
    from observe.responses_metrics import responses_metrics

    app = create_app(frontend)
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(responses_metrics(app.state.responses.store, app.state.responses.background)))
    with serve(app) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as c:
        c.responses.create(model=MODEL, input="Hi?")
        done = c.responses.create(model=MODEL, input="Hi?", background=True)
        response_until(c, done.id, "completed")
        frontend.hang_after = 1
        running = c.responses.create(model=MODEL, input="Hi?", background=True)
        assert frontend.num_streaming.acquire(timeout=30)
        text = generate_latest(registry).decode()
        assert "zoo:responses_background_running 1.0" in text and "zoo:responses_stored 2.0" in text
        assert 'zoo:responses_background_ended_total{status="completed"} 1.0' in text
        c.responses.cancel(running.id)
        response_until(c, running.id, "cancelled")
    text = generate_latest(registry).decode()
    assert 'zoo:responses_background_ended_total{status="cancelled"} 1.0' in text
    assert "zoo:responses_background_running 0.0" in text and "zoo:responses_stored 3.0" in text
    assert "zoo:responses_stored_bytes " in text and "zoo:responses_stored_bytes 0.0" not in text


@pytest.mark.anyio
async def test_ended_streams_are_kept_within_their_bytes():
    runner = BackgroundResponses(lambda *args: None, max_running=4, max_ended_bytes=8000)
    parsed = parse_responses(b'{"input": "x"}', default_max_tokens=4, tool_call_parser=None, previous=lambda _: None)

    async def chunks():
        yield TokenChunk(token_ids=[1], text="x", finished=True, finish_reason="stop")

    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run)
        await anyio.wait_all_tasks_blocked()
        jobs = []
        for _ in range(3):
            jobs.append(BackgroundJob(None, ResponsesReply("m", parsed), chunks(), streamed=True))
            runner.submit(jobs[-1])
            await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    sizes = [job.num_event_bytes for job in jobs]
    assert all(2700 < size < 4000 for size in sizes), sizes  # a few events each: two fit in 8000, three do not
    kept = [runner.get(None, job.reply.id) is not None for job in jobs]
    assert kept == [False, True, True]  # the oldest dropped first


def test_one_owner_cannot_take_every_running_slot(make_frontend, serve):
    from controlplane.gateway.api_keys import ApiKeyConfig

    frontend = make_frontend(hang_after=1)
    config = GatewayConfig(responses_background_max=4, responses_background_max_per_owner=1)
    keys = ApiKeyConfig(frozenset({"key-a", "key-b"}))
    with serve(create_app(frontend, config=config, api_keys=keys)) as url:
        body = {"model": MODEL, "input": "Hi?", "background": True}
        a, b = ({"Authorization": f"Bearer key-{k}"} for k in "ab")
        first = httpx.post(f"{url}/v1/responses", json=body, headers=a)
        assert first.status_code == 200
        refused = httpx.post(f"{url}/v1/responses", json=body, headers=a)
        assert refused.status_code == 429 and "one owner" in refused.json()["error"]["message"]
        assert httpx.post(f"{url}/v1/responses", json=body, headers=b).status_code == 200  # another owner's slot
        assert httpx.post(f"{url}/v1/responses/{first.json()['id']}/cancel", headers=a).status_code == 200
        assert httpx.post(f"{url}/v1/responses/{first.json()['id']}/cancel", headers=b).status_code == 404  # not b's
