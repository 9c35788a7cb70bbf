"""SamplingParams ⇄ the wire's ``Sampling`` struct, both directions in one place."""

from __future__ import annotations

from controlplane.engine.sampling_params import SamplingParams
from transport.messages import Sampling


def sampling_params_from_wire(s: Sampling) -> SamplingParams:
    """Validates on the way in: raises SamplingParamsError naming the bad field."""
    return SamplingParams(
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=s.top_k,
        seed=s.seed,
        max_tokens=s.max_tokens,
        stop=tuple(s.stop),
        stop_token_ids=tuple(s.stop_token_ids),
        ignore_eos=s.ignore_eos,
        logprobs=s.logprobs,
    )


def sampling_to_wire(params: SamplingParams) -> Sampling:
    return Sampling(
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k,
        seed=params.seed,
        max_tokens=params.max_tokens,
        stop=list(params.stop),
        stop_token_ids=list(params.stop_token_ids),
        ignore_eos=params.ignore_eos,
        logprobs=params.logprobs,
    )
