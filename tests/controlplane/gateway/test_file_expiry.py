"""Files that expire (gateway/file_store.py), as OpenAI's: an upload's ``expires_after`` (the openai SDK's field), an
uploaded batch input's 30-day default, a batch's ``output_expires_after`` for its output file, an Upload's
``expires_after`` for the file it completes; a file past its time is gone everywhere (in memory and on disk) and
counted; bad values are 400s naming the field."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from controlplane.gateway import create_app
from controlplane.gateway.file_store import BATCH_INPUT_EXPIRES_S, FileStore

HOUR = 3600
LINE = (
    b'{"custom_id": "q", "method": "POST", "url": "/v1/chat/completions", "body": '
    b'{"messages": [{"role": "user", "content": "Hi"}]}}\n'
)


@pytest.fixture
def client(served: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{served}/v1", api_key="x", max_retries=0, timeout=30) as c:
        yield c


def test_a_file_past_its_time_is_gone_and_counted():
    now = [1_000_000.0]
    store = FileStore(10, 1000, clock=lambda: now[0])
    kept = store.upload("a", "notes.txt", "user_data", b"keep")
    brief = store.upload("a", "brief.txt", "user_data", b"brief", expires_after=HOUR)
    batch_input = store.upload("a", "in.jsonl", "batch", LINE)
    assert kept["expires_at"] is None and brief["expires_at"] == 1_000_000 + HOUR
    assert batch_input["expires_at"] == 1_000_000 + BATCH_INPUT_EXPIRES_S  # OpenAI's default for a batch input
    now[0] += HOUR - 1
    assert store.content("a", brief["id"]) == b"brief" and store.num_expired == 0
    now[0] += 1
    assert store.get("a", brief["id"]) is None and store.content("a", brief["id"]) is None
    assert store.num_expired == 1 and store.num_bytes == len(b"keep") + len(LINE)
    assert [f["id"] for f in store.list_page("a", {})["data"]] == [batch_input["id"], kept["id"]]
    now[0] += BATCH_INPUT_EXPIRES_S
    assert store.list_page("a", {})["data"] == [store.get("a", kept["id"])] and store.num_expired == 2


def test_an_expiry_is_kept_on_disk_and_runs_out_after_a_restart(tmp_path):
    now = [1_000_000.0]
    store = FileStore(10, 1000, tmp_path, clock=lambda: now[0])
    brief = store.upload(None, "brief.txt", "user_data", b"brief", expires_after=HOUR)
    store.delete(None, store.upload(None, "gone.txt", "user_data", b"x", expires_after=HOUR)["id"])
    now[0] += 2 * HOUR
    again = FileStore(10, 1000, tmp_path, clock=lambda: now[0])  # a restarted gateway
    assert again.get(None, brief["id"]) is None and again.num_expired == 1
    assert not list((tmp_path / "files").glob(f"{brief['id']}.*"))  # its record and content removed


def test_the_sdks_expires_after_and_a_batchs_output_expires_after(client):
    made = client.files.create(
        file=("in.jsonl", LINE), purpose="batch", expires_after={"anchor": "created_at", "seconds": 2 * HOUR}
    )
    assert made.expires_at == made.created_at + 2 * HOUR
    assert client.files.retrieve(made.id).expires_at == made.expires_at
    batch = client.batches.create(
        input_file_id=made.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        output_expires_after={"anchor": "created_at", "seconds": 5 * HOUR},
    )
    deadline = time.monotonic() + 30
    while batch.status != "completed" and time.monotonic() < deadline:
        time.sleep(0.05)
        batch = client.batches.retrieve(batch.id)
    output = client.files.retrieve(batch.output_file_id)
    assert output.expires_at == output.created_at + 5 * HOUR


def test_an_uploads_expires_after_is_its_files(served):
    with httpx.Client(base_url=served, timeout=30) as c:
        body = {"bytes": 2, "filename": "f.txt", "mime_type": "text/plain", "purpose": "user_data"}
        upload = c.post("/v1/uploads", json={**body, "expires_after": {"anchor": "created_at", "seconds": HOUR}})
        part = c.post(f"/v1/uploads/{upload.json()['id']}/parts", files={"data": ("x", b"hi")}).json()
        done = c.post(f"/v1/uploads/{upload.json()['id']}/complete", json={"part_ids": [part["id"]]}).json()
        assert done["file"]["expires_at"] == done["file"]["created_at"] + HOUR
        bad = c.post("/v1/uploads", json={**body, "expires_after": {"anchor": "created_at", "seconds": 60}})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "expires_after.seconds"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "59"}, "expires_after.seconds"),
        (
            {"expires_after[anchor]": "created_at", "expires_after[seconds]": str(31 * 24 * HOUR)},
            "expires_after.seconds",
        ),
        ({"expires_after[anchor]": "created_at", "expires_after[seconds]": "soon"}, "expires_after.seconds"),
        ({"expires_after[anchor]": "last_used", "expires_after[seconds]": "3600"}, "expires_after.anchor"),
        ({"expires_after[seconds]": "3600"}, "expires_after.anchor"),
    ],
)
def test_a_bad_expires_after_is_a_400_naming_it(served, fields, param):
    reply = httpx.post(
        f"{served}/v1/files", data={"purpose": "batch", **fields}, files={"file": ("in.jsonl", LINE)}, timeout=30
    )
    assert reply.status_code == 400 and reply.json()["error"]["param"] == param, reply.text


@pytest.mark.anyio
async def test_a_bad_output_expires_after_is_a_400_naming_it(frontend):
    app = create_app(frontend)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        made = (await c.post("/v1/files", data={"purpose": "batch"}, files={"file": ("in.jsonl", LINE)})).json()
        body = {"input_file_id": made["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
        for after, param in (({"anchor": "created_at", "seconds": 1}, "output_expires_after.seconds"),
                             ({"anchor": "x", "seconds": HOUR}, "output_expires_after.anchor"),
                             ("soon", "output_expires_after")):  # fmt: skip
            reply = await c.post("/v1/batches", json={**body, "output_expires_after": after})
            assert reply.status_code == 400 and reply.json()["error"]["param"] == param, reply.text


def test_a_record_on_disk_with_a_malformed_expiry_is_loaded_and_kept(tmp_path):
    import msgspec

    store = FileStore(10, 1000, tmp_path)
    made = store.upload(None, "notes.txt", "user_data", b"keep")
    record = tmp_path / "files" / f"{made['id']}.json"
    data = msgspec.json.decode(record.read_bytes())
    data["object"]["expires_at"] = "soon"  # a hand-edited or damaged record: the gateway still starts
    record.write_bytes(msgspec.json.encode(data))
    again = FileStore(10, 1000, tmp_path)
    assert again.content(None, made["id"]) == b"keep" and again.num_expired == 0
