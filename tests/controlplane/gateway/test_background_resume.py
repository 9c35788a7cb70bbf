"""Background responses a stopped gateway left running are run again when it restarts with the same ``--files-dir``
(gateway/background_journal.py, responses_routes.py ``run_background``): under the same id and creation time, with
the header class they came with, queued while no node serves yet; one that ends leaves no record; a record that
outlived MAX_ATTEMPTS gateways, or whose request no longer reads, is kept as failed saying why; unreadable records
are dropped. The official ``openai`` package against the gateway on loopback, its lifespan run."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import anyio
import msgspec
import openai
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from controlplane.gateway import GatewayConfig, create_app
from controlplane.gateway.background_journal import MAX_ATTEMPTS, BackgroundJournal, BackgroundRecord, record_name
from observe.exporter import SnapshotCollector
from observe.responses_metrics import responses_metrics

MODEL = "smol"


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=30)


def _records(tmp_path) -> list:
    return list((tmp_path / "background").glob("bg_*.json"))


def test_a_response_the_gateway_stopped_runs_again_after_a_restart(make_frontend, serve, tmp_path, response_until):
    hanging = make_frontend(hang_after=1)
    with serve(create_app(hanging, config=GatewayConfig(files_dir=str(tmp_path)))) as url, _openai(url) as client:
        created = client.responses.create(
            model=MODEL, input="Hi?", background=True, extra_headers={"x-zoo-class": "batch"}
        )
        assert hanging.num_streaming.acquire(timeout=30)  # it runs, and the gateway stops before it ends
    assert len(_records(tmp_path)) == 1  # recorded while it runs
    frontend = make_frontend()
    restarted = create_app(frontend, config=GatewayConfig(files_dir=str(tmp_path)))
    with serve(restarted) as url, _openai(url) as client:
        done = response_until(client, created.id, "completed")
        assert done.status == "completed" and done.output_text == "Hello, world"
        assert done.created_at == created.created_at and done.background is True
        (item,) = client.responses.input_items.list(created.id).data
        assert item.role == "user" and item.content[0].text == "Hi?"
    assert frontend.calls[0]["request_id"] == created.id and frontend.calls[0]["traffic_class"] == "batch"
    assert not _records(tmp_path)  # it ended: its record went
    registry = CollectorRegistry()
    responses = restarted.state.responses
    registry.register(SnapshotCollector(responses_metrics(responses.store, responses.background)))
    text = generate_latest(registry).decode()
    assert "zoo:responses_background_resumed_total 1.0" in text
    assert 'zoo:gateway_store_write_errors_total{store="background_responses"} 0.0' in text


def test_responses_that_end_or_are_cancelled_leave_no_record(make_frontend, serve, tmp_path, response_until):
    frontend = make_frontend()
    with serve(create_app(frontend, config=GatewayConfig(files_dir=str(tmp_path)))) as url, _openai(url) as client:
        finished = client.responses.create(model=MODEL, input="Hi?", background=True)
        assert response_until(client, finished.id, "completed").status == "completed"
        frontend.hang_after = 1
        running = client.responses.create(model=MODEL, input="Hi?", background=True)
        assert frontend.num_streaming.acquire(timeout=30)
        assert client.responses.cancel(running.id).status == "cancelled"
        assert response_until(client, running.id, "cancelled").status == "cancelled"
        deadline = time.monotonic() + 30
        while _records(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert not _records(tmp_path)


@dataclass
class _LateNodes:
    """A frontend with no node until ``joined`` is set (wait_for_models: the control plane's)."""

    inner: object
    asked: threading.Event = field(default_factory=threading.Event)
    joined: threading.Event = field(default_factory=threading.Event)
    names: list[str] = field(default_factory=list)

    @property
    def model_names(self) -> list[str]:
        return self.names

    async def wait_for_models(self, timeout_s: float) -> list[str]:
        self.asked.set()
        await anyio.to_thread.run_sync(self.joined.wait, 30)
        self.names = list(self.inner.model_names)
        return self.names

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _record(**more) -> BackgroundRecord:
    base = dict(owner=None, response_id="resp_" + "a" * 24, created_at=1_700_000_000, body='{"input": "Hi?"}')
    return BackgroundRecord(**{**base, **more})


def test_a_resumed_response_is_queued_until_a_node_serves(make_frontend, serve, tmp_path, response_until):
    BackgroundJournal(tmp_path).save(_record(body='{"model": "smol", "input": "Hi?", "background": true}'))
    late = _LateNodes(make_frontend())
    with serve(create_app(late, config=GatewayConfig(files_dir=str(tmp_path)))) as url, _openai(url) as client:
        assert late.asked.wait(30)  # it waits for a node
        waiting = client.responses.retrieve("resp_" + "a" * 24)
        assert waiting.status == "queued" and waiting.created_at == 1_700_000_000
        late.joined.set()
        assert response_until(client, "resp_" + "a" * 24, "completed").output_text == "Hello, world"


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (_record(attempts=MAX_ATTEMPTS), f"stopped {MAX_ATTEMPTS} times"),
        (_record(body='{"input": "Hi?", "previous_response_id": "resp_gone"}'), "could not be read again"),
    ],
)
def test_a_response_not_run_again_is_kept_as_failed_saying_why(make_frontend, serve, tmp_path, record, why):
    BackgroundJournal(tmp_path).save(record)
    frontend = make_frontend()
    with serve(create_app(frontend, config=GatewayConfig(files_dir=str(tmp_path)))) as url, _openai(url) as client:
        deadline = time.monotonic() + 30
        while _records(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.01)
        failed = client.responses.retrieve(record.response_id)
        assert failed.status == "failed" and why in failed.error.message and failed.background is True
    assert not frontend.calls and not _records(tmp_path)


def test_unreadable_or_misnamed_records_are_dropped(tmp_path):
    journal = BackgroundJournal(tmp_path)
    journal.save(_record(response_id="resp_2", saved_ns=2))
    journal.save(_record(response_id="resp_1", saved_ns=1))
    (tmp_path / "background" / "bg_junk.json").write_bytes(b"{not json")
    moved = tmp_path / "background" / f"{record_name('someone', 'resp_3')}.json"
    moved.write_bytes(msgspec.json.encode(_record(response_id="resp_4")))
    assert [r.response_id for r in journal.load()] == ["resp_1", "resp_2"]  # oldest first
    assert sorted(p.name for p in _records(tmp_path)) == sorted(
        f"{record_name(None, i)}.json" for i in ("resp_1", "resp_2")
    )


def test_a_record_that_breaks_its_resumption_is_dropped_and_the_others_run(
    make_frontend, serve, tmp_path, monkeypatch, response_until
):
    from controlplane.gateway.responses_routes import ResponsesRoutes

    journal = BackgroundJournal(tmp_path)
    journal.save(_record(response_id="resp_bad", saved_ns=1))
    journal.save(_record(response_id="resp_good", saved_ns=2, body='{"model": "smol", "input": "Hi?"}'))
    resume = ResponsesRoutes._resume

    def breaks_on_the_first(self, record):
        if record.response_id == "resp_bad":
            raise RuntimeError("a record this gateway cannot take")
        resume(self, record)

    monkeypatch.setattr(ResponsesRoutes, "_resume", breaks_on_the_first)
    with serve(create_app(make_frontend(), config=GatewayConfig(files_dir=str(tmp_path)))) as url, _openai(url) as c:
        assert response_until(c, "resp_good", "completed").status == "completed"
    assert not _records(tmp_path)
