"""Multi-LoRA on the real model against transformers + peft: random adapters made with peft in the test
(several ranks and target sets, rsLoRA, an alpha_pattern and a rank_pattern), saved in PEFT's format, read back by our
loader, served batched together with the base model: logits within 1e-3 and greedy tokens identical, on the
torch and the JAX runner."""

from __future__ import annotations

import copy

import pytest
import torch

from backends.torch import TorchModelRunner
from engine.batch import ScheduledRequest, SchedulerOutput
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.lora import LoraConfig, LoraRequest
from engine.model_runner import KVCacheSpec
from engine.sampling_params import SamplingParams

pytestmark = pytest.mark.slow
peft = pytest.importorskip("peft")

NUM_TOKENS = 5
GREEDY = SamplingParams(temperature=0, max_tokens=NUM_TOKENS, ignore_eos=True)
PROMPTS = ["The three primary colors are", "def fibonacci(n):\n    ", "My favourite city is"]
# name -> (rank, alpha, target modules, extra LoraConfig fields)
ADAPTERS = {
    "attn8": (8, 16, ["q_proj", "v_proj"], {}),
    "all16": (
        16,
        32,
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        {"rank_pattern": {"down_proj": 4}},  # peft: rank 4 there, scaling alpha / 4
    ),
    "mlp4": (
        4,
        8,
        ["o_proj", "gate_proj", "up_proj", "down_proj"],
        {"use_rslora": True, "alpha_pattern": {"down_proj": 2}},
    ),
}


@pytest.fixture(scope="module")
def peft_model(hf_reference, tmp_path_factory):
    """(a PeftModel over a copy of the reference holding every adapter, {name: saved directory})."""
    generator = torch.Generator().manual_seed(1234)
    model = None
    root = tmp_path_factory.mktemp("adapters")
    for name, (rank, alpha, targets, extra) in ADAPTERS.items():
        config = peft.LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0, **extra)
        if model is None:
            model = peft.get_peft_model(copy.deepcopy(hf_reference), config, adapter_name=name)
        else:
            model.add_adapter(name, config)
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            for name in ADAPTERS:
                if f".lora_A.{name}." in param_name:
                    param.copy_(torch.randn(param.shape, generator=generator) / param.shape[1] ** 0.5)
                elif f".lora_B.{name}." in param_name:
                    param.copy_(0.08 * torch.randn(param.shape, generator=generator))
    model.eval()
    paths = {}
    for name in ADAPTERS:
        model.save_pretrained(str(root / name), selected_adapters=[name])
        saved = root / name
        paths[name] = str(next(p.parent for p in saved.rglob("adapter_config.json")))
    return model, paths


def _engine(smollm2_model, tokenizer, paths, max_loras=4) -> LLMEngine:
    runner = TorchModelRunner(smollm2_model, progress=False, lora_config=LoraConfig(max_loras=max_loras))
    engine = LLMEngine(
        runner,
        tokenizer,
        SchedulerConfig(max_num_batched_tokens=128, max_num_seqs=16, max_model_len=256),
        CacheConfig(block_size=16, num_device_blocks=64, num_host_blocks=0),
    )
    for name, path in paths.items():
        engine.add_lora(LoraRequest(name, path))
    return engine


def _run(engine: LLMEngine, jobs: list[tuple[list[int], str | None]]) -> list[list[int]]:
    ids = [engine.add_request(prompt, GREEDY, lora_name=lora) for prompt, lora in jobs]
    tokens: dict[str, list[int]] = {i: [] for i in ids}
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens[out.req_id] += out.new_token_ids
    return [tokens[i] for i in ids]


def _reference(model, prompt: list[int], lora: str | None) -> tuple[torch.Tensor, list[int]]:
    """(last-position logits of the prompt, greedy tokens, EOS not special) from transformers + peft."""
    if lora is None:
        with model.disable_adapter():
            return _greedy(model, prompt)
    model.set_adapter(lora)
    return _greedy(model, prompt)


def _greedy(model, prompt: list[int]) -> tuple[torch.Tensor, list[int]]:
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        first_logits = out.logits[0, -1].float()
        tokens = [int(first_logits.argmax())]
        while len(tokens) < NUM_TOKENS:
            out = model(torch.tensor([[tokens[-1]]]), past_key_values=out.past_key_values, use_cache=True)
            tokens.append(int(out.logits[0, -1].argmax()))
    return first_logits, tokens


@pytest.fixture(scope="module")
def expected(peft_model, smollm2_checkpoint):
    """{(prompt index, adapter or None): (reference logits, reference greedy tokens)}."""
    model, _ = peft_model
    tok = smollm2_checkpoint.tokenizer
    cases = [(0, None), (0, "attn8"), (1, "all16"), (2, "mlp4"), (2, "all16")]
    return {(i, lora): _reference(model, tok.encode(PROMPTS[i]), lora) for i, lora in cases}


