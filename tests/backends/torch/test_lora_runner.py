"""Batched LoRA in the torch runner on the tiny model, against a dense reference whose weights have each
adapter merged in (W + scaling * B @ A): decodes of several adapters (padded groups), prefill chunks
(segments), base rows beside them, slot eviction, and the engine's rules for adapters."""

from __future__ import annotations

import pytest
import torch

from backends.checkpoint.peft_adapter import AdapterError, load_peft_adapter
from backends.checkpoint.peft_writer import random_peft_adapter
from backends.torch import TorchModelRunner
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.lora import LoraConfig, LoraRequest
from engine.model_runner import KVCacheSpec
from engine.sampling_params import SamplingParams

ATOL = 2e-4
TARGETS = {
    "qv": ("q_proj", "v_proj"),
    "all": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "mlp": ("gate_proj", "down_proj"),
}
RANKS = {"qv": 2, "all": 8, "mlp": 4}


@pytest.fixture(scope="module")
def adapters(tiny, tmp_path_factory):
    """{name: (LoraRequest, merged HF state dict)}."""
    config, sd, _ = tiny
    root = tmp_path_factory.mktemp("tiny_adapters")
    out = {}
    for seed, (name, targets) in enumerate(TARGETS.items()):
        path = random_peft_adapter(root / name, config, rank=RANKS[name], target_modules=targets, seed=seed, b_std=0.3)
        merged = {k: v.clone() for k, v in sd.items()}
        for (layer, module), w in load_peft_adapter(path, config, max_rank=8).weights.items():
            parent = "self_attn" if module in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            delta = w.scaling * torch.from_numpy(w.lora_b @ w.lora_a)
            merged[f"model.layers.{layer}.{parent}.{module}.weight"] += delta
        out[name] = (LoraRequest(name, str(path)), merged)
    return out


def _runner(model, adapters, max_loras=3, max_cpu_loras=None):
    runner = TorchModelRunner(model, lora_config=LoraConfig(max_loras, 8, max_cpu_loras))
    runner.initialize_kv_cache(KVCacheSpec(64, 0, 4))
    for lora, _ in adapters.values():
        runner.add_lora(lora)
    return runner


@pytest.mark.parametrize("max_segments", [4, 0], ids=["segments", "padded-groups"])
def test_mixed_batch_matches_merged_dense_models(tiny, kit, adapters, max_segments, monkeypatch):
    """Decode rows as per-adapter segments (few adapters), and as padded groups (forced here)."""
    import backends.torch.lora_batch as lora_batch
    import backends.torch.runner as torch_runner

    monkeypatch.setattr(lora_batch, "MAX_LORA_SEGMENTS", max_segments)
    monkeypatch.setattr(torch_runner, "MAX_LORA_SEGMENTS", max_segments)
    config, sd, model = tiny
    runner = _runner(model, adapters)
    alloc = kit.BlockAllocator(64, seed=3)
    # (prompt, adapter): two decodes share "all" (a padded group), base rows beside adapter rows
    jobs = {
        "a": ([5, 9, 17, 33, 2, 8, 44, 61, 70, 3, 11], "all"),
        "b": ([7, 7, 21], None),
        "c": (list(range(20, 34)), "qv"),
        "d": ([4, 8, 15, 16, 23, 42], "all"),
        "e": ([1, 2, 3], "mlp"),
    }
    seqs = {r: kit.Seq(r, list(p), kit.GREEDY) for r, (p, _) in jobs.items()}
    for step in range(7):
        sched = []
        for s in seqs.values():
            r = s.schedule(alloc, 4, max_tokens=5)
            lora = jobs[s.req_id][1]
            r.lora_id = None if lora is None else adapters[lora][0].lora_id
            sched.append(r)
        logits = runner.compute_logits(kit.make_step(step, sched))
        for r in sched:
            s = seqs[r.req_id]
            if not r.sample:
                s.advance(r, None)
                continue
            lora = jobs[r.req_id][1]
            ref = kit.dense_logits(config, sd if lora is None else adapters[lora][1], s.token_ids)[-1]
            torch.testing.assert_close(logits[r.req_id][0], ref, atol=ATOL, rtol=0)
            s.advance(r, [int(ref.argmax())])
    assert all(s.num_output >= 3 for s in seqs.values())
    base = kit.dense_logits(config, sd, jobs["a"][0])[-1]
    assert (kit.dense_logits(config, adapters["all"][1], jobs["a"][0])[-1] - base).abs().max() > 0.1


def test_eviction_to_host_and_disk_and_reload(tiny, kit, adapters):
    config, _, model = tiny
    # one device slot, one adapter in host RAM: the others are read again from their directories
    runner = _runner(model, adapters, max_loras=1, max_cpu_loras=1)
    prompt = [3, 14, 15, 92, 65]
    for step, name in enumerate(["qv", "all", "mlp", "qv", "all"]):
        seq = kit.Seq(f"r{step}", list(prompt), kit.GREEDY)
        r = seq.schedule(kit.BlockAllocator(64, seed=step), 4)
        r.lora_id = adapters[name][0].lora_id
        logits = runner.compute_logits(kit.make_step(step, [r]))[r.req_id][0]
        ref = kit.dense_logits(config, adapters[name][1], prompt)[-1]
        torch.testing.assert_close(logits, ref, atol=ATOL, rtol=0)
    stats = runner.lora_stats()
    assert (stats.num_registered, stats.num_host, stats.num_device) == (3, 1, 1)
    assert stats.num_loads_total == 5 and stats.num_evictions_total == 4
    assert runner.resident_lora_ids() == [adapters["all"][0].lora_id]


