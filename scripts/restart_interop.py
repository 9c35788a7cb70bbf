"""Interop: what a control plane killed mid-work (SIGKILL: a crash, no drain) and restarted with the same
``--files-dir`` still has, with the official ``openai`` SDK against real processes (`zoo controlplane` + one `zoo
agent`, SmolLM2-135M on CPU):

- a background response running when it died is run again under its id (gateway/background_journal.py): the SDK,
  polling ``client.responses.retrieve(id)``, sees it queued or in progress, then completed with its text;
- an OpenAI Upload with 2 of its 3 parts sent before the crash takes its third part after it and completes into a
  File whose content is the three parts joined (gateway/upload_parts.py);
- a stored response and a stored chat completion made before the crash are still read back.

    python scripts/restart_interop.py > bench/results/<date>-restart-interop.json

It starts and stops its own processes on loopback (ports 18000, 15555/15556), in a fresh temporary --files-dir.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import httpx
import openai

HTTP = "127.0.0.1:18000"
CONTROL = "tcp://127.0.0.1:15555"
CLIENTS = "tcp://127.0.0.1:15556"
BASE = f"http://{HTTP}"
MODEL = "SmolLM2-135M-Instruct"
ZOO = [sys.executable, "-m", "zoo"]


def _controlplane(files_dir: str, log) -> subprocess.Popen:
    argv = [*ZOO, "controlplane", "--listen", CONTROL, "--client-listen", CLIENTS, "--http", HTTP]
    return subprocess.Popen([*argv, "--files-dir", files_dir], stdout=log, stderr=subprocess.STDOUT)


def _agent(log) -> subprocess.Popen:
    argv = [*ZOO, "agent", "--control", CONTROL, "--node-id", "torch-0", "--num-threads", "1"]
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


def _until_serving(timeout_s: float = 180) -> float:
    """Seconds until the gateway lists a model (a node has joined)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            if httpx.get(f"{BASE}/v1/models", timeout=2).json().get("data"):
                return time.monotonic() - t0
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.2)
    raise TimeoutError("the gateway never served a model")


def main() -> int:
    report: dict = {"date": time.strftime("%Y-%m-%d"), "model": MODEL, "crash": "SIGKILL of zoo controlplane"}
    files_dir = tempfile.mkdtemp(prefix="zoo-restart-")
    log = open(os.path.join(files_dir, "processes.log"), "ab")  # noqa: SIM115 (the children's, until the end)
    cp = _controlplane(files_dir, log)
    agent = _agent(log)
    try:
        report["first_start_s"] = round(_until_serving(), 1)
        client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="x", max_retries=3, timeout=60)
        stored = client.responses.create(model=MODEL, input="Name a colour.", max_output_tokens=8, temperature=0)
        chat = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Say hi."}], max_tokens=6, temperature=0, store=True
        )
        parts = [b'{"a": 1}\n', b'{"b": 2}\n', b'{"c": 3}\n']
        upload = client.uploads.create(bytes=sum(map(len, parts)), filename="x.jsonl", mime_type="text/jsonl",
                                       purpose="batch")  # fmt: skip
        part_ids = [client.uploads.parts.create(upload.id, data=p).id for p in parts[:2]]
        running = client.responses.create(
            model=MODEL, input="Write a long story about a lighthouse keeper.", max_output_tokens=400,
            temperature=0, background=True,
        )  # fmt: skip
        status_before = None
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            status_before = client.responses.retrieve(running.id).status
            if status_before == "in_progress":
                break
            time.sleep(0.05)
        time.sleep(1.0)  # a second of tokens, then the crash
        cp.send_signal(signal.SIGKILL)
        cp.wait()
        report["before_crash"] = {"background_status": status_before, "upload_parts_sent": 2}
        cp = _controlplane(files_dir, log)
        report["restart_serving_s"] = round(_until_serving(), 1)
        seen, t0 = [], time.monotonic()
        while time.monotonic() - t0 < 300:
            reply = client.responses.retrieve(running.id)
            if not seen or seen[-1] != reply.status:
                seen.append(reply.status)
            if reply.status in ("completed", "incomplete", "failed", "cancelled"):
                break
            time.sleep(0.2)
        report["background_after_restart"] = {
            "same_id": reply.id == running.id,
            "same_created_at": reply.created_at == running.created_at,
            "statuses_seen": seen,
            "output_tokens": reply.usage.output_tokens if reply.usage else None,
            "text_start": (reply.output_text or "")[:80],
            "seconds_after_restart": round(time.monotonic() - t0, 1),
        }
        part_ids.append(client.uploads.parts.create(upload.id, data=parts[2]).id)
        done = client.uploads.complete(upload.id, part_ids=part_ids)
        content = client.files.content(done.file.id).read() if done.file else b""
        report["upload_after_restart"] = {"status": done.status, "content_joined": content == b"".join(parts)}
        report["stored_after_restart"] = {
            "response": client.responses.retrieve(stored.id).output_text == stored.output_text,
            "chat_completion": client.chat.completions.retrieve(chat.id).choices[0].message.content
            == chat.choices[0].message.content,
        }
    finally:
        for proc in (cp, agent):
            proc.send_signal(signal.SIGINT)
        for proc in (cp, agent):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
    report["files_dir"] = files_dir
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
