"""The Triton LoRA kernels (triton_lora.py; under TRITON_INTERPRET=1 on CPU tensors here) against plain torch:
the shrink and expand alone (rows without an adapter untouched, odd sizes, strided rows), then the torch
runner with ``lora_kernel = "triton"`` against the same runner on its torch ops (itself checked against
merged dense weights in test_lora_runner.py): decodes and prefill chunks of three adapters beside base rows."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is first imported (conftest.py does it too)
pytest.importorskip("triton")

from backends.checkpoint.peft_writer import random_peft_adapters
from backends.torch import TorchModelRunner, build_model
from backends.torch.lora_batch import choose_lora_kernel
from backends.torch.triton_lora import lora_expand, lora_shrink
from engine.lora import LoraConfig
from engine.model_runner import KVCacheSpec

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
TARGETS = {
    "qv": ("q_proj", "v_proj"),
    "all": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "mlp": ("gate_proj", "down_proj"),
}


def test_shrink_and_expand_match_torch():
    g = torch.Generator().manual_seed(0)
    num_slots, num_in, rank, n, num_out = 5, 70, 6, 3, 90  # none a multiple of the kernels' blocks
    x = torch.randn(7, num_in + 5, generator=g)[:, :num_in]  # rows strided (num_in + 5 apart), columns packed
    a = torch.randn(num_slots, num_in, n * rank, generator=g)
    b = torch.randn(num_slots, rank, num_out, generator=g)
    slots = [0, -1, 4, 2, 0, -1, 3]
    row_slots = torch.tensor(slots, dtype=torch.int32)
    out = torch.randn(7, 3 * num_out, generator=g)
    expected = out.clone()
    y = lora_shrink(x.to(DEVICE), a.to(DEVICE), row_slots.to(DEVICE))
    got = out.to(DEVICE)
    lora_expand(y, b.to(DEVICE), row_slots.to(DEVICE), got, y_col0=rank, out_col0=num_out)
    for t, s in enumerate(slots):
        if s >= 0:
            shrunk = x[t] @ a[s]
            torch.testing.assert_close(y[t].cpu(), shrunk, atol=1e-4, rtol=0)
            expected[t, num_out : 2 * num_out] += shrunk[rank : 2 * rank] @ b[s]
    torch.testing.assert_close(got.cpu(), expected, atol=1e-4, rtol=0)  # rows -1 and other columns untouched
    with pytest.raises(ValueError, match="lora_shrink"):
        lora_shrink(x.to(DEVICE), a[:, :-1].contiguous().to(DEVICE), row_slots.to(DEVICE))


def test_the_kernel_choice(monkeypatch):
    monkeypatch.delenv("ZOO_LORA_KERNEL", raising=False)
    assert choose_lora_kernel(torch.device("cpu")) == "torch"
    assert choose_lora_kernel(torch.device("cuda")) == "triton"  # triton is installed (importorskip above)
    monkeypatch.setenv("ZOO_LORA_KERNEL", "torch")
    assert choose_lora_kernel(torch.device("cuda")) == "torch"
    monkeypatch.setenv("ZOO_LORA_KERNEL", "cutlass")
    with pytest.raises(ValueError, match="ZOO_LORA_KERNEL"):
        choose_lora_kernel(torch.device("cpu"))


@pytest.fixture(scope="module")
def loras(tiny, tmp_path_factory):
    specs = {name: (t, 2 + 2 * i) for i, (name, t) in enumerate(TARGETS.items())}
    return random_peft_adapters(tmp_path_factory.mktemp("triton_adapters"), tiny[0], specs, seed=20)


def test_runner_with_triton_kernels_matches_torch_ops(tiny, kit, loras):
    config, sd, _ = tiny
    model = build_model(config, "float32", DEVICE, state_dict=sd)
    runners = {}
    for kernel in ("torch", "triton"):
        runner = TorchModelRunner(model, lora_config=LoraConfig(3, 8))
        runner.lora_kernel = kernel
        runner.initialize_kv_cache(KVCacheSpec(64, 0, 4))
        for lora in loras.values():
            runner.add_lora(lora)
        runners[kernel] = runner
    alloc = kit.BlockAllocator(64, seed=5)
    jobs = {
        "a": ([5, 9, 17, 33, 2, 8, 44, 61, 70, 3, 11], "all"),
        "b": ([7, 7, 21], None),
        "c": (list(range(20, 34)), "qv"),
        "d": ([4, 8, 15, 16, 23, 42], "all"),
        "e": ([1, 2, 3], "mlp"),
    }
    seqs = {r: kit.Seq(r, list(p), kit.GREEDY) for r, (p, _) in jobs.items()}
    for step in range(6):  # prefill chunks of 4, then decodes beside chunks, then decodes only
        sched = []
        for s in seqs.values():
            r = s.schedule(alloc, 4, max_tokens=4)
            lora = jobs[s.req_id][1]
            r.lora_id = None if lora is None else loras[lora].lora_id
            sched.append(r)
        got = runners["triton"].compute_logits(kit.make_step(step, sched))
        ref = runners["torch"].compute_logits(kit.make_step(step, sched))
        assert got.keys() == ref.keys()
        for req_id in got:
            np.testing.assert_allclose(got[req_id].cpu().numpy(), ref[req_id].cpu().numpy(), atol=1e-4, rtol=0)
        for r in sched:
            s = seqs[r.req_id]
            s.advance(r, [int(ref[r.req_id][0].argmax())] if r.req_id in ref else None)
    assert all(s.num_output >= 2 for s in seqs.values())
