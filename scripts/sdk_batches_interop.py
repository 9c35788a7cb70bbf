"""Interop: the official SDKs (this project's venv: openai, anthropic) against the zoo's gateway (`zoo up`, SmolLM2-135M
on CPU) for this stop's APIs:

- Anthropic's Message Batches (``client.messages.batches``: create, poll, list, results, delete; a cancelled one);
- OpenAI's ``client.responses.input_tokens.count`` beside the ``usage.input_tokens`` of the response the same body
  makes (plain, with a tool, continuing a previous response);
- OpenAI's Predicted Outputs (``prediction`` on a chat completion) on an agent that speculates (``speculative =
  "ngram"``): the same greedy answer with no prediction, with the answer itself predicted, and with a word of it
  changed, side by side in one run (wall time and the agent's prediction counters).

    cat > /tmp/zoo-spec.toml <<'TOML'
    [[agents]]
    node_id = "torch-spec"
    speculative = "ngram"
    TOML
    zoo up --config /tmp/zoo-spec.toml &                # the gateway on 127.0.0.1:8000
    python scripts/sdk_batches_interop.py [http://127.0.0.1:8000] > report.json

A check that the SDKs run against the gateway unchanged and agree with it, not a figure of the model.
"""

from __future__ import annotations

import json
import sys
import time

import anthropic
import httpx
import openai

BASE = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"
MODEL = "SmolLM2-135M-Instruct"


def _ask(custom_id: str, text: str, max_tokens: int = 16) -> dict:
    params = {"model": MODEL, "max_tokens": max_tokens, "messages": [{"role": "user", "content": text}]}
    return {"custom_id": custom_id, "params": params}


def _wait(client: anthropic.Anthropic, batch_id: str, limit_s: float = 300):
    deadline = time.monotonic() + limit_s
    while True:
        batch = client.messages.batches.retrieve(batch_id)
        if batch.processing_status == "ended" or time.monotonic() > deadline:
            return batch
        time.sleep(0.2)


def _result(r) -> dict:
    out = {"custom_id": r.custom_id, "type": r.result.type}
    if r.result.type == "succeeded":
        out["text"] = "".join(b.text for b in r.result.message.content)[:80]
    elif r.result.type == "errored":
        out["error"] = r.result.error.error.message[:120]
    return out


def message_batches(client: anthropic.Anthropic) -> dict:
    questions = ["What is the capital of France?", "Name a colour.", "What is 2 + 2?"]
    requests = [_ask(f"q{i}", q) for i, q in enumerate(questions)]
    bad = _ask("bad", "?")
    del bad["params"]["max_tokens"]  # refused by /v1/messages: an errored result
    t0 = time.monotonic()
    made = client.messages.batches.create(requests=[*requests, bad])
    done = _wait(client, made.id)
    report = {
        "id": made.id,
        "created": made.processing_status,
        "ended": done.processing_status,
        "request_counts": done.request_counts.model_dump(),
        "seconds": round(time.monotonic() - t0, 1),
        "results": [_result(r) for r in client.messages.batches.results(made.id)],
        "listed": made.id in [b.id for b in client.messages.batches.list(limit=10)],
    }
    report["deleted"] = client.messages.batches.delete(made.id).type
    try:
        client.messages.batches.retrieve(made.id)
        report["after_delete"] = "still there"
    except anthropic.NotFoundError:
        report["after_delete"] = "404"
    cancelled = client.messages.batches.create(requests=[_ask(f"l{i}", "Tell a story.", 256) for i in range(40)])
    time.sleep(1.0)
    client.messages.batches.cancel(cancelled.id)
    ended = _wait(client, cancelled.id)
    types = [r.result.type for r in client.messages.batches.results(cancelled.id)]
    report["cancelled"] = {
        "request_counts": ended.request_counts.model_dump(),
        "result_types": {t: types.count(t) for t in sorted(set(types))},
    }
    return report


def input_tokens(client: openai.OpenAI) -> dict:
    body = {"model": MODEL, "instructions": "Answer in one word.", "input": "What is the capital of France?"}
    weather = {
        "type": "function",
        "name": "get_weather",
        "description": "The weather now in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
    out: dict = {}
    for name, extra in (("plain", {}), ("with_a_tool", {"tools": [weather]})):
        counted = client.responses.input_tokens.count(**body, **extra)
        response = client.responses.create(**body, **extra, max_output_tokens=8, temperature=0)
        out[name] = {"counted": counted.input_tokens, "response_usage": response.usage.input_tokens}
        if name == "plain":
            follow = {"model": MODEL, "previous_response_id": response.id, "input": "And of Spain?"}
            counted = client.responses.input_tokens.count(**follow)
            went_on = client.responses.create(**follow, max_output_tokens=8, temperature=0)
            out["previous_response_id"] = {
                "counted": counted.input_tokens,
                "response_usage": went_on.usage.input_tokens,
            }
    out["all_equal"] = all(v["counted"] == v["response_usage"] for v in out.values())
    return out


def _prediction_counters() -> dict[str, float]:
    """The agents' zoo:spec_decode_prediction_* counters, summed (their /metrics, found at /metrics/targets)."""
    totals: dict[str, float] = {}
    for group in httpx.get(f"{BASE}/metrics/targets", timeout=30).json():
        for target in group.get("targets", []):
            text = httpx.get(f"http://{target}/metrics", timeout=30).text
            for line in text.splitlines():
                if line.startswith("zoo:spec_decode_prediction_"):
                    name = line.split("{")[0]
                    totals[name] = totals.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return totals


def predicted_outputs(client: openai.OpenAI) -> dict:
    code = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n"
    messages = [{"role": "user", "content": f"Repeat this code exactly:\n{code}"}]

    def ask(prediction: str | None) -> tuple[str, float]:
        extra = {} if prediction is None else {"prediction": {"type": "content", "content": prediction}}
        t0 = time.monotonic()
        reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=96, temperature=0, **extra)
        return reply.choices[0].message.content, time.monotonic() - t0

    ask(None)  # warm: the prompt's blocks cached for every run below
    before = _prediction_counters()
    runs: dict[str, list[float]] = {"none": [], "exact": [], "edited": []}
    texts: dict[str, str] = {}
    answer = ask(None)[0]
    edited = answer.replace("sub", "minus", 1) if "sub" in answer else answer[: len(answer) // 2] + "#" + answer[1:]
    for _ in range(3):  # interleaved: the same host load for each
        for name, prediction in (("none", None), ("exact", answer), ("edited", edited)):
            text, seconds = ask(prediction)
            runs[name].append(round(seconds, 3))
            texts[name] = text
    after = _prediction_counters()
    best = {name: min(s) for name, s in runs.items()}
    return {
        "answer_chars": len(answer),
        "same_output": texts["none"] == texts["exact"] == texts["edited"] == answer,
        "seconds": runs,
        "speedup_exact": round(best["none"] / best["exact"], 2),
        "speedup_edited": round(best["none"] / best["edited"], 2),
        "agent_counters_during": {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after},
    }


def main() -> None:
    with (
        anthropic.Anthropic(base_url=BASE, api_key="x", max_retries=0, timeout=120) as a,
        openai.OpenAI(base_url=f"{BASE}/v1", api_key="x", max_retries=0, timeout=120) as o,
    ):
        report = {
            "sdks": {"anthropic": anthropic.__version__, "openai": openai.__version__},
            "predicted_outputs": predicted_outputs(o),
            "responses_input_tokens": input_tokens(o),
            "message_batches": message_batches(a),
        }
    print(json.dumps(report, indent=1))


main()
