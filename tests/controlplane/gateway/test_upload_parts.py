"""Where pending uploads' parts are kept (gateway/upload_parts.py): with ``--files-dir`` on disk, so a restarted gateway
goes on with a pending upload, parts and all; an ended upload's parts go; what is on disk and unreadable is skipped;
a part whose bytes could not be kept is undone and loses nothing else."""

from __future__ import annotations

import json
import os

import httpx
import msgspec
import pytest

from controlplane.gateway import GatewayConfig, create_app
from controlplane.gateway.upload_parts import DiskParts, MemoryParts, UploadRecord


def _app(make_frontend, files_dir):
    return create_app(make_frontend(), config=GatewayConfig(files_dir=str(files_dir)))


def _client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")


async def _create(c: httpx.AsyncClient, num_bytes: int) -> str:
    body = {"bytes": num_bytes, "filename": "f.jsonl", "mime_type": "text/jsonl", "purpose": "batch"}
    reply = await c.post("/v1/uploads", json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()["id"]


async def _part(c: httpx.AsyncClient, upload_id: str, data: bytes) -> httpx.Response:
    return await c.post(f"/v1/uploads/{upload_id}/parts", files={"data": ("blob", data)})


@pytest.mark.anyio
async def test_a_restarted_gateway_goes_on_with_a_pending_upload(make_frontend, tmp_path):
    first = _app(make_frontend, tmp_path)
    async with _client(first) as c:
        upload = await _create(c, 9)
        ids = [(await _part(c, upload, data)).json()["id"] for data in (b"abc", b"def")]
        assert len(list((tmp_path / "uploads" / upload).glob("part_*.part"))) == 2
    restarted = _app(make_frontend, tmp_path)  # the same directory, nothing in memory
    assert restarted.state.uploads.num_pending == 1 and restarted.state.uploads.pending_bytes == 6
    async with _client(restarted) as c:
        ids.append((await _part(c, upload, b"ghi")).json()["id"])
        done = await c.post(f"/v1/uploads/{upload}/complete", json={"part_ids": [ids[2], *ids[:2]]})
        assert done.status_code == 200 and done.json()["status"] == "completed", done.text
        content = await c.get(f"/v1/files/{done.json()['file']['id']}/content")
        assert content.content == b"ghiabcdef"
    assert not (tmp_path / "uploads" / upload).exists()  # ended: its parts are gone
    again = _app(make_frontend, tmp_path)
    assert again.state.uploads.num_pending == 0


@pytest.mark.anyio
async def test_cancelled_and_expired_uploads_leave_nothing_on_disk(make_frontend, tmp_path):
    app = _app(make_frontend, tmp_path)
    async with _client(app) as c:
        cancelled = await _create(c, 4)
        await _part(c, cancelled, b"ab")
        assert (await c.post(f"/v1/uploads/{cancelled}/cancel")).json()["status"] == "cancelled"
        assert not (tmp_path / "uploads" / cancelled).exists()
        expiring = await _create(c, 4)
        await _part(c, expiring, b"ab")
    record_path = tmp_path / "uploads" / expiring / "upload.json"
    record = json.loads(record_path.read_bytes())
    record["object"]["expires_at"] = 1  # its hour passed while the gateway was down
    record_path.write_text(json.dumps(record))
    restarted = _app(make_frontend, tmp_path)
    async with _client(restarted) as c:
        late = await _part(c, expiring, b"cd")
        assert late.status_code == 400 and "expired" in late.json()["error"]["message"]
    assert not (tmp_path / "uploads" / expiring).exists() and restarted.state.uploads.num_expired == 1


def test_what_cannot_be_read_on_disk_is_skipped(tmp_path):
    parts = DiskParts(tmp_path)
    good = "upload_" + "a" * 32
    parts.begin(good, UploadRecord("o", {"id": good, "status": "pending", "bytes": 4, "created_at": 1}))
    parts.put(good, "part_" + "b" * 32, b"ab")
    (tmp_path / "uploads" / good / "part_junk.part").write_bytes(b"xx")  # not a part id: not counted
    no_record = tmp_path / "uploads" / ("upload_" + "c" * 32)
    no_record.mkdir()
    other = "upload_" + "d" * 32
    parts.begin(other, UploadRecord(None, {"id": good, "status": "pending", "bytes": 4}))  # names another upload
    (tmp_path / "uploads" / "notes.txt").write_text("left alone")
    (found,) = parts.load()
    assert found.record.owner == "o" and found.parts == {"part_" + "b" * 32: 2}
    assert not no_record.exists() and not (tmp_path / "uploads" / other).exists()
    assert (tmp_path / "uploads" / "notes.txt").exists()
    with pytest.raises(ValueError):
        parts.content("../files", [])  # only ids made here name a path


@pytest.mark.parametrize("make_parts", [MemoryParts, lambda tmp: DiskParts(tmp)])
def test_a_part_for_an_upload_that_ended_is_refused(make_parts, tmp_path):
    parts = make_parts() if make_parts is MemoryParts else make_parts(tmp_path)
    upload = "upload_" + "e" * 32
    parts.begin(upload, UploadRecord(None, {"id": upload, "status": "pending", "bytes": 2}))
    parts.drop(upload)
    with pytest.raises(KeyError):
        parts.put(upload, "part_" + "f" * 32, b"ab")


@pytest.mark.anyio
async def test_a_part_the_disk_could_not_keep_is_undone_and_the_upload_goes_on(make_frontend, tmp_path, monkeypatch):
    app = _app(make_frontend, tmp_path)
    put = DiskParts.put

    def full(self, upload_id, part_id, data):
        put(self, upload_id, part_id, data)  # written, then the disk fails (its record, say): the part is undone
        raise OSError(28, os.strerror(28))  # ENOSPC

    async with _client(app) as c:
        upload = await _create(c, 4)
        first = (await _part(c, upload, b"ab")).json()["id"]
        monkeypatch.setattr(DiskParts, "put", full)
        failed = await _part(c, upload, b"cd")
        assert failed.status_code == 500
        assert app.state.uploads.pending_bytes == 2
        assert len(list((tmp_path / "uploads" / upload).glob("part_*.part"))) == 1  # its file went too
        monkeypatch.setattr(DiskParts, "put", put)
        second = (await _part(c, upload, b"cd")).json()["id"]  # sent again: kept
        done = await c.post(f"/v1/uploads/{upload}/complete", json={"part_ids": [first, second]})
        assert done.json()["status"] == "completed"
        assert (await c.get(f"/v1/files/{done.json()['file']['id']}/content")).content == b"abcd"


def test_the_record_on_disk_is_the_uploads_object(tmp_path):
    parts = DiskParts(tmp_path)
    upload = "upload_" + "9" * 32
    record = UploadRecord("o", {"id": upload, "status": "pending", "bytes": 2}, expires_after=7200)
    parts.begin(upload, record)
    assert msgspec.json.decode((tmp_path / "uploads" / upload / "upload.json").read_bytes(), type=UploadRecord) == (
        record
    )