def test_more_adapters_in_one_step_than_slots_is_refused(tiny, kit, adapters):
    _, _, model = tiny
    runner = _runner(model, adapters, max_loras=2)
    alloc = kit.BlockAllocator(64)
    sched = []
    for i, (lora, _) in enumerate(adapters.values()):
        r = kit.Seq(f"r{i}", [1, 2, 3], kit.GREEDY).schedule(alloc, 4)
        r.lora_id = lora.lora_id
        sched.append(r)
    with pytest.raises(ValueError, match="3 adapters in one step but only 2 LoRA slots"):
        runner.compute_logits(kit.make_step(0, sched))


def _engine(model, adapters, max_loras=2):
    from backends.fake.byte_tokenizer import ByteTokenizer

    runner = TorchModelRunner(model, lora_config=LoraConfig(max_loras, 8))
    engine = LLMEngine(runner, ByteTokenizer(), SchedulerConfig(max_model_len=128), CacheConfig(4, 64, 0))
    for lora, _ in adapters.values():
        engine.add_lora(lora)
    return engine


def test_engine_serves_adapters_by_name_within_its_slots(tiny, adapters):
    _, _, model = tiny
    engine = _engine(model, adapters, max_loras=2)
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    ids = {name: engine.add_request([5, 6, 7], params, lora_name=name) for name in ("qv", "all", "mlp")}
    base = engine.add_request([5, 6, 7], params)
    engine.step()
    # the scheduler admitted only two adapters (two slots); the third waits, the base request runs
    assert engine.scheduler.running_lora_ids() == {adapters["qv"][0].lora_id, adapters["all"][0].lora_id}
    assert engine.scheduler.waiting_lora_ids() == {adapters["mlp"][0].lora_id}
    assert engine.make_stats().num_running == 3  # the base request behind "mlp" was not blocked by it
    with pytest.raises(ValueError, match="in use by 1 unfinished requests"):
        engine.remove_lora("mlp")
    final = engine.run_until_done()
    assert {final[i].num_output_tokens for i in [*ids.values(), base]} == {4}
    outputs = {tuple(final[i].text.encode()) for i in [*ids.values(), base]}
    assert len(outputs) > 1  # the adapters change the answer
    engine.remove_lora("mlp")
    assert [lora.name for lora in engine.list_loras()] == ["qv", "all"]
    with pytest.raises(ValueError, match="unknown LoRA adapter 'mlp'"):
        engine.add_request([1], params, lora_name="mlp")
    with pytest.raises(KeyError, match="unknown LoRA adapter"):
        engine.remove_lora("mlp")


def test_engine_refuses_bad_adapters_and_keeps_serving(tiny, adapters, tmp_path):
    config, _, model = tiny
    engine = _engine(model, adapters)
    with pytest.raises(ValueError, match="already loaded"):
        engine.add_lora(LoraRequest("qv", adapters["mlp"][0].path))
    with pytest.raises(AdapterError, match="is not a directory"):
        engine.add_lora(LoraRequest("ghost", str(tmp_path / "missing")))
    too_big = random_peft_adapter(tmp_path / "big", config, rank=16, target_modules=("q_proj",))
    with pytest.raises(AdapterError, match="exceeds the maximum LoRA rank 8"):
        engine.add_lora(LoraRequest("big", str(too_big)))
    assert [lora.name for lora in engine.list_loras()] == ["qv", "all", "mlp"]
    params = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
    (out,) = engine.generate([[1, 2, 3]], params)
    assert out.num_output_tokens == 2
    plain = LLMEngine(
        TorchModelRunner(model), engine.tokenizer, SchedulerConfig(max_model_len=128), CacheConfig(4, 8, 0)
    )
    with pytest.raises(ValueError, match="serves no LoRA adapters"):
        plain.add_lora(adapters["qv"][0])


def test_prefix_cache_never_mixes_adapters(tiny, adapters):
    _, _, model = tiny
    engine = _engine(model, adapters)
    params = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    prompt = list(range(10, 30))  # five full blocks of 4
    (first,) = engine.generate([prompt], params)
    hits0 = engine.make_stats().prefix_cache_hits_total
    rid = engine.add_request(prompt, params, lora_name="all")
    with_lora = engine.run_until_done()[rid]
    assert engine.make_stats().prefix_cache_hits_total == hits0  # nothing reused across adapters
    rid = engine.add_request(prompt, params, lora_name="all")
    again = engine.run_until_done()[rid]
    assert engine.make_stats().prefix_cache_hits_total > hits0  # reused within the same adapter
    assert again.text == with_lora.text
    assert first.num_output_tokens == 3 and first.text != with_lora.text  # the adapter's own answer
