"""Sleep mode for model runners, after vLLM's (docs/features/sleep_mode.md in vllm-project/vllm): a node that
stays up but gives its accelerator memory back, e.g. to let another model or an RL trainer use the GPU.

    level 1   the KV cache is discarded; the weights move to host RAM (already there on a CPU device)
    level 2   the KV cache and the weights are both discarded; the weights are reloaded from their source at wake

``wake_up(tags)`` restores a subset: "weights" and/or "kv_cache", so a caller can reload the weights, update them
(RL weight sync) and only then allocate the KV cache. The KV cache needs the weights awake first: the decode kernel
and CUDA graphs bind to both. The KV cache comes back empty, never with its old contents, so the caller must treat
every block as free (and a prefix cache as reset) after a sleep.

``SleepVerbs`` is the state machine every runner shares; a runner supplies the four hooks that free and restore
its own tensors. The state is two sets of tags, so partial wakes are exact::

    awake --sleep(n)--> level n, {weights, kv_cache} asleep --wake_up(("weights",))--> level n, {kv_cache} asleep
          <------------------------ wake_up(("kv_cache",)) -------------------------/   (level 0 once none asleep)
"""

from __future__ import annotations

from engine.sleep_mode import SLEEP_LEVELS, WAKE_TAGS, check_level, check_tags

__all__ = ["SLEEP_LEVELS", "WAKE_TAGS", "SleepVerbs", "check_sleep", "check_tags"]


def check_sleep(level: int, current: int = 0) -> None:
    """ValueError unless ``level`` is a sleep level (engine/sleep_mode.py's rule) no shallower than ``current`` (0 =
    awake): a runner asleep at level 2 has discarded its weights, which level 1 would have kept."""
    check_level(level)
    if level < current:
        raise ValueError(f"already asleep at level {current}: cannot sleep at the shallower level {level}")


class SleepVerbs:
    """``sleep`` / ``wake_up`` / ``sleep_level``, the same for every runner. The runner implements:

    ``_check_sleep_supported(level)``  RuntimeError when it cannot sleep at that level (the message says why)
    ``_sleep_kv() -> int``             drop the KV cache; its device bytes (0 when there was none)
    ``_sleep_weights(level) -> int``   level 1: weights off the device; 2: dropped; the device bytes freed
    ``_wake_weights()``                weights back on the device (moved back, or reloaded)
    ``_wake_kv()``                     the KV cache re-allocated as its last ``initialize_kv_cache`` did
    """

    _sleep_level: int = 0
    _asleep: frozenset[str] = frozenset()  # tags freed and not yet woken

    @property
    def sleep_level(self) -> int:
        """0 awake, else the level of the last ``sleep``, until every tag is awake again."""
        return self._sleep_level

    def sleep(self, level: int) -> int:
        """Free the KV cache (and at level 2 the weights; at level 1 move them to host RAM). Returns the bytes freed
        on the device. ValueError for a level not in ``SLEEP_LEVELS`` or shallower than the current one;
        RuntimeError where this runner cannot. Sleeping again at the same level frees what a partial wake restored."""
        check_sleep(level, self._sleep_level)
        self._check_sleep_supported(level)
        freed = self._sleep_kv()
        # recorded tag by tag: should the weights fail to move, the state still says the KV cache is gone
        self._sleep_level, self._asleep = level, self._asleep | {"kv_cache"}
        freed += self._sleep_weights(level)
        self._asleep = frozenset(WAKE_TAGS)
        return freed

    def wake_up(self, tags: tuple[str, ...] = WAKE_TAGS) -> None:
        """Restore what ``sleep`` freed, for these tags ("weights", "kv_cache"; none named = both); waking what is
        awake is a no-op. ValueError for an unknown tag, or for "kv_cache" while the weights sleep and are not woken
        with it."""
        tags = check_tags(tags)
        if "kv_cache" in tags and "kv_cache" in self._asleep and "weights" in self._asleep and "weights" not in tags:
            raise ValueError('wake_up("kv_cache") needs the weights awake: wake "weights" first or with it')
        for tag in tags:
            if tag not in self._asleep:
                continue
            if tag == "weights":
                self._wake_weights()
            else:
                self._wake_kv()
            self._asleep = self._asleep - {tag}
        if not self._asleep:
            self._sleep_level = 0

    def _check_awake(self) -> None:
        """RuntimeError when a step would need what sleeps (called at the top of ``execute``)."""
        if self._asleep:
            raise RuntimeError(f"this runner is asleep (level {self._sleep_level}): wake_up() first")

    def _check_sleep_supported(self, level: int) -> None:
        """Every level, by default."""

    def _sleep_kv(self) -> int:
        raise NotImplementedError

    def _sleep_weights(self, level: int) -> int:
        raise NotImplementedError

    def _wake_weights(self) -> None:
        raise NotImplementedError

    def _wake_kv(self) -> None:
        raise NotImplementedError
