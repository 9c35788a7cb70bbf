"""What LLMEngine hands back per request and step (RequestOutput), and each request's time stamps (RequestMetrics)."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.batch import TokenLogprob
from engine.request import FinishReason


@dataclass(slots=True)
class RequestMetrics:
    """Time stamps (seconds, engine clock) of one request, and the latencies derived from them."""

    arrival_time_s: float
    first_scheduled_time_s: float | None = None
    first_token_time_s: float | None = None
    last_token_time_s: float | None = None
    finished_time_s: float | None = None
    num_output_tokens: int = 0
    num_cached_prompt_tokens: int = 0  # set when the request finishes
    num_preemptions: int = 0  # set when the request finishes
    max_tokens: int = 0  # its sampling params' max_tokens, set when the request finishes (vLLM's max_tokens_param)

    @property
    def queue_time_s(self) -> float | None:
        return None if self.first_scheduled_time_s is None else self.first_scheduled_time_s - self.arrival_time_s

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_time_s is None else self.first_token_time_s - self.arrival_time_s

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first."""
        if self.num_output_tokens < 2 or self.first_token_time_s is None or self.last_token_time_s is None:
            return None
        return (self.last_token_time_s - self.first_token_time_s) / (self.num_output_tokens - 1)

    @property
    def e2e_s(self) -> float | None:
        return None if self.finished_time_s is None else self.finished_time_s - self.arrival_time_s

    # vLLM's request phases (vllm/v1/metrics/stats.py, update_from_finished_request): each only when the request got
    # that far (a request that never sampled a token has a queue time and none of these); preemptions in a phase count
    @property
    def prefill_time_s(self) -> float | None:
        """First scheduled → first token."""
        if self.first_scheduled_time_s is None or self.first_token_time_s is None:
            return None
        return self.first_token_time_s - self.first_scheduled_time_s

    @property
    def decode_time_s(self) -> float | None:
        """First token → last token."""
        if self.first_token_time_s is None or self.last_token_time_s is None:
            return None
        return self.last_token_time_s - self.first_token_time_s

    @property
    def inference_time_s(self) -> float | None:
        """First scheduled → last token (vLLM's RUNNING phase)."""
        if self.first_scheduled_time_s is None or self.last_token_time_s is None:
            return None
        return self.last_token_time_s - self.first_scheduled_time_s


@dataclass(slots=True)
class RequestOutput:
    """What one step produced for one request (deltas) plus its running totals."""

    req_id: str
    new_text: str
    text: str
    new_token_ids: list[int]
    num_prompt_tokens: int
    num_output_tokens: int
    finished: bool
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None
    new_logprobs: list[TokenLogprob] = field(default_factory=list)
    metrics: RequestMetrics | None = None
    num_cached_tokens: int = 0  # prompt tokens the prefix cache served at its first admission
    # every prompt position's score (position 0's logprob None), once, in its first output, when its params ask
    prompt_logprobs: list[TokenLogprob] | None = None
    embedding: list[float] | None = None  # the prompt's, in the output of the step that computed it (embeddings.py)
    # a predicted output's tokens accepted as drafts so far, and the rest of them (OpenAI's usage: engine/spec/)
    num_prediction_accepted_tokens: int = 0
    num_prediction_rejected_tokens: int = 0
