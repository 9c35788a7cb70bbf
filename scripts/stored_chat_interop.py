"""Interop: the official ``openai`` SDK against the zoo's gateway (`zoo up`, SmolLM2-135M on CPU) for this stop's work:

- OpenAI's stored chat completions (``store: true``): ``client.chat.completions.create`` whole and streamed, then
  ``.list`` (with its ``metadata`` and ``model`` filters and its cursor), ``.retrieve``, ``.update``,
  ``.messages.list`` and ``.delete``;
- OpenAI's Uploads: a batch input file sent in parts (``client.uploads.upload_file_chunked``), then run as a batch;
- Anthropic's Models API shape (``anthropic.Anthropic().models.list()`` / ``.retrieve()``);
- a predicted output routed where a node speculates (controlplane/router/prediction_affinity.py): a fleet of two
  torch agents, one speculating; each request with a ``prediction`` whose usage says drafts were accepted ran on the
  speculating node (a node that does not speculate accepts none), and requests without one are placed by the
  policy alone (the agents' request counters, read from their /metrics). Each request has a prompt of its own, so
  no node is preferred for holding its prefix.

    cat > /tmp/zoo-two.toml <<'TOML'
    [[agents]]
    node_id = "torch-plain"
    [[agents]]
    node_id = "torch-spec"
    speculative = "ngram"
    TOML
    zoo up --config /tmp/zoo-two.toml &                 # the gateway on 127.0.0.1:8000
    python scripts/stored_chat_interop.py [http://127.0.0.1:8000] > report.json

A check that the SDK runs against the gateway unchanged and that placement follows the rule, not a model figure.
"""

from __future__ import annotations

import json
import sys
import time

import httpx
import openai

BASE = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"
MODEL = "SmolLM2-135M-Instruct"
ASK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]


def stored_completions(client: openai.OpenAI) -> dict:
    t0 = time.monotonic()
    whole = client.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=12, temperature=0, store=True, metadata={"run": "interop", "kind": "a"}
    )
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=ASK, max_tokens=12, temperature=0, store=True, stream=True, metadata={"kind": "b"}
        )
    )
    streamed_text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    listed = client.chat.completions.list()
    stored_stream = client.chat.completions.retrieve(chunks[0].id)
    report = {
        "listed": [c.id for c in listed.data] == [whole.id, chunks[0].id],
        "list_by_metadata": [c.id for c in client.chat.completions.list(metadata={"kind": "b"})] == [chunks[0].id],
        "list_by_other_model": client.chat.completions.list(model="other").data == [],
        "cursor_followed": [c.id for c in client.chat.completions.list(limit=1)] == [whole.id, chunks[0].id],
        "retrieved_same_text": client.chat.completions.retrieve(whole.id).choices[0].message.content
        == whole.choices[0].message.content,
        "streamed_stored_whole": stored_stream.choices[0].message.content == streamed_text,
        "streamed_usage": stored_stream.usage.completion_tokens if stored_stream.usage else None,
        "updated_metadata": client.chat.completions.update(whole.id, metadata={"run": "done"}).metadata,
        "messages": [(m.id, m.role, m.content) for m in client.chat.completions.messages.list(whole.id)],
        "deleted": client.chat.completions.delete(whole.id).deleted,
        "unstored_not_listed": None,
    }
    try:
        client.chat.completions.retrieve(whole.id)
        report["after_delete"] = "still there"
    except openai.NotFoundError:
        report["after_delete"] = "404"
    plain = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, temperature=0)
    report["unstored_not_listed"] = plain.id not in [c.id for c in client.chat.completions.list()]
    client.chat.completions.delete(chunks[0].id)
    report["seconds"] = round(time.monotonic() - t0, 2)
    return report


