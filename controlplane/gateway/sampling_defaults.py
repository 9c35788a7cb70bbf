"""The server's default sampling parameters: what a request that leaves a parameter out gets, from the model's
``generation_config.json`` and ``--override-generation-config`` (vLLM's ``--generation-config`` and its rule). Sans-IO.

vLLM reads six keys of a model's generation config (``ModelConfig.get_diff_sampling_param``): ``temperature``,
``top_p``, ``top_k``, ``min_p``, ``repetition_penalty``, and ``max_new_tokens``, which becomes the default
``max_tokens`` of a request without one (a chat's, a response's: a completion's has OpenAI's default of 16, which vLLM
keeps). A request's own value always wins; a field it leaves out (``null`` or absent) gets the default, on every
generating route: chat completions, completions, responses and Anthropic's messages. The override's keys are the same
six; another is refused at start, as is a value the sampling parameters refuse.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from engine.sampling_params import SamplingParams, SamplingParamsError

GENERATION_CONFIG_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_new_tokens")
_FIELDS = {key: "max_tokens" if key == "max_new_tokens" else key for key in GENERATION_CONFIG_KEYS}
DEFAULT_FIELDS = frozenset(_FIELDS.values())  # the SamplingParams fields a default may set
_MISSING = object()


def sampling_defaults(generation_config: Mapping, override: Mapping) -> dict[str, float | int]:
    """The defaults, by SamplingParams field: the generation config's six keys, the override's over them; ValueError
    naming an unknown override key or a value the sampling parameters refuse."""
    unknown = sorted(set(override) - set(GENERATION_CONFIG_KEYS))
    if unknown:
        raise ValueError(f"unknown keys {unknown}: the defaults are {list(GENERATION_CONFIG_KEYS)}")
    merged = {key: value for key, value in {**generation_config, **override}.items() if key in _FIELDS}
    defaults = {_FIELDS[key]: value for key, value in merged.items() if value is not None}
    for name, value in defaults.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        SamplingParams(**defaults)
    except (SamplingParamsError, TypeError) as exc:
        raise ValueError(str(exc)) from None
    return defaults


def with_sampling_defaults(request, defaults: Mapping[str, float | int] | None):
    """``request`` (a decoded request struct) with the fields it left out (None) set to ``defaults`` (not
    ``max_tokens``: each route has its own default, given where it is parsed)."""
    if not defaults:
        return request
    changes = {
        name: value
        for name, value in defaults.items()
        if name != "max_tokens" and getattr(request, name, _MISSING) is None
    }
    return msgspec.structs.replace(request, **changes) if changes else request
