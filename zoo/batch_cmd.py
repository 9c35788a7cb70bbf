"""`zoo batch IN.jsonl -o OUT.jsonl`: a file of requests run as an OpenAI batch on a running control plane
(/v1/files, /v1/batches: controlplane/gateway/batch_runner.py), as vLLM's ``run_batch`` takes ``-i``/``-o``.

    IN.jsonl   one request per line: {"custom_id": ..., "method": "POST", "url": "/v1/chat/completions", "body": {...}}
    OUT.jsonl  the 2xx answers in input order: {"id", "custom_id", "response": {"status_code", "request_id", "body"}}
    --errors   the others (default OUT.errors.jsonl, written only when there are any)

A file past ``--part-mib`` (64 MiB, OpenAI's part size) goes through OpenAI's Uploads API in parts (/v1/uploads:
gateway/upload_routes.py, md5 checked), as the openai SDK's ``upload_file_chunked`` sends one past a request's size.

Progress goes to stderr. Exit 0 when the batch completed (its failed requests are in the errors file), 1 when it
failed (its file's errors are printed), expired or was cancelled, 2 when the gateway refused it or could not be
reached (an https --url: ``--cacert`` the CA to trust, ``--cert``/``--key`` a client certificate); Ctrl-C cancels it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import ssl
import sys
import time
from pathlib import Path

import msgspec

TERMINAL = ("completed", "failed", "expired", "cancelled")


def add_batch_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="a JSONL file of requests: custom_id, method, url, body per line")
    p.add_argument("-o", "--output", required=True, help="where the 2xx answers go (JSONL, in input order)")
    p.add_argument("--errors", default=None, help="where the other answers go (default: OUTPUT.errors.jsonl)")
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the control plane's OpenAI API")
    p.add_argument("--endpoint", default=None, help="the requests' route (default: the first line's url)")
    p.add_argument("--poll-s", type=float, default=1.0, help="how often to ask how the batch is doing")
    p.add_argument("--timeout-s", type=float, default=60.0, help="each HTTP call's timeout")
    p.add_argument(
        "--part-mib", type=float, default=64.0, help="a larger file is sent in parts of this size (/v1/uploads)"
    )
    add_tls_args(p)


def add_tls_args(p: argparse.ArgumentParser) -> None:
    """An https --url's flags (`zoo batch`, `zoo profile`)."""
    p.add_argument(
        "--cacert", default=None, metavar="PEM", help="an https --url: the CA to trust (default: the system CAs)"
    )
    p.add_argument("--cert", default=None, metavar="PEM", help="an https --url: this client's certificate (mutual TLS)")
    p.add_argument("--key", default=None, metavar="PEM", help="--cert's private key (default: in --cert's file)")


def tls_verify(args: argparse.Namespace) -> ssl.SSLContext | bool:
    """httpx's ``verify`` for an https --url: the system's CAs (True) unless --cacert or --cert asks otherwise."""
    if args.cacert is None and args.cert is None:
        return True
    context = ssl.create_default_context(cafile=args.cacert)
    if args.cert is not None:
        context.load_cert_chain(args.cert, args.key)
    return context


