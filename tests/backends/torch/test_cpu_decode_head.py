"""The C decode kernel's output head for steps of many rows: the panel-packed copy (HEAD_PANELS, the runner's
default above 4 rows) against the [E, V] head (HEAD_FULL) and oneDNN's product (cpu_decode_head="onednn"), on a
vocabulary whose last panel is partial; the packing itself; bad modes refused."""

from __future__ import annotations

import pytest
import torch

from backends.head_panels import PANEL
from backends.runner_driver import tiny_config
from backends.torch import TorchModelRunner
from backends.torch.cpu_decode import HEAD_FULL, HEAD_NONE, HEAD_PANELS, load_library, pack_head_panels
from backends.torch.weights import build_model, random_state_dict
from engine.model_runner import KVCacheSpec

pytestmark = pytest.mark.skipif(load_library() is None, reason="no C compiler: the kernel is not built here")


def test_pack_head_panels_layout():
    head = torch.arange(5 * 70, dtype=torch.float32).view(5, 70)  # 70 columns: 2 whole panels and 6 columns
    panels = pack_head_panels(head)
    assert panels.shape == (3, 5, PANEL)
    for p in range(3):
        cols = head[:, PANEL * p : PANEL * (p + 1)]
        assert torch.equal(panels[p, :, : cols.shape[1]], cols)
    assert not panels[2, :, 6:].any()  # the padding is zero


@pytest.mark.parametrize("rows", [5, 8, 32])
def test_panel_head_equals_the_full_head(rows):
    config = tiny_config()  # vocabulary 97: three whole panels and a 1-column one
    model = build_model(config, torch.float32, state_dict=random_state_dict(config, seed=5, std=0.2), progress=False)
    runner = TorchModelRunner(model, torch.float32, adaptive_threads=False)
    runner.initialize_kv_cache(KVCacheSpec(4 * rows + 8, 0, 4))
    decoder = runner.cpu_decoder
    g = torch.Generator().manual_seed(rows)
    ids = torch.randint(0, config.vocab_size, (rows,), generator=g)
    pos = torch.zeros(rows, dtype=torch.int64)
    tables = torch.arange(rows, dtype=torch.int64).view(rows, 1)
    for threads in (1, 2):
        full = decoder.step(ids, pos, tables, 0, threads, HEAD_FULL)
        panels = decoder.step(ids, pos, tables, 0, threads, HEAD_PANELS)
        normed = decoder.step(ids, pos, tables, 0, threads, HEAD_NONE)
        assert panels.shape == (rows, config.vocab_size) and normed.shape == (rows, config.hidden_size)
        assert torch.equal(panels, full)  # the same sums in the same order
        torch.testing.assert_close(panels, normed @ model.lm_head_t, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="head must be"):
        decoder.step(ids, pos, tables, 0, 1, 3)


def test_runner_heads_agree(tiny, kit):
    _config, _sd, model = tiny
    outs = {}
    for head in ("kernel", "onednn"):
        runner = TorchModelRunner(model, torch.float32, adaptive_threads=False, cpu_decode_head=head)
        runner.initialize_kv_cache(KVCacheSpec(128, 0, 4))
        alloc = kit.BlockAllocator(128, seed=2)
        seqs = [kit.Seq(f"r{i}", [(5 * i + j) % 90 + 3 for j in range(4 + i)], kit.GREEDY) for i in range(8)]
        for i, s in enumerate(seqs):
            r = s.schedule(alloc, 4)
            out = runner.compute_logits(kit.make_step(i, [r]))
            s.advance(r, [int(out[s.req_id][-1].argmax())])
        steps = []
        for step in range(3):  # 8-row decode steps: the head over the panels, or oneDNN's
            sched = [s.schedule(alloc, 4) for s in seqs]
            out = runner.compute_logits(kit.make_step(100 + step, sched))
            steps.append(out)
            for s, r in zip(seqs, sched):
                s.advance(r, [int(out[s.req_id][0].argmax())])
        outs[head] = steps
    for a, b in zip(outs["kernel"], outs["onednn"]):
        for k in a:
            torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="cpu_decode_head"):
        TorchModelRunner(model, torch.float32, cpu_decode_head="xla")
