"""`make demo`: a local zoo (control plane + a torch and a JAX agent serving SmolLM2-135M-Instruct),
a chat question through the OpenAI endpoint (then the same answer constrained to a JSON schema, a tool call,
three sentences' embeddings compared, a batch of questions run through OpenAI's Batch API, a background
response of the Responses API, polled, and a conversation continued), the first
question's trace (OpenTelemetry: both processes send their spans to a collector the demo runs on loopback),
a short load through the ZeroMQ client library, and a per-node latency table as the client saw it. Everything is
shut down at the end."""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from pathlib import Path

import anyio

from bench.stats import format_table, percentile
from bench.workload import LengthScale, sample_lengths, synthetic_prompt_ids
from observe.otlp_receiver import OtlpReceiver
from zoo.up import LocalZoo, ZooStartError
from zoo.up_config import load_up_config

QUESTION = "What is the capital of France?"
MODEL = "SmolLM2-135M-Instruct"
BATCH_QUESTIONS = ["What is the capital of Italy?", "What is the capital of Japan?"]
BATCH_WAIT_S = 120.0
SENTENCES = ["The cat sat on the mat.", "A kitten was sleeping on the rug.", "Quarterly revenue grew by five percent."]
RERANK_QUERY = "Where is the cat?"
NUM_LOAD_REQUESTS = 24
LOAD_CONCURRENCY = 8
LOAD_BUDGET_S = 60.0
CLIENT_ENDPOINT = "tcp://127.0.0.1:5556"
VOCAB_SIZE = 49152
TRACE_ID, CALLER_SPAN_ID = 0x5A00D3E0, 0xD3E0  # the demo's own trace: its first question's spans join it
TRACE_WAIT_S = 15.0
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"capital": {"type": "string", "maxLength": 20}, "country": {"type": "string", "maxLength": 20}},
    "required": ["capital", "country"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather now in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def run_demo(args: argparse.Namespace) -> int:
    config = load_up_config(Path(args.config) if getattr(args, "config", None) else None)
    log_dir = Path(".cache") / "zoo-demo" / time.strftime("%Y%m%d-%H%M%S")
    print(f"== starting a local zoo: control plane + {', '.join(a.node_id for a in config.agents)} (logs: {log_dir})")
    traces = OtlpReceiver(max_spans=10_000).start()  # every process's spans (--otlp-traces-endpoint)
    config.controlplane_options.setdefault("otlp_traces_endpoint", traces.endpoint)
    for agent in config.agents:
        agent.options.setdefault("otlp_traces_endpoint", traces.endpoint)
    try:
        with LocalZoo(config, log_dir) as zoo:
            print(zoo.describe())
            _chat(config.base_url, traces)
            _load()
            print("\n== shutting down")
    except ZooStartError as e:
        print(f"zoo demo: {e}")
        return 1
    finally:
        traces.close()
    return 0


def _chat(base_url: str, traces: OtlpReceiver) -> None:
    print(f"\n== 1. chat through the OpenAI endpoint: {QUESTION}")
    traceparent = f"00-{TRACE_ID:032x}-{CALLER_SPAN_ID:016x}-01"
    reply = _post_chat(base_url, QUESTION, {"max_tokens": 24}, headers={"traceparent": traceparent})
    print(reply["choices"][0]["message"]["content"])
    print(f"[usage: {reply['usage']}; system_fingerprint {reply.get('system_fingerprint')}: the serving node's setup]")
    _trace(traces)
    print("   the same, its answer constrained to a JSON schema (response_format json_schema):")
    fmt = {"type": "json_schema", "json_schema": {"name": "capital", "schema": ANSWER_SCHEMA}}
    reply = _post_chat(base_url, f"{QUESTION} Answer in JSON.", {"max_tokens": 48, "response_format": fmt})
    print(reply["choices"][0]["message"]["content"])
    print("   a tool call (tools, tool_choice required, parallel_tool_calls false): What is the weather in Paris?")
    extra = {"max_tokens": 48, "tools": [WEATHER_TOOL], "tool_choice": "required", "parallel_tool_calls": False}
    choice = _post_chat(base_url, "What is the weather in Paris?", extra)["choices"][0]
    for call in choice["message"].get("tool_calls") or ():
        print(
            f"{call['function']['name']}({call['function']['arguments']})  [finish_reason: {choice['finish_reason']}]"
        )
    if not choice["message"].get("tool_calls"):
        print(f"(no call: {choice['message']['content']!r}, finish_reason {choice['finish_reason']})")
    print("   embeddings (/v1/embeddings, the last token's final hidden state, normalised): cosine similarities")
    vectors = [d["embedding"] for d in _post(base_url, "/v1/embeddings", {"input": SENTENCES})["data"]]
    for i, j in ((0, 1), (0, 2)):
        cosine = sum(a * b for a, b in zip(vectors[i], vectors[j]))
        print(f"{cosine:.3f}  {SENTENCES[i]!r} ~ {SENTENCES[j]!r}")
    print(
        f"   rerank (vLLM's /v1/rerank: the same embeddings' cosine similarities): the sentences for {RERANK_QUERY!r}"
    )
    for result in _post(base_url, "/v1/rerank", {"query": RERANK_QUERY, "documents": SENTENCES})["results"]:
        print(f"{result['relevance_score']:.3f}  {result['document']['text']!r}")
    _batch(base_url)
    _background(base_url)
    _conversation(base_url)


def _conversation(base_url: str) -> None:
    """A conversation (OpenAI's Conversations API): made with a first message, a response continuing it, its items."""
    import httpx

    print("   a conversation (/v1/conversations: a response naming it continues it and adds its items to it):")
    with httpx.Client(base_url=base_url, timeout=60) as http:
        made = http.post("/v1/conversations", json={"items": [{"role": "user", "content": "My name is Ada."}]})
        conversation = made.json()["id"]
        body = {"model": MODEL, "input": "What is my name?", "conversation": conversation, "temperature": 0}
        response = http.post("/v1/responses", json={**body, "max_output_tokens": 16}).json()
        items = http.get(f"/v1/conversations/{conversation}/items", params={"order": "asc"}).json()["data"]
    for item in items:
        text = "".join(part["text"] for part in item["content"])
        print(f"{item['role']:>9}: {text!r}")
    print(f"[{conversation}: {len(items)} items after {response['id']}]")


def _background(base_url: str) -> None:
    """A background response (the Responses API's ``background: true``): answered queued at once, polled, read."""
    import httpx

    print(f"   a background response (/v1/responses, background: true: answered at once, then polled): {QUESTION}")
    body = {"model": MODEL, "input": QUESTION, "background": True, "max_output_tokens": 16, "temperature": 0}
    with httpx.Client(base_url=base_url, timeout=60) as http:
        response = http.post("/v1/responses", json=body).json()
        first = response["status"]
        deadline = time.monotonic() + BATCH_WAIT_S
        while response["status"] in ("queued", "in_progress") and time.monotonic() < deadline:
            time.sleep(0.1)
            response = http.get(f"/v1/responses/{response['id']}").json()
    text = "".join(p["text"] for item in response["output"] if item["type"] == "message" for p in item["content"])
    print(f"[{response['id']}: {first}, then {response['status']}] {text!r}")


def _batch(base_url: str) -> None:
    """A JSONL file of chat requests uploaded (/v1/files), run as a batch (/v1/batches), polled, its output read."""
    import httpx

    print("   a batch (OpenAI's Batch API: a JSONL file uploaded, run in the background, its output file read):")
    lines = [
        {
            "custom_id": f"q{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": MODEL, "messages": [{"role": "user", "content": q}], "max_tokens": 16, "temperature": 0},
        }
        for i, q in enumerate(BATCH_QUESTIONS)
    ]
    content = "".join(json.dumps(line) + "\n" for line in lines).encode()
    with httpx.Client(base_url=base_url, timeout=60) as http:
        upload = http.post("/v1/files", files={"file": ("questions.jsonl", content)}, data={"purpose": "batch"})
        body = {"input_file_id": upload.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
        batch = http.post("/v1/batches", json=body).json()
        deadline = time.monotonic() + BATCH_WAIT_S
        while batch["status"] not in ("completed", "failed", "expired", "cancelled") and time.monotonic() < deadline:
            time.sleep(0.2)
            batch = http.get(f"/v1/batches/{batch['id']}").json()
        counts = batch["request_counts"]
        print(f"[{batch['id']}: {batch['status']}, {counts['completed']} of {counts['total']} answered]")
        if batch.get("output_file_id"):
            for line in http.get(f"/v1/files/{batch['output_file_id']}/content").text.splitlines():
                out = json.loads(line)
                answer = out["response"]["body"]["choices"][0]["message"]["content"]
                question = BATCH_QUESTIONS[int(out["custom_id"][1:])]
                print(f"{out['custom_id']}  {question} -> {answer!r}")


def _trace(traces: OtlpReceiver) -> None:
    """The first question's trace: the gateway's HTTP span, the control plane's request span under it and, under
    that, the serving node's."""
    print("   its trace (the spans the control plane and the agent sent to the demo's OpenTelemetry collector):")
    http = "POST /v1/chat/completions"

    def both(spans: list[dict]) -> bool:
        return {s["name"] for s in spans if s["trace_id"] == TRACE_ID} >= {http, "llm_request", "node_request"}

    try:
        spans = {s["name"]: s for s in traces.wait_for(both, TRACE_WAIT_S) if s["trace_id"] == TRACE_ID}
    except TimeoutError:
        print(f"(no trace within {TRACE_WAIT_S:.0f} s)")
        return
    top, node = spans["llm_request"]["attributes"], spans["node_request"]["attributes"]
    ms = {k: 1e3 * v for k, v in {**top, **node}.items() if k.startswith(("gen_ai.latency.", "zoo.latency."))}
    reply = spans[http]
    print(
        f"{http}  ({reply['service']})  HTTP {reply['attributes'].get('http.response.status_code')}, "
        f"{(reply['end_ns'] - reply['start_ns']) / 1e6:.0f} ms"
    )
    print(
        f"  llm_request   ({spans['llm_request']['service']})  node {top.get('zoo.node_id')}, routing "
        f"{ms.get('zoo.latency.routing', 0):.1f} ms, TTFT {ms.get('gen_ai.latency.time_to_first_token', 0):.0f} ms, "
        f"end to end {ms.get('gen_ai.latency.e2e', 0):.0f} ms"
    )
    print(
        f"    node_request  ({spans['node_request']['service']})  queue {ms.get('gen_ai.latency.time_in_queue', 0):.1f}"
        f" ms, prefill {ms.get('gen_ai.latency.time_in_model_prefill', 0):.0f} ms, decode "
        f"{ms.get('gen_ai.latency.time_in_model_decode', 0):.0f} ms for {node.get('gen_ai.usage.completion_tokens')}"
        " tokens"
    )


def _post_chat(base_url: str, question: str, extra: dict, headers: dict | None = None) -> dict:
    body = {"messages": [{"role": "user", "content": question}], "temperature": 0, **extra}
    return _post(base_url, "/v1/chat/completions", body, headers)


def _post(base_url: str, path: str, body: dict, headers: dict | None = None) -> dict:
    body = {"model": MODEL, **body}
    req = urllib.request.Request(
        f"{base_url}{path}",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def _load() -> None:
    scale = LengthScale(prompt_div=8, output_div=8, max_prompt=192, max_output=24)
    lengths = sample_lengths(NUM_LOAD_REQUESTS, scale, seed=2)
    print(
        f"\n== 2. load through the ZeroMQ client library: {NUM_LOAD_REQUESTS} requests, {LOAD_CONCURRENCY} at a time, "
        f"lengths from the Azure conversation trace ({scale.describe()}), at most {LOAD_BUDGET_S:.0f} s"
    )
    records = anyio.run(_drive, lengths)
    by_node: dict[str, list[dict]] = {}
    for r in records:
        by_node.setdefault(r["node"], []).append(r)
    rows = []
    for node, rs in sorted(by_node.items()):
        ttft = [r["ttft_ms"] for r in rs]
        tpot = [r["tpot_ms"] for r in rs if r["tpot_ms"] is not None]
        rows.append(
            [node, len(rs), percentile(ttft, 50), percentile(ttft, 99), percentile(tpot, 50), percentile(tpot, 99)]
        )
    print(format_table(["node", "requests", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms"], rows))
    failed = NUM_LOAD_REQUESTS - len(records)
    if failed:
        print(f"{failed} requests did not finish within the budget or failed")


async def _drive(lengths: list[tuple[int, int]]) -> list[dict]:
    from client import AsyncZooClient, ZooError

    records: list[dict] = []
    limiter = anyio.Semaphore(LOAD_CONCURRENCY)

    async def one(i: int, prompt_len: int, max_tokens: int) -> None:
        async with limiter:
            t0 = time.monotonic()
            first = last = None
            n = 0
            node = "?"
            try:
                stream = await client.generate(
                    prompt_token_ids=synthetic_prompt_ids(prompt_len, VOCAB_SIZE, seed=i),
                    max_tokens=max_tokens, temperature=0, ignore_eos=True, stream=True,
                )  # fmt: skip
                async with stream:
                    async for chunk in stream:
                        now = time.monotonic()
                        if chunk.token_ids:
                            first = first or now
                            last = now
                            n += len(chunk.token_ids)
                        node = chunk.node_id or node
            except ZooError as e:
                print(f"request {i}: {e}")
                return
            if first is not None:
                tpot = (last - first) / (n - 1) * 1e3 if n > 1 else None
                records.append({"node": node, "ttft_ms": (first - t0) * 1e3, "tpot_ms": tpot})

    async with AsyncZooClient(CLIENT_ENDPOINT, timeout_s=LOAD_BUDGET_S) as client:
        with anyio.move_on_after(LOAD_BUDGET_S):
            async with anyio.create_task_group() as tg:
                for i, (p, o) in enumerate(lengths):
                    tg.start_soon(one, i, p, o)
    return records
