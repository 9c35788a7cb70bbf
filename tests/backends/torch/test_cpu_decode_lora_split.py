"""The C decode kernel's LoRA rows (csrc/cpu_decode_lora.h, cpu_decode_lora_k.h) called directly on slot tensors
filled at random, against the same kernel's base step on weights with each adapter merged in (W + A^T B, the
scaling folded into B as the slots hold it), and against itself at other thread counts: the shrink is split over
the threads by rows, the expand by columns, so every thread count must give the same bits.

Shapes chosen to reach every branch of the products: hidden 50 and intermediate 83 (K mod 4 = 2 and 3: the
shrink's leftover terms; 64-, 16-column and single-column blocks in the expand), ranks 16 (shrink tiles of 48, 32
and 16 columns), 5 (tails only) and 20 (a tile plus a tail); rows without a slot between rows with one, slot runs
of length 1, 2 and 3, a slot used by two runs; 3 rows (the vector path) and 11 (the blocked GEMMs)."""

from __future__ import annotations

import pytest
import torch

from backends.lora_store import lora_groups
from backends.runner_driver import tiny_config
from backends.torch import build_model, random_state_dict
from backends.torch.cpu_decode import CpuDecoder, load_library
from backends.torch.lora_slots import LoraSlots
from engine.lora import LoraConfig

pytestmark = pytest.mark.skipif(load_library() is None, reason="no C compiler: the kernel is not built here")

BLOCK, NUM_BLOCKS, NUM_ADAPTERS = 4, 64, 4
ROW_SLOTS = {
    11: [0, 0, -1, 1, 2, 2, 2, -1, 3, 1, 0],
    3: [-1, 2, 2],
}
WEIGHTS = {"qkv": "qkv_proj_t", "o": "o_proj_t", "gate_up": "gate_up_proj_t", "down": "down_proj_t"}


@pytest.fixture(scope="module")
def odd_model():
    config = tiny_config(hidden_size=50, intermediate_size=83)
    return config, build_model(config, "float32", state_dict=random_state_dict(config, seed=3, std=0.2))


def _slots(config, rank: int) -> LoraSlots:
    slots = LoraSlots(config, LoraConfig(NUM_ADAPTERS, rank), torch.float32, torch.device("cpu"))
    g = torch.Generator().manual_seed(rank)
    for t in [*slots.a.values(), *slots.b.values()]:
        t[:, :NUM_ADAPTERS].copy_(0.3 * torch.randn(t[:, :NUM_ADAPTERS].shape, generator=g))
    return slots


def _step(model, slots, rows: int, threads: int, row_slots: list[int] | None) -> torch.Tensor:
    """Logits of one decode step of ``rows`` rows (positions 5 + row % 7 over a random cache)."""
    c = model.config
    g = torch.Generator().manual_seed(7)
    kv = [torch.randn(2, NUM_BLOCKS, BLOCK, c.num_key_value_heads, c.head_dim, generator=g) for _ in range(2)]
    decoder = CpuDecoder(load_library(), model, kv, BLOCK)
    decoder.bind_lora(slots)
    tokens = (torch.arange(rows, dtype=torch.int64) * 13 + 5) % c.vocab_size
    pos = 5 + torch.arange(rows, dtype=torch.int64) % 7
    tables = torch.arange(rows * 4, dtype=torch.int64).view(rows, 4).contiguous()
    rs = None if row_slots is None else torch.tensor(row_slots, dtype=torch.int32)
    return decoder.step(tokens, pos, tables, int(pos.max()), threads, True, rs)


def _merge(model, config, slots, slot: int) -> list[torch.Tensor]:
    """model's weights += the slot's A^T B per projection, in place (the kernel reads them in place); returns
    copies of the weights as they were, for ``_restore``."""
    saved = [w.clone() for w in _weights(model)]
    with torch.no_grad():
        for group in lora_groups(config):
            for layer_index, layer in enumerate(model.layers):
                w = getattr(layer, WEIGHTS[group.name]).as_subclass(torch.Tensor)
                a = slots.a[group.name][layer_index, slot]  # [in, n R]
                rank = slots.b[group.modules[0]].shape[2]
                for j, (module, (begin, end)) in enumerate(zip(group.modules, group.out_columns)):
                    delta = a[:, j * rank : (j + 1) * rank] @ slots.b[module][layer_index, slot]
                    if group.name == "gate_up":  # [E, 2I]: gate | up
                        begin, end = j * config.intermediate_size, (j + 1) * config.intermediate_size
                    w[:, begin:end] += delta
    return saved


def _weights(model) -> list[torch.Tensor]:
    return [getattr(layer, name).as_subclass(torch.Tensor) for layer in model.layers for name in WEIGHTS.values()]


def _restore(model, saved: list[torch.Tensor]) -> None:
    with torch.no_grad():
        for w, old in zip(_weights(model), saved, strict=True):
            w.copy_(old)


@pytest.mark.parametrize("rank", [16, 5, 20])
@pytest.mark.parametrize("rows", [11, 3])
def test_lora_rows_match_merged_weights(odd_model, rank, rows):
    config, model = odd_model
    slots = _slots(config, rank)
    got = _step(model, slots, rows, 1, ROW_SLOTS[rows])
    base = _step(model, slots, rows, 1, None)
    plain = [i for i, s in enumerate(ROW_SLOTS[rows]) if s < 0]
    assert torch.equal(got[plain], base[plain])  # rows without a slot: the base step's bits
    for slot in sorted({s for s in ROW_SLOTS[rows] if s >= 0}):
        saved = _merge(model, config, slots, slot)
        try:
            want = _step(model, slots, rows, 1, None)
        finally:
            _restore(model, saved)
        idx = [i for i, s in enumerate(ROW_SLOTS[rows]) if s == slot]
        torch.testing.assert_close(got[idx], want[idx], atol=2e-4, rtol=1e-4)
        assert (got[idx] - base[idx]).abs().max() > 1e-2  # the adapter really changed these rows


@pytest.mark.parametrize("rows", [11, 3])
def test_thread_counts_give_the_same_bits(odd_model, rows):
    config, model = odd_model
    slots = _slots(config, 16)
    one = _step(model, slots, rows, 1, ROW_SLOTS[rows])
    for threads in (2, 3):
        assert torch.equal(_step(model, slots, rows, threads, ROW_SLOTS[rows]), one), threads


def test_a_row_does_not_depend_on_the_others(odd_model):
    """A row's logits are the same bits alone as in a batch (its run length and its place in the shrink split
    change; the sums do not)."""
    config, model = odd_model
    slots = _slots(config, 16)
    batch = _step(model, slots, 11, 2, ROW_SLOTS[11])
    pairs = _step(model, slots, 11, 2, [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1])
    assert torch.equal(batch[3], pairs[3]) and torch.equal(batch[9], pairs[9])
