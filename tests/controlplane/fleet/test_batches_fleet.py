"""OpenAI's Batch API through the whole path with the real model: the official ``openai`` package uploads a JSONL
file and creates a batch → the gateway's runner sends each line through its route → the intake → a real agent
(SmolLM2 on the torch runner) → the output file. Each line's answer is the one the same request gets sent on its own
(greedy), and the batch's usage is the sum of theirs."""

from __future__ import annotations

import time

import msgspec
import openai
import pytest

from tests.controlplane.fleet.one_agent_gateway import check_over_http, smollm2_engine

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
QUESTIONS = ["What is the capital of France?", "Name a colour."]


async def test_a_chat_batch_through_the_fleet(controlplane, smollm2_model, smollm2_checkpoint):
    def check(base_url: str, model: str) -> None:
        with openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0, timeout=120) as client:
            bodies = [
                {"model": model, "messages": [{"role": "user", "content": q}], "max_tokens": 4, "temperature": 0}
                for q in QUESTIONS
            ]
            lines = [
                {"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions", "body": b}
                for i, b in enumerate(bodies)
            ]
            content = b"".join(msgspec.json.encode(line) + b"\n" for line in lines)
            upload = client.files.create(file=("questions.jsonl", content), purpose="batch")
            batch = client.batches.create(
                input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            deadline = time.monotonic() + 120  # a bounded wait for the batch to finish, not a timing check
            while batch.status not in ("completed", "failed", "expired", "cancelled") and time.monotonic() < deadline:
                time.sleep(0.05)
                batch = client.batches.retrieve(batch.id)
            assert batch.status == "completed" and batch.request_counts.completed == 2, batch
            output = [msgspec.json.decode(x) for x in client.files.content(batch.output_file_id).text.splitlines()]
            assert [line["custom_id"] for line in output] == ["q0", "q1"]
            alone = [client.chat.completions.create(**body) for body in bodies]
            for line, reply in zip(output, alone):
                answer = line["response"]["body"]["choices"][0]["message"]["content"]
                assert answer == reply.choices[0].message.content and answer
            assert batch.usage.input_tokens == sum(r.usage.prompt_tokens for r in alone)
            assert batch.usage.output_tokens == sum(r.usage.completion_tokens for r in alone)

    engine = smollm2_engine(smollm2_model, smollm2_checkpoint.tokenizer)
    await check_over_http(controlplane, smollm2_checkpoint.tokenizer, engine, check)
