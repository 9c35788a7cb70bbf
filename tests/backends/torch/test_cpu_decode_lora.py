"""LoRA decode rows inside the C decode kernel (csrc/cpu_decode.c ``zoo_decode_step_lora``) against the torch
LoRA path (lora_batch.py, itself checked against merged dense weights in test_lora_runner.py): mixed batches of
base rows and three adapters of different ranks and target modules, at 1-4 rows (the kernel's vector path) and
5+ rows (its blocked GEMMs), at 1 and 3 threads (column splits that cut through the fused q|k|v output)."""

from __future__ import annotations

import pytest
import torch

from backends.checkpoint.peft_writer import random_peft_adapters
from backends.torch import TorchModelRunner
from backends.torch.cpu_decode import load_library
from engine.lora import LoraConfig
from engine.model_runner import KVCacheSpec

pytestmark = pytest.mark.skipif(load_library() is None, reason="no C compiler: the kernel is not built here")

BLOCK = 4
ATOL = 1e-4
TARGETS = {
    "qv": ("q_proj", "v_proj"),
    "all": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "mlp": ("gate_proj", "up_proj", "down_proj"),
}
RANKS = {"qv": 2, "all": 8, "mlp": 4}
ROW_ADAPTERS = ("all", None, "qv", "mlp")  # row i uses ROW_ADAPTERS[i % 4]


@pytest.fixture(scope="module")
def loras(tiny, tmp_path_factory):
    specs = {name: (t, RANKS[name]) for name, t in TARGETS.items()}
    return random_peft_adapters(tmp_path_factory.mktemp("kernel_adapters"), tiny[0], specs, seed=10)


def _runner(model, loras, kernel: bool, blocks: int) -> TorchModelRunner:
    runner = TorchModelRunner(model, lora_config=LoraConfig(3, 8), cpu_decode_kernel=kernel, adaptive_threads=False)
    runner.initialize_kv_cache(KVCacheSpec(blocks, 0, BLOCK))
    for lora in loras.values():
        runner.add_lora(lora)
    return runner


@pytest.mark.parametrize(("num_rows", "threads"), [(1, 1), (4, 1), (5, 1), (33, 1), (4, 3), (33, 3)])
def test_kernel_lora_rows_match_torch_lora_path(tiny, kit, loras, num_rows, threads):
    _, _, model = tiny
    blocks = 16 * num_rows
    kernel_runner = _runner(model, loras, True, blocks)
    torch_runner = _runner(model, loras, False, blocks)
    assert kernel_runner.cpu_decoder is not None and torch_runner.cpu_decoder is None
    alloc = kit.BlockAllocator(blocks, seed=num_rows)
    prompts = [[(5 * i + j) % 90 + 3 for j in range(3 + (5 * i) % 17)] for i in range(num_rows)]
    seqs = [kit.Seq(f"r{i}", p, kit.GREEDY) for i, p in enumerate(prompts)]
    names = {s.req_id: ROW_ADAPTERS[i % 4] for i, s in enumerate(seqs)}

    def schedule(s):
        r = s.schedule(alloc, BLOCK)
        name = names[s.req_id]
        r.lora_id = None if name is None else loras[name].lora_id
        return r

    for i, s in enumerate(seqs):  # prefill one request a step (chunks: the torch path in both runners)
        r = schedule(s)
        logits = [run.compute_logits(kit.make_step(i, [r]))[s.req_id][-1] for run in (kernel_runner, torch_runner)]
        torch.testing.assert_close(logits[0], logits[1], atol=ATOL, rtol=0)
        s.advance(r, [int(logits[1].argmax())])
    assert kernel_runner.cpu_decoder.lora_steps == 0
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for step in range(3):
            sched = [schedule(s) for s in seqs]
            assert all(r.is_decode for r in sched)
            got = kernel_runner.compute_logits(kit.make_step(100 + step, sched))
            want = torch_runner.compute_logits(kit.make_step(100 + step, sched))
            for s, r in zip(seqs, sched):
                torch.testing.assert_close(got[s.req_id][0], want[s.req_id][0], atol=ATOL, rtol=0)
                assert int(got[s.req_id][0].argmax()) == int(want[s.req_id][0].argmax())
                s.advance(r, [int(want[s.req_id][0].argmax())])
    finally:
        torch.set_num_threads(old)
    # every decode step with an adapter row ran in the kernel
    assert kernel_runner.cpu_decoder.lora_steps == 3


def test_adapters_change_kernel_logits(tiny, kit, loras):
    """The LoRA deltas are really applied: the same prompt with and without an adapter differs."""
    _, _, model = tiny
    runner = _runner(model, loras, True, 64)
    alloc = kit.BlockAllocator(64, seed=1)
    seqs = [kit.Seq(f"r{i}", [3, 14, 15, 92, 65], kit.GREEDY) for i in range(2)]
    for i, s in enumerate(seqs):
        r = s.schedule(alloc, BLOCK)
        s.advance(r, [int(runner.compute_logits(kit.make_step(i, [r]))[s.req_id][-1].argmax())])
        s.token_ids[-1] = 7  # both rows decode the same token
    sched = [s.schedule(alloc, BLOCK) for s in seqs]
    sched[1].lora_id = loras["mlp"].lora_id
    out = runner.compute_logits(kit.make_step(9, sched))
    assert runner.cpu_decoder.lora_steps == 1
    assert (out["r0"][0] - out["r1"][0]).abs().max() > 0.05


def test_bad_slot_is_refused(tiny, loras):
    _, _, model = tiny
    runner = _runner(model, loras, True, 16)
    decoder = runner.cpu_decoder
    one = torch.zeros(1, dtype=torch.int64)
    tables = torch.zeros(1, 1, dtype=torch.int64)
    for slot in (4, -2):  # 3 slots + the zero slot
        with pytest.raises(ValueError, match="LoRA slot out of range"):
            decoder.step(one, one, tables, 0, 1, row_slots=torch.tensor([slot], dtype=torch.int32))
    with pytest.raises(ValueError, match="int32"):
        decoder.step(one, one, tables, 0, 1, row_slots=torch.tensor([0], dtype=torch.int64))
    assert decoder.lora_steps == 0
