"""What stream obfuscation (controlplane/gateway/stream_obfuscation.py) costs per streamed event, beside the plain
event in the same run: CPU to encode, bytes on the wire; and what it hides: the distinct event sizes of tokens 1..16
characters long, with and without it.

    PYTHONPATH=. python scripts/stream_obfuscation_cost.py > bench/results/<date>-stream-obfuscation.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from controlplane.gateway.sse import data_event, obfuscated_event

ROUNDS, EVENTS = 7, 20_000


def chunk(text: str) -> dict:
    """A chat stream's token event as the gateway writes it (openai_reply.py), ids of their usual lengths."""
    return {
        "id": "chatcmpl-3b6f2c9a1e7d4c0b9a8f6e5d", "object": "chat.completion.chunk", "created": 1765000000,
        "model": "SmolLM2-135M-Instruct", "system_fingerprint": "zoo-torch-cpu-3f2a9c1e",
        "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}],
    }  # fmt: skip


def per_event_us(encode, obj: dict) -> float:
    start = time.perf_counter()
    for _ in range(EVENTS):
        encode(obj)
    return (time.perf_counter() - start) / EVENTS * 1e6


def main() -> int:
    obj = chunk(" the")
    plain, padded = [], []
    for _ in range(ROUNDS):  # alternated, so both see the same host
        plain.append(per_event_us(data_event, obj))
        padded.append(per_event_us(obfuscated_event, obj))
    tokens = ["x" * n for n in range(1, 17)]
    sizes_plain = sorted({len(data_event(chunk(t))) for t in tokens})
    sizes_padded = sorted({len(obfuscated_event(chunk(t))) for t in tokens})
    extra = [len(obfuscated_event(chunk(t))) - len(data_event(chunk(t))) for t in tokens]
    json.dump(
        {
            "date": time.strftime("%Y-%m-%d"),
            "what": "one chat stream token event: encode time (median of rounds, alternated) and bytes, plain vs "
            "obfuscated; the distinct event sizes of tokens of 1..16 characters",
            "command": "PYTHONPATH=. python scripts/stream_obfuscation_cost.py",
            "encode_us_median": {
                "plain": round(statistics.median(plain), 2),
                "obfuscated": round(statistics.median(padded), 2),
            },
            "encode_us_rounds": {"plain": [round(x, 2) for x in plain], "obfuscated": [round(x, 2) for x in padded]},
            "extra_bytes_per_event": {"mean": round(statistics.mean(extra), 1), "max": max(extra)},
            "distinct_sizes_of_16_token_lengths": {"plain": len(sizes_plain), "obfuscated": len(sizes_padded)},
        },
        sys.stdout,
        indent=1,
    )
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
