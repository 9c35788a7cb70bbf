"""SamplingParams: invalid values raise a clear error that names the field."""

from __future__ import annotations

import math

import pytest

from engine.sampling_params import SamplingParams, SamplingParamsError


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"seed": -3}, "seed"),
        ({"seed": "x"}, "seed"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"stop": ["ok", ""]}, "stop"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
        ({"logprobs": 21}, "logprobs"),
        ({"logprobs": -1}, "logprobs"),
        ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
        ({"truncate_prompt_tokens": -1}, "truncate_prompt_tokens"),
        ({"truncate_prompt_tokens": 2**31}, "truncate_prompt_tokens"),
        ({"include_stop_str_in_output": 1}, "include_stop_str_in_output"),
        ({"skip_special_tokens": "no"}, "skip_special_tokens"),
    ],
)
def test_invalid_parameter_names_its_field(kwargs, field):
    with pytest.raises(SamplingParamsError) as info:
        SamplingParams(**kwargs)
    assert info.value.field == field
    assert str(info.value).startswith(field)


def test_defaults_and_normalisation():
    p = SamplingParams(temperature=0, stop="END", stop_token_ids=[5, 6])
    assert p.greedy
    assert p.stop == ("END",)
    assert p.stop_token_ids == (5, 6)
    assert not SamplingParams().greedy
    assert SamplingParams(logprobs=0).logprobs == 0
