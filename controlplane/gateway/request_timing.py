"""vLLM's per-request metrics (``--enable-per-request-metrics``): a reply's ``metrics`` object, from the phases the
node that finished the request measured (TokenChunk.timing). vLLM's fields and rules
(vllm/entrypoints/openai/engine/serving.py ``build_per_request_timing_metrics``):

    queue_time_ms           arrival at the engine → first scheduled
    time_to_first_token_ms  first scheduled → first token (the engine's prefill: the queue is not in it)
    generation_time_ms      first token → last token
    mean_itl_ms             generation_time / (tokens - 1), with 2 tokens or more
    tokens_per_second       tokens / (first scheduled → last token)

Each is null where the request did not get that far, or the node did not say (a peer's figure that is not a finite
number >= 0 is not taken). As vLLM's: only for a reply of one choice and one prompt (an ``n`` > 1 reply's times are
each choice's own, not the request's), on the whole object, or a stream's final usage chunk. A request resumed on
another node after its first one was lost: the last node's part.
"""

from __future__ import annotations

import math

from transport.messages import RequestTiming

FIELDS = ("time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second")


def per_request_metrics(timing: RequestTiming | None) -> dict[str, float | None]:
    out: dict[str, float | None] = dict.fromkeys(FIELDS)
    if timing is None:
        return out
    queue_s, prefill_s, decode_s = _seconds(timing.queue_s), _seconds(timing.prefill_s), _seconds(timing.decode_s)
    num_tokens = timing.num_output_tokens if isinstance(timing.num_output_tokens, int) else 0
    if queue_s is not None:
        out["queue_time_ms"] = queue_s * 1e3
    if prefill_s is not None:
        out["time_to_first_token_ms"] = prefill_s * 1e3
    if decode_s is not None:
        out["generation_time_ms"] = decode_s * 1e3
        if num_tokens > 1:
            out["mean_itl_ms"] = decode_s / (num_tokens - 1) * 1e3
    if prefill_s is not None and decode_s is not None and prefill_s + decode_s > 0 and num_tokens > 0:
        out["tokens_per_second"] = num_tokens / (prefill_s + decode_s)
    return out


def _seconds(value: float | None) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0 else None