def _agent_requests() -> dict[str, float]:
    """Each agent's finished requests (vllm:request_success_total, summed over reasons), by its node id."""
    out: dict[str, float] = {}
    for group in httpx.get(f"{BASE}/metrics/targets", timeout=30).json():
        node = group.get("labels", {}).get("__meta_zoo_node", "?")
        for target in group.get("targets", []):
            text = httpx.get(f"http://{target}/metrics", timeout=30).text
            total = sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("vllm:request_success_total")
            )
            out[f"{node}@{target}"] = total
    return out


def prediction_routing(client: openai.OpenAI, rounds: int = 6) -> dict:
    code = "def add(a, b):\n    return a + b\n"
    before = _agent_requests()
    accepted = []
    for i in range(rounds):  # one at a time: the speculating node is idle at each decision; a prompt of its own
        messages = [{"role": "user", "content": f"Task {i}. Repeat this code exactly:\n{code}"}]
        reply = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=32,
            temperature=0,
            prediction={"type": "content", "content": code},
        )
        details = reply.usage.completion_tokens_details
        accepted.append(details.accepted_prediction_tokens if details else None)
    middle = _agent_requests()
    for i in range(rounds):  # each its own prompt, so no node holds its prefix
        asked = [{"role": "user", "content": f"Question {i}: name a colour."}]
        client.chat.completions.create(model=MODEL, messages=asked, max_tokens=4, temperature=0)
    after = _agent_requests()
    return {
        "predicted_requests_with_accepted_drafts": sum(1 for a in accepted if a),
        "predicted_requests": rounds,
        "accepted_prediction_tokens": accepted,
        "predicted_by_agent": {k: middle[k] - before.get(k, 0.0) for k in middle},
        "plain_by_agent": {k: after[k] - middle.get(k, 0.0) for k in after},
    }


def upload_to_batch(client: openai.OpenAI, tmp_dir: str) -> dict:
    """A batch input file sent in parts (``client.uploads.upload_file_chunked``, 256-byte parts), then run."""
    lines = [
        {"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": MODEL, "max_tokens": 8, "temperature": 0,
                  "messages": [{"role": "user", "content": f"Say the number {i}."}]}}
        for i in range(4)
    ]  # fmt: skip
    path = f"{tmp_dir}/requests.jsonl"
    with open(path, "w") as f:
        f.write("".join(json.dumps(line) + "\n" for line in lines))
    t0 = time.monotonic()
    upload = client.uploads.upload_file_chunked(file=path, mime_type="text/jsonl", purpose="batch", part_size=256)
    batch = client.batches.create(
        input_file_id=upload.file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    while batch.status not in ("completed", "failed", "expired", "cancelled") and time.monotonic() - t0 < 300:
        time.sleep(0.2)
        batch = client.batches.retrieve(batch.id)
    answers = client.files.content(batch.output_file_id).text.splitlines() if batch.output_file_id else []
    return {
        "upload_status": upload.status,
        "file_bytes": upload.file.bytes,
        "same_bytes": client.files.content(upload.file.id).read() == open(path, "rb").read(),
        "batch_status": batch.status,
        "answered": len(answers),
        "seconds": round(time.monotonic() - t0, 2),
    }


def anthropic_models() -> dict:
    import anthropic

    with anthropic.Anthropic(base_url=BASE, api_key="x", max_retries=0, timeout=30) as client:
        models = client.models.list().data
        one = client.models.retrieve(models[0].id)
        return {"sdk": anthropic.__version__, "listed": [m.id for m in models], "retrieved": one.id,
                "max_input_tokens": one.max_input_tokens, "created_at": one.created_at.isoformat()}  # fmt: skip


def main() -> None:
    import tempfile

    with (
        openai.OpenAI(base_url=f"{BASE}/v1", api_key="x", max_retries=0, timeout=120) as o,
        tempfile.TemporaryDirectory() as tmp,
    ):
        report = {
            "sdk": {"openai": openai.__version__},
            "stored_chat_completions": stored_completions(o),
            "prediction_routing": prediction_routing(o),
            "upload_to_batch": upload_to_batch(o, tmp),
            "anthropic_models": anthropic_models(),
        }
    print(json.dumps(report, indent=1))


main()
