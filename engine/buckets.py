"""Static shapes shared by both backends: the bucket sizes every variable dimension of a step rounds up to.

A compiled program (an XLA program in the JAX runner, a captured CUDA graph in the torch runner) has
fixed shapes, so every variable size of a step is rounded up to a bucket and the inputs padded: a
steady stream of decode steps then reuses a handful of programs::

    decode program   (batch bucket, context-block bucket)        e.g. (32, 16)
    chunk program    (token bucket, key-block bucket, sample-row bucket)
    sampler          (row bucket)                                shared by both programs' outputs
    block moves      (power of two >= number of blocks moved)

Past the last listed bucket a size grows in powers of two, so any size runs (at the cost of one
compile, or one more graph, per new power of two). Pure Python (engine/ imports no framework).
"""

from __future__ import annotations

from dataclasses import dataclass


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, n - 1).bit_length()


def _pick(buckets: tuple[int, ...], n: int) -> int:
    for b in buckets:
        if b >= n:
            return b
    return next_pow2(n)


@dataclass(frozen=True, slots=True)
class BucketPolicy:
    """Bucket sizes of every padded dimension.

    token_buckets: rows of a chunk (prefill / speculative) program call.
    batch_buckets: rows of a decode program call (one per decoding request). Starts at 2: XLA
        rewrites a one-row scatter into a select over the whole KV array plus a dynamic update,
        which copies the cache every layer (7 s a step instead of 50 ms with 1,024 blocks); a
        padded second row keeps it an in-place scatter.
    sample_buckets: sampled rows of a chunk program call (output-head rows).
    min_context_blocks: smallest per-request block-table width of the decode program (16 blocks of
        16 tokens = 256 tokens: attention over a few hundred padded keys costs far less than a
        recompile); wider tables grow in powers of two.
    min_key_blocks: smallest number of gathered KV blocks of a chunk program call.
    """

    token_buckets: tuple[int, ...] = (16, 64, 256, 512)
    batch_buckets: tuple[int, ...] = (2, 4, 8, 16, 32, 64)
    sample_buckets: tuple[int, ...] = (1, 4, 16, 64)
    min_context_blocks: int = 16
    min_key_blocks: int = 16

    def __post_init__(self) -> None:
        for name in ("token_buckets", "batch_buckets", "sample_buckets"):
            buckets = getattr(self, name)
            if not buckets or any(b < 1 for b in buckets) or list(buckets) != sorted(set(buckets)):
                raise ValueError(f"{name} must be strictly increasing positive ints, got {buckets!r}")
        for name in ("min_context_blocks", "min_key_blocks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def num_tokens(self, n: int) -> int:
        return _pick(self.token_buckets, n)

    def batch_size(self, n: int) -> int:
        return _pick(self.batch_buckets, n)

    def sample_rows(self, n: int) -> int:
        return _pick(self.sample_buckets, n)

    def context_blocks(self, n: int) -> int:
        return max(self.min_context_blocks, next_pow2(n))

    def key_blocks(self, n: int) -> int:
        return max(self.min_key_blocks, next_pow2(n))

    def batch_sizes_up_to(self, max_batch: int) -> tuple[int, ...]:
        """The batch buckets a decode of 1..``max_batch`` rows can land in (what CUDA graphs capture)."""
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        sizes = {self.batch_size(n) for n in range(1, max_batch + 1)}
        return tuple(sorted(sizes))