def run_batch(args: argparse.Namespace) -> int:
    import httpx

    try:
        return _run_batch(args)
    except httpx.TransportError as e:  # not reached, refused the TLS handshake, or went away
        print(f"zoo batch: {args.url}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


def _run_batch(args: argparse.Namespace) -> int:
    import httpx

    content = Path(args.input).read_bytes()
    endpoint = args.endpoint or _first_url(content)
    if endpoint is None:
        print(f"zoo batch: {args.input} has no request line with a url (or give --endpoint)", file=sys.stderr)
        return 2
    key = os.environ.get("ZOO_API_KEY") or os.environ.get("OPENAI_API_KEY")
    headers = {"authorization": f"Bearer {key}"} if key else {}
    try:
        verify = tls_verify(args)
    except (OSError, ssl.SSLError) as e:
        print(f"zoo batch: --cacert/--cert/--key: {e}", file=sys.stderr)
        return 2
    with httpx.Client(base_url=args.url.rstrip("/"), headers=headers, timeout=args.timeout_s, verify=verify) as http:
        file_id, refused = _upload(http, Path(args.input).name, content, max(1, int(args.part_mib * 1024 * 1024)))
        if refused is not None:
            return _refused("the upload", refused)
        body = {"input_file_id": file_id, "endpoint": endpoint, "completion_window": "24h"}
        created = http.post("/v1/batches", json=body)
        if created.status_code != 200:
            return _refused("the batch", created)
        batch = created.json()
        print(f"zoo batch: {batch['id']} ({endpoint})", file=sys.stderr)
        try:
            batch = _wait(http, batch, args.poll_s)
        except KeyboardInterrupt:
            http.post(f"/v1/batches/{batch['id']}/cancel")
            print(f"zoo batch: {batch['id']} cancelled", file=sys.stderr)
            return 130
        errors_path = args.errors or f"{args.output.removesuffix('.jsonl')}.errors.jsonl"
        for file_id, path in ((batch.get("output_file_id"), args.output), (batch.get("error_file_id"), errors_path)):
            if file_id:
                Path(path).write_bytes(http.get(f"/v1/files/{file_id}/content").content)
        if not batch.get("output_file_id"):
            Path(args.output).write_bytes(b"")
    counts = batch["request_counts"]
    print(f"zoo batch: {batch['status']}: {counts['completed']} answered, {counts['failed']} failed "
          f"of {counts['total']} -> {args.output}" + (f", {errors_path}" if batch.get("error_file_id") else ""),
          file=sys.stderr)  # fmt: skip
    for error in (batch.get("errors") or {}).get("data") or ():
        print(f"  line {error.get('line')}: {error.get('code')}: {error.get('message')}", file=sys.stderr)
    return 0 if batch["status"] == "completed" else 1


def _upload(http, name: str, content: bytes, part_bytes: int):
    """(the input file's id, None), or (None, the reply that refused it): one ``POST /v1/files``, or, past
    ``part_bytes``, an upload in parts (cancelled if a part or the completion is refused)."""
    if len(content) <= part_bytes:
        reply = http.post("/v1/files", files={"file": (name, content)}, data={"purpose": "batch"})
        return (reply.json()["id"], None) if reply.status_code == 200 else (None, reply)
    made = http.post(
        "/v1/uploads", json={"bytes": len(content), "filename": name, "mime_type": "text/jsonl", "purpose": "batch"}
    )
    if made.status_code != 200:
        return None, made
    upload_id, part_ids = made.json()["id"], []
    for start in range(0, len(content), part_bytes):
        part = http.post(f"/v1/uploads/{upload_id}/parts", files={"data": (name, content[start : start + part_bytes])})
        if part.status_code != 200:
            http.post(f"/v1/uploads/{upload_id}/cancel")
            return None, part
        part_ids.append(part.json()["id"])
    md5 = hashlib.md5(content, usedforsecurity=False).hexdigest()
    done = http.post(f"/v1/uploads/{upload_id}/complete", json={"part_ids": part_ids, "md5": md5})
    if done.status_code != 200:
        http.post(f"/v1/uploads/{upload_id}/cancel")
        return None, done
    return done.json()["file"]["id"], None


def _wait(http, batch: dict, poll_s: float) -> dict:
    shown = None
    while batch["status"] not in TERMINAL:
        time.sleep(poll_s)
        batch = http.get(f"/v1/batches/{batch['id']}").json()
        counts = batch["request_counts"]
        progress = (batch["status"], counts["completed"] + counts["failed"], counts["total"])
        if progress != shown:
            print(f"zoo batch: {progress[0]}, {progress[1]} of {progress[2]} answered", file=sys.stderr)
            shown = progress
    return batch


def _first_url(content: bytes) -> str | None:
    for line in content.splitlines():
        try:
            url = msgspec.json.decode(line).get("url") if line.strip() else None
        except (msgspec.DecodeError, AttributeError, RecursionError):
            continue
        if isinstance(url, str):
            return url
    return None


def _refused(what: str, reply) -> int:
    try:
        message = reply.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = reply.text[:500]
    print(f"zoo batch: {what} was refused ({reply.status_code}): {message}", file=sys.stderr)
    return 2
