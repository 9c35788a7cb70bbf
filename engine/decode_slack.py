"""How much delay each of a node's decoders can still absorb and meet its TPOT target, as the node reports it.

A decoder of ``n`` decode steps (``max_tokens - 1``) with a TPOT target ``T`` meets it when its last token comes at
most ``T * n`` after its first. ``e`` seconds after its first token, with ``k`` of its steps done and ``r = n - k``
left at a step of ``s`` seconds, it has

    slack = T * n - e - r * s

seconds to spare. A prefill chunk of ``c`` seconds sharing its steps delays each of them by at most ``c``, so a
delay of ``D`` seconds spread over its steps pushes it over the target when slack < min(D, r * c): never when
slack >= r * c (it absorbs any delay), and a decoder with slack < 0 misses already. The node counts the others by
their slack in milliseconds (engine/decode_bins.py): a prompt whose prefill delays this node's decodes from
``B`` to ``B + P`` seconds pushes over exactly those with B <= slack < B + P (controlplane/router/decode_steps.py;
RouterConfig.slo_tpot_harm_reported). A decoder without a target (``T`` 0) is not counted.

Approximations, by design: ``k`` counts the node's steps since the decoder's first token (a preempted or swapped
decoder did not step in all of them; a speculative step gives more than one token), and ``n`` assumes it runs to
``max_tokens`` (an end-of-sequence token ends it earlier, with more to spare).
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.decode_bins import NO_DECODERS, histogram


def slack_s(target_s: float, decode_steps: int, elapsed_s: float, steps_left: int, step_s: float) -> float:
    """A decoder's slack (module docstring): T * n - e - r * s."""
    return target_s * decode_steps - elapsed_s - steps_left * step_s


def slack_histogram(
    decoders: Iterable[tuple[float, int, int, float]],
    now_s: float,
    num_steps: int,
    step_s: float,
    chunk_s: float,
) -> tuple[int, ...]:
    """The decoders a delay can push over the target, counted by slack in milliseconds. ``decoders``: (time of the
    first token, the node's step count then, decode steps n, TPOT target T); ``num_steps``: the node's step count
    now; ``step_s``: its decode step; ``chunk_s``: the most one prefill chunk delays a step (inf: no bound).
    NO_DECODERS when the step is not measured (``step_s`` not > 0)."""
    if not step_s > 0.0:
        return NO_DECODERS
    counted = []
    for first_token_s, steps_then, decode_steps, target_s in decoders:
        left = decode_steps - (num_steps - steps_then)
        if target_s <= 0.0 or left <= 0:
            continue
        slack = slack_s(target_s, decode_steps, now_s - first_token_s, left, step_s)
        if 0.0 <= slack < left * chunk_s:  # an infinite chunk_s bounds nothing
            counted.append(slack * 1e3)
    return histogram(counted)
