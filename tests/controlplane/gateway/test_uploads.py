"""OpenAI's Uploads (gateway/uploads.py, upload_routes.py): the ``openai`` SDK's chunked upload against the gateway
on loopback becomes a File of the file store, bytes intact; parts joined in the order named, md5 checked; what is
wrong is a 400 naming it and loses nothing; bounds (declared bytes, pending bytes, a full store) refuse without
losing the upload; expiry; owners kept apart."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import httpx
import openai
import pytest

from controlplane.frontend import FrontendError
from controlplane.gateway import GatewayConfig, create_app
from controlplane.gateway.api_keys import ApiKeyConfig
from controlplane.gateway.uploads import EXPIRES_S, UploadNotFound, Uploads

LINES = b"".join(
    b'{"custom_id": "c%d", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": '
    b'[{"role": "user", "content": "Hi %d"}]}}\n' % (i, i)
    for i in range(40)
)


@pytest.fixture
def client(served: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{served}/v1", api_key="x", max_retries=0, timeout=30) as c:
        yield c


def test_the_sdks_chunked_upload_becomes_a_file_with_its_bytes(client, tmp_path):
    path = tmp_path / "requests.jsonl"
    path.write_bytes(LINES)
    upload = client.uploads.upload_file_chunked(file=path, mime_type="text/jsonl", purpose="batch", part_size=1000)
    assert upload.status == "completed" and upload.bytes == len(LINES) and upload.filename == "requests.jsonl"
    assert upload.file is not None and upload.file.purpose == "batch" and upload.file.bytes == len(LINES)
    assert client.files.content(upload.file.id).read() == LINES
    assert client.files.retrieve(upload.file.id).filename == "requests.jsonl"
    batch = client.batches.create(
        input_file_id=upload.file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert batch.request_counts is None or batch.request_counts.total in (0, 40)  # checked and queued to run


def _part(c: httpx.Client, upload_id: str, data: bytes, **kwargs) -> httpx.Response:
    return c.post(f"/v1/uploads/{upload_id}/parts", files={"data": ("blob", data)}, **kwargs)


def _create(c: httpx.Client, num_bytes: int, **more) -> httpx.Response:
    body = {"bytes": num_bytes, "filename": "f.jsonl", "mime_type": "text/jsonl", "purpose": "batch", **more}
    return c.post("/v1/uploads", json=body)


def test_parts_are_joined_in_the_order_named_and_md5_is_checked(served):
    with httpx.Client(base_url=served, timeout=30) as c:
        made = _create(c, 9).json()
        ids = [_part(c, made["id"], data).json()["id"] for data in (b"abc", b"def", b"ghi")]
        wrong = c.post(f"/v1/uploads/{made['id']}/complete", json={"part_ids": ids, "md5": "0" * 32})
        assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "md5"
        order = [ids[2], ids[0], ids[1]]
        md5 = hashlib.md5(b"ghiabcdef").hexdigest()
        done = c.post(f"/v1/uploads/{made['id']}/complete", json={"part_ids": order, "md5": md5}).json()
        assert done["status"] == "completed" and done["file"]["bytes"] == 9
        assert c.get(f"/v1/files/{done['file']['id']}/content").content == b"ghiabcdef"
        again = c.post(f"/v1/uploads/{made['id']}/complete", json={"part_ids": order})
        assert again.status_code == 400 and "completed" in again.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"bytes": 10, "filename": "f", "mime_type": "text/jsonl", "purpose": "fine-tune"}, "purpose"),
        ({"bytes": 10, "filename": "", "mime_type": "text/jsonl", "purpose": "batch"}, "filename"),
        ({"bytes": -1, "filename": "f", "mime_type": "text/jsonl", "purpose": "batch"}, "bytes"),
        ({"bytes": 2**40, "filename": "f", "mime_type": "text/jsonl", "purpose": "batch"}, "bytes"),
        ({"bytes": 2**64, "filename": "f", "mime_type": "text/jsonl", "purpose": "batch"}, "bytes"),
        ({"bytes": 10, "filename": "f", "mime_type": "jsonl", "purpose": "batch"}, "mime_type"),
        ({"filename": "f", "mime_type": "text/jsonl", "purpose": "batch"}, "bytes"),
    ],
)
def test_a_bad_create_is_a_400_naming_its_field(served, body, param):
    reply = httpx.post(f"{served}/v1/uploads", json=body, timeout=30)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == param, reply.text


def test_what_is_wrong_with_parts_and_completes_is_refused_and_loses_nothing(served):
    with httpx.Client(base_url=served, timeout=30) as c:
        made = _create(c, 4).json()
        upload = made["id"]
        assert _part(c, "upload_nope", b"ab").status_code == 404
        assert _part(c, upload, b"abcde").json()["error"]["param"] == "data"  # past the 4 declared
        no_data = c.post(f"/v1/uploads/{upload}/parts", files={"other": ("x", b"ab")})
        assert no_data.status_code == 400 and no_data.json()["error"]["param"] == "data"
        assert c.post(f"/v1/uploads/{upload}/parts", content=b"ab").status_code == 400  # not multipart
        first = _part(c, upload, b"ab").json()["id"]
        short = c.post(f"/v1/uploads/{upload}/complete", json={"part_ids": [first]})
        assert short.status_code == 400 and "declared" in short.json()["error"]["message"]
        second = _part(c, upload, b"cd").json()["id"]
        for part_ids in ([first], [first, first], [first, "part_nope"]):
            reply = c.post(f"/v1/uploads/{upload}/complete", json={"part_ids": part_ids})
            assert reply.status_code == 400 and reply.json()["error"]["param"] == "part_ids"
        assert c.post(f"/v1/uploads/{upload}/complete", json={"part_ids": "x"}).status_code == 400
        assert c.post(f"/v1/uploads/{upload}/complete", json={"part_ids": [second, first]}).json()["status"] == (
            "completed"
        )
        cancelled = _create(c, 4).json()["id"]
        assert c.post(f"/v1/uploads/{cancelled}/cancel").json()["status"] == "cancelled"
        late = _part(c, cancelled, b"ab")
        assert late.status_code == 400 and "cancelled" in late.json()["error"]["message"]
        assert c.post("/v1/uploads/upload_nope/cancel").status_code == 404


@pytest.mark.anyio
async def test_an_upload_is_its_owners_only(frontend):
    app = create_app(frontend, api_keys=ApiKeyConfig(frozenset({"sk-a", "sk-b"})))
    a, b = ({"authorization": f"Bearer {k}"} for k in ("sk-a", "sk-b"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        body = {"bytes": 2, "filename": "f.jsonl", "mime_type": "text/jsonl", "purpose": "batch"}
        upload = (await c.post("/v1/uploads", json=body, headers=a)).json()["id"]
        part = await c.post(f"/v1/uploads/{upload}/parts", files={"data": ("x", b"hi")}, headers=b)
        assert part.status_code == 404
        part = (await c.post(f"/v1/uploads/{upload}/parts", files={"data": ("x", b"hi")}, headers=a)).json()
        assert (
            await c.post(f"/v1/uploads/{upload}/complete", json={"part_ids": [part["id"]]}, headers=b)
        ).status_code == 404
        assert (await c.post(f"/v1/uploads/{upload}/cancel", headers=b)).status_code == 404
        done = await c.post(f"/v1/uploads/{upload}/complete", json={"part_ids": [part["id"]]}, headers=a)
        file_id = done.json()["file"]["id"]
        assert (await c.get(f"/v1/files/{file_id}", headers=b)).status_code == 404
        assert (await c.get(f"/v1/files/{file_id}/content", headers=a)).content == b"hi"


@pytest.mark.anyio
async def test_a_full_store_or_pending_bound_refuses_and_the_upload_goes_on(make_frontend):
    config = GatewayConfig(files_store_bytes=10, uploads_pending_bytes=6)
    app = create_app(make_frontend(), config=config)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        big = {"bytes": 11, "filename": "f.jsonl", "mime_type": "text/jsonl", "purpose": "batch"}
        assert (await c.post("/v1/uploads", json=big)).json()["error"]["param"] == "bytes"  # past the store
        one = (await c.post("/v1/uploads", json={**big, "bytes": 6})).json()["id"]
        two = (await c.post("/v1/uploads", json={**big, "bytes": 6})).json()["id"]
        p1 = (await c.post(f"/v1/uploads/{one}/parts", files={"data": ("x", b"123456")})).json()["id"]
        refused = await c.post(f"/v1/uploads/{two}/parts", files={"data": ("x", b"abc")})
        assert refused.status_code == 413  # the pending bound: 6 bytes held already
        assert (await c.post(f"/v1/uploads/{one}/complete", json={"part_ids": [p1]})).json()["status"] == "completed"
        p2 = (await c.post(f"/v1/uploads/{two}/parts", files={"data": ("x", b"abcdef")})).json()["id"]
        full = await c.post(f"/v1/uploads/{two}/complete", json={"part_ids": [p2]})
        assert full.status_code == 413  # 6 + 6 > the store's 10 bytes: the upload stays pending
        first_file = (await c.get("/v1/files")).json()["data"][0]["id"]
        assert (await c.delete(f"/v1/files/{first_file}")).status_code == 200
        done = await c.post(f"/v1/uploads/{two}/complete", json={"part_ids": [p2]})
        assert done.json()["status"] == "completed"
        assert (await c.get(f"/v1/files/{done.json()['file']['id']}/content")).content == b"abcdef"


def test_an_upload_expires_after_an_hour_and_its_parts_are_dropped():
    now = [1000.0]
    uploads = Uploads(max_upload_bytes=100, max_pending_bytes=100, clock=lambda: now[0])
    made = uploads.create("o", "f.jsonl", "batch", 4, "text/jsonl")
    assert made["expires_at"] == 1000 + EXPIRES_S
    uploads.add_part("o", made["id"], 2)
    assert uploads.pending_bytes == 2 and uploads.take_ended() == []
    now[0] += EXPIRES_S
    with pytest.raises(FrontendError, match="expired"):
        uploads.add_part("o", made["id"], 2)
    assert uploads.pending_bytes == 0 and uploads.num_expired == 1
    assert uploads.take_ended() == [made["id"]] and uploads.take_ended() == []  # its parts' bytes are dropped
    with pytest.raises(UploadNotFound):
        uploads.cancel("other", made["id"])


def test_an_upload_being_completed_takes_no_part_nor_cancel_until_it_ends():
    uploads = Uploads(max_upload_bytes=100, max_pending_bytes=100, clock=lambda: 0.0)
    made = uploads.create(None, "f.jsonl", "batch", 2, "text/jsonl")
    part = uploads.add_part(None, made["id"], 2)["id"]
    obj, expires = uploads.begin_complete(None, made["id"], [part])
    assert obj["filename"] == "f.jsonl" and expires is None
    for call in (lambda: uploads.cancel(None, made["id"]), lambda: uploads.add_part(None, made["id"], 0)):
        with pytest.raises(FrontendError, match="being completed"):
            call()
    uploads.abort_complete(None, made["id"])  # the store refused it: pending again, its part kept
    assert uploads.begin_complete(None, made["id"], [part])[0]["id"] == made["id"]
    done = uploads.completed(None, made["id"], {"id": "file-1"})
    assert done["status"] == "completed" and done["file"] == {"id": "file-1"} and uploads.pending_bytes == 0
    assert uploads.take_ended() == [made["id"]]


def test_a_part_whose_bytes_were_not_kept_is_undone():
    uploads = Uploads(max_upload_bytes=100, max_pending_bytes=100, clock=lambda: 0.0)
    made = uploads.create(None, "f.jsonl", "batch", 4, "text/jsonl")
    kept = uploads.add_part(None, made["id"], 2)["id"]
    lost = uploads.add_part(None, made["id"], 2)["id"]
    uploads.forget_part(made["id"], lost)
    assert uploads.pending_bytes == 2
    with pytest.raises(FrontendError, match="names a part this upload does not have"):
        uploads.begin_complete(None, made["id"], [kept, lost])
    uploads.add_part(None, made["id"], 2)  # sent again: the upload takes it
    assert uploads.pending_bytes == 4


@pytest.mark.anyio
async def test_the_uploads_on_the_control_planes_metrics(make_frontend):
    """observe/batch_metrics.py, as zoo/serve.py registers it: uploads pending and their parts' bytes."""
    from prometheus_client import CollectorRegistry, generate_latest

    from observe.batch_metrics import batch_metrics
    from observe.exporter import SnapshotCollector

    app = create_app(make_frontend())
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(batch_metrics(app.state.batches, app.state.uploads)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        body = {"bytes": 10, "filename": "f.jsonl", "mime_type": "text/jsonl", "purpose": "batch"}
        for _ in range(2):
            upload = (await c.post("/v1/uploads", json=body)).json()["id"]
        await c.post(f"/v1/uploads/{upload}/parts", files={"data": ("x", b"1234")})
    text = generate_latest(registry).decode()
    assert "zoo:uploads_pending 2.0" in text and "zoo:uploads_pending_bytes 4.0" in text
    assert "zoo:uploads_expired_total 0.0" in text