def test_logits_match_peft(peft_model, expected, smollm2_model, smollm2_checkpoint):
    _, paths = peft_model
    tok = smollm2_checkpoint.tokenizer
    runner = TorchModelRunner(smollm2_model, progress=False, lora_config=LoraConfig(max_loras=4))
    for name, path in paths.items():
        runner.add_lora(LoraRequest(name, path))
    by_name = {name: LoraRequest(name, path).lora_id for name, path in paths.items()}
    runner.initialize_kv_cache(KVCacheSpec(num_device_blocks=64, num_host_blocks=0, block_size=16))
    jobs = list(expected)
    requests = []
    for k, (i, lora) in enumerate(jobs):
        prompt = tok.encode(PROMPTS[i])
        blocks = list(range(4 * k, 4 * k + 4))  # <= 64 tokens each
        requests.append(ScheduledRequest(f"r{k}", prompt, 0, blocks, True, GREEDY, lora_id=by_name.get(lora)))
    batch = SchedulerOutput(step_id=0, requests=requests)
    got = runner.compute_logits(batch)
    base_logits = expected[(0, None)][0]
    for k, key in enumerate(jobs):
        ref = expected[key][0]
        ours = got[f"r{k}"][-1]
        assert torch.allclose(ours, ref, atol=1e-3, rtol=0), (key, (ours - ref).abs().max())
        if key[1] is not None and key[0] == 0:
            assert (ref - base_logits).abs().max() > 0.1  # the adapter does change the model


def test_greedy_tokens_match_peft_in_one_mixed_batch(peft_model, expected, smollm2_model, smollm2_checkpoint):
    _, paths = peft_model
    tok = smollm2_checkpoint.tokenizer
    engine = _engine(smollm2_model, tok, paths)
    jobs = list(expected)
    got = _run(engine, [(tok.encode(PROMPTS[i]), lora) for i, lora in jobs])
    assert got == [expected[key][1] for key in jobs]
    # the references ran each row alone (transformers + peft, one adapter active): so each row of the mixed
    # batch got the tokens it gets alone
    # adapters change the answer (otherwise the test above could not fail)
    assert len({tuple(t) for t in got}) > 2


def test_eviction_and_reload_under_slot_pressure(peft_model, expected, smollm2_model, smollm2_checkpoint):
    _, paths = peft_model
    tok = smollm2_checkpoint.tokenizer
    engine = _engine(smollm2_model, tok, paths, max_loras=1)  # one slot for three adapters
    jobs = [(2, "mlp4"), (0, "attn8"), (1, "all16"), (2, "all16"), (0, None)]
    got = _run(engine, [(tok.encode(PROMPTS[i]), lora) for i, lora in jobs])
    assert got == [expected[key][1] for key in jobs]
    stats = engine.runner.lora_stats()
    assert stats.num_device == 1
    assert stats.num_evictions_total >= 2
    assert stats.num_loads_total >= 3
    # mlp4 was evicted; it is read back into the slot and still right
    assert _run(engine, [(tok.encode(PROMPTS[2]), "mlp4")]) == [expected[(2, "mlp4")][1]]


def test_jax_logits_match_peft(peft_model, expected, smollm2_checkpoint):
    """The JAX runner on the same adapters: one chunk program over every case (base + three adapters)."""
    pytest.importorskip("jax")
    import numpy as np

    from backends.jax import BucketPolicy, JaxModelRunner

    _, paths = peft_model
    tok = smollm2_checkpoint.tokenizer
    runner = JaxModelRunner(
        smollm2_checkpoint, "float32", progress=False, buckets=BucketPolicy(token_buckets=(64,)),
        lora_config=LoraConfig(max_loras=4),
    )  # fmt: skip
    runner.initialize_kv_cache(KVCacheSpec(num_device_blocks=32, num_host_blocks=0, block_size=16))
    by_name = {}
    for name, path in paths.items():
        runner.add_lora(LoraRequest(name, path))
        by_name[name] = LoraRequest(name, path).lora_id
    requests = []
    for k, (i, lora) in enumerate(expected):
        blocks = list(range(4 * k, 4 * k + 4))
        requests.append(
            ScheduledRequest(f"r{k}", tok.encode(PROMPTS[i]), 0, blocks, True, GREEDY, lora_id=by_name.get(lora))
        )
    got = runner.compute_logits(SchedulerOutput(step_id=0, requests=requests))
    for k, key in enumerate(expected):
        ref = expected[key][0].numpy()
        np.testing.assert_allclose(got[f"r{k}"][-1], ref, atol=1e-3, rtol=0, err_msg=str(key))


def test_jax_greedy_tokens_match_peft_in_one_mixed_batch(peft_model, expected, smollm2_checkpoint):
    """The JAX runner in the engine: base + three adapters in one batch (prefill chunk, then batched decodes),
    each row's greedy tokens those transformers + peft give it alone."""
    pytest.importorskip("jax")
    from backends.jax import BucketPolicy, JaxModelRunner

    _, paths = peft_model
    tok = smollm2_checkpoint.tokenizer
    runner = JaxModelRunner(
        smollm2_checkpoint, "float32", progress=False, buckets=BucketPolicy(token_buckets=(64,)),
        lora_config=LoraConfig(max_loras=4),
    )  # fmt: skip
    engine = LLMEngine(
        runner,
        tok,
        SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=16, max_model_len=256),
        CacheConfig(block_size=16, num_device_blocks=32, num_host_blocks=0),
    )
    for name, path in paths.items():
        engine.add_lora(LoraRequest(name, path))
    jobs = list(expected)
    got = _run(engine, [(tok.encode(PROMPTS[i]), lora) for i, lora in jobs])
    assert got == [expected[key][1] for key in jobs]
    assert len({tuple(t) for t in got}) > 2
