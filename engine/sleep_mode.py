"""vLLM's sleep mode for one engine: its KV cache given back to the device (level 1, the weights then wait in host
RAM), or its KV cache and its weights both (level 2, the weights reloaded from the checkpoint at wake), until it is
woken; the prefix cache's bookkeeping is forgotten with the KV bytes it named.

vLLM (docs/features/sleep_mode.md; ``sleep``/``wake_up`` of vllm/v1/engine/async_llm.py) frees a GPU this way between
RL rollouts, or while a node is not needed, without stopping its server: its process, its compiled kernels, its
tokenizer stay. Each backend's runner does the freeing (``sleep(level)``/``wake_up(tags)``, backends/*/runner.py);
here is the engine's half, the rules both share:

    put_to_sleep(engine, level) ─► device bytes freed   only with no request in the engine (vLLM's "abort" mode
                                                        aborts them first; "wait" waits until they are done: the
                                                        agent does either, agent/node_sleep.py)
    wake(engine, tags)          ─► the level after      "weights" and/or "kv_cache" (every one when none is named);
                                                        the KV comes back empty, so every prompt is computed anew
"""

from __future__ import annotations

from engine.kv.block_pool import Tier

SLEEP_LEVELS = (1, 2)  # 1: KV discarded, weights to host RAM; 2: both discarded (vLLM's levels)
WAKE_TAGS = ("weights", "kv_cache")  # what a wake_up restores (vLLM's tags), in wake order
# "abort": the requests in flight are aborted first (vLLM's default); "wait": it sleeps once they are done. vLLM's
# third, "keep" (requests frozen in place while asleep), is not taken: their KV is discarded by the sleep anyway, and a
# fleet has other nodes to finish them on (controlplane/node_sleeps.py)
SLEEP_MODES = ("abort", "wait")


class SleepModeError(ValueError):
    """A sleep or wake that cannot be done as asked; the message says why."""


def check_level(level: int) -> int:
    if type(level) is not int or level not in SLEEP_LEVELS:
        raise SleepModeError(f"sleep level must be 1 or 2, got {level!r}")
    return level


def check_tags(tags) -> tuple[str, ...]:
    """The tags to wake, in WAKE_TAGS' order: weights first, since the KV cache's kernels bind to them (every one when
    ``tags`` is empty or None, as vLLM's ``wake_up(tags=None)``); a bare string is refused (``("weights",)``, not
    ``"weights"``)."""
    if isinstance(tags, str):
        raise SleepModeError(f"tags must be a list of tags, not the string {tags[:64]!r}")
    tags = tuple(tags or ())
    unknown = [tag for tag in tags if tag not in WAKE_TAGS]
    if unknown:
        raise SleepModeError(f"unknown wake_up tag {str(unknown[0])[:64]!r}: the tags are {', '.join(WAKE_TAGS)}")
    return tuple(tag for tag in WAKE_TAGS if not tags or tag in tags)


def sleeps(runner) -> bool:
    """Whether ``runner``'s backend has a sleep mode."""
    return callable(getattr(runner, "sleep", None)) and callable(getattr(runner, "wake_up", None))


def sleep_level(engine) -> int:
    """0 awake; else the level its runner sleeps at (one woken in part still reports it)."""
    return getattr(engine.runner, "sleep_level", 0) if sleeps(engine.runner) else 0


def put_to_sleep(engine, level: int) -> int:
    """Free ``engine``'s KV cache (and at level 2 its weights); the device bytes freed. Refused (SleepModeError)
    while a request is in the engine, or by a backend without a sleep mode. Asleep at ``level`` already: the runner
    frees again only what a partial wake brought back (backends/sleep_levels.py), else 0."""
    check_level(level)
    runner = engine.runner
    if not sleeps(runner):
        raise SleepModeError(f"this node's backend ({type(runner).__name__}) has no sleep mode")
    if engine.has_unfinished_requests():
        raise SleepModeError("requests are in flight here: abort them first, or wait until they are done")
    manager = engine.scheduler.kv_cache_manager
    for tier in (Tier.DEVICE, Tier.HOST):  # the tiers whose bytes the runner holds (a remote tier's stay where they
        if tier in manager.tiers and manager.pool(tier).reset_prefix_cache() is None:  # are)
            raise SleepModeError(f"KV blocks of the {tier.value} tier are still in use")
    try:
        return int(runner.sleep(level))
    except (ValueError, RuntimeError) as e:
        raise SleepModeError(str(e)) from e


def wake(engine, tags=()) -> int:
    """Restore what sleep freed (``tags``: WAKE_TAGS' names, every one when empty); the level after (0: awake)."""
    wanted = check_tags(tags)
    if not sleeps(engine.runner):
        raise SleepModeError(f"this node's backend ({type(engine.runner).__name__}) has no sleep mode")
    try:
        engine.runner.wake_up(wanted)
    except (ValueError, RuntimeError) as e:
        raise SleepModeError(str(e)) from e
    return sleep_level(engine)
