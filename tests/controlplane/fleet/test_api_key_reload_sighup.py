"""`zoo controlplane --api-keys FILE` as a real process: after the file is rewritten, SIGHUP makes a revoked key
refused and a new key accepted, without a restart; a broken file is refused and the keys stay as they were; both
counted on /metrics (zoo/keys_reload.py)."""

from __future__ import annotations

import signal

import anyio
import httpx
import pytest

pytestmark = pytest.mark.anyio

OLD, NEW = "zk-before-the-rotation", "zk-after-the-rotation"


async def _status(http: httpx.AsyncClient, key: str) -> int:
    return (await http.get("/load", headers={"Authorization": f"Bearer {key}"})).status_code


async def _reloads(http: httpx.AsyncClient, key: str) -> str:
    text = (await http.get("/metrics", headers={"Authorization": f"Bearer {key}"})).text
    return "\n".join(line for line in text.splitlines() if line.startswith("zoo:api_key_reloads_total"))


async def test_sighup_rotates_the_keys_and_a_broken_file_changes_nothing(spawn_controlplane, tmp_path):
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"{OLD}\n")
    cp = spawn_controlplane(None, "--api-keys", str(keys_file))
    async with httpx.AsyncClient(base_url=f"http://{cp.http}", timeout=30.0) as http:
        with anyio.fail_after(60):
            while True:
                try:
                    if await _status(http, OLD) == 200:
                        break
                except httpx.TransportError:
                    pass
                await anyio.sleep(0.2)
        assert await _status(http, NEW) == 401
        keys_file.write_text(f"{NEW}\n")
        cp.proc.send_signal(signal.SIGHUP)
        with anyio.fail_after(30):
            while await _status(http, NEW) != 200:
                await anyio.sleep(0.05)
        assert await _status(http, OLD) == 401  # revoked, with no restart
        keys_file.write_text("# nothing left\n")
        cp.proc.send_signal(signal.SIGHUP)
        with anyio.fail_after(30):
            while 'outcome="refused"} 1.0' not in await _reloads(http, NEW):
                await anyio.sleep(0.05)
        assert await _status(http, NEW) == 200  # the broken file changed nothing
        assert 'zoo:api_key_reloads_total{outcome="ok"} 1.0' in await _reloads(http, NEW)
    assert cp.proc.poll() is None
    assert "API keys not reloaded" in cp.output() and "the file holds no key" in cp.output()
