"""Ended uploads' records on disk (gateway/upload_parts.py ``DiskParts.end``): a restarted gateway still knows an upload
it completed or cancelled (completing or cancelling it again says its status, not 404), within the bound of ended
records it keeps; a stop between the ended record and the parts' removal loses nothing."""

from __future__ import annotations

import httpx
import pytest

from controlplane.gateway import GatewayConfig, create_app, uploads
from controlplane.gateway.upload_parts import DiskParts, UploadRecord

pytestmark = pytest.mark.anyio


def _app(make_frontend, files_dir):
    return create_app(make_frontend(), config=GatewayConfig(files_dir=str(files_dir)))


def _client(app, key: str | None = None) -> httpx.AsyncClient:
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway", headers=headers)


async def _upload(c: httpx.AsyncClient, data: bytes) -> tuple[str, str]:
    body = {"bytes": len(data), "filename": "f.jsonl", "mime_type": "text/jsonl", "purpose": "batch"}
    upload = (await c.post("/v1/uploads", json=body)).json()["id"]
    part = (await c.post(f"/v1/uploads/{upload}/parts", files={"data": ("blob", data)})).json()["id"]
    return upload, part


async def test_a_restarted_gateway_says_an_ended_uploads_status(make_frontend, tmp_path):
    async with _client(_app(make_frontend, tmp_path)) as c:
        completed, part = await _upload(c, b"abc")
        done = await c.post(f"/v1/uploads/{completed}/complete", json={"part_ids": [part]})
        file_id = done.json()["file"]["id"]
        cancelled, _ = await _upload(c, b"de")
        await c.post(f"/v1/uploads/{cancelled}/cancel")
    assert not (tmp_path / "uploads" / completed).exists()  # its parts went; its ended record stays
    restarted = _app(make_frontend, tmp_path)
    assert restarted.state.uploads.num_pending == 0
    async with _client(restarted) as c:
        again = await c.post(f"/v1/uploads/{completed}/complete", json={"part_ids": [part]})
        assert again.status_code == 400 and "completed, not pending" in again.json()["error"]["message"], again.text
        cancel = await c.post(f"/v1/uploads/{cancelled}/cancel")
        assert cancel.status_code == 400 and "cancelled, not pending" in cancel.json()["error"]["message"]
        assert (await c.get(f"/v1/files/{file_id}/content")).content == b"abc"
    assert restarted.state.uploads.ended(completed)[1]["file"]["id"] == file_id  # the record names its File


async def test_a_stop_between_the_ended_record_and_the_parts_removal_keeps_the_end(
    make_frontend, tmp_path, monkeypatch
):
    monkeypatch.setattr(DiskParts, "drop", lambda self, upload_id: None)  # stopped before its parts went
    async with _client(_app(make_frontend, tmp_path)) as c:
        upload, _ = await _upload(c, b"ab")
        await c.post(f"/v1/uploads/{upload}/cancel")
    assert (tmp_path / "uploads" / upload).exists()
    monkeypatch.undo()
    restarted = _app(make_frontend, tmp_path)
    assert restarted.state.uploads.num_pending == 0 and restarted.state.uploads.pending_bytes == 0
    assert not (tmp_path / "uploads" / upload).exists()  # the ended record won: the parts went at load
    assert restarted.state.uploads.ended(upload)[1]["status"] == "cancelled"


async def test_the_ended_records_are_bounded_as_in_memory(make_frontend, tmp_path, monkeypatch):
    monkeypatch.setattr(uploads, "MAX_ENDED", 2)
    async with _client(_app(make_frontend, tmp_path)) as c:
        ids = []
        for _ in range(3):
            upload, _ = await _upload(c, b"ab")
            await c.post(f"/v1/uploads/{upload}/cancel")
            ids.append(upload)
    ended_dir = tmp_path / "uploads" / "ended"
    assert sorted(p.stem for p in ended_dir.iterdir()) == sorted(ids[1:])  # the oldest's record went
    monkeypatch.setattr(uploads, "MAX_ENDED", 1)  # a gateway restarted with a smaller bound drops the older at load
    restarted = _app(make_frontend, tmp_path)
    kept = [u for u in ids if restarted.state.uploads.ended(u) is not None]
    assert kept == ids[2:] and [p.stem for p in ended_dir.iterdir()] == kept  # the last one ended


def test_an_unreadable_ended_record_is_dropped(tmp_path):
    parts = DiskParts(tmp_path)
    good, bad, pending = ("upload_" + c * 32 for c in "abc")
    parts.end(good, UploadRecord("o", {"id": good, "status": "completed", "bytes": 1, "file": {"id": "file-x"}}))
    (parts.ended_directory / f"{bad}.json").write_bytes(b"{not json")
    parts.end(pending, UploadRecord("o", {"id": pending, "status": "pending", "bytes": 1}))  # not an ended status
    (found,) = parts.load()
    assert found.record.object["id"] == good and found.parts == {}
    assert sorted(p.name for p in parts.ended_directory.iterdir()) == [f"{good}.json"]
    with pytest.raises(ValueError):
        parts.end("../files", UploadRecord(None, {}))  # only ids made here name a path
