from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType

from backends.checkpoint import Checkpoint, ModelConfig, load_checkpoint
from backends.checkpoint.gguf_loader import llama3_rope_factors, llama3_scaling_from_rope_freqs
from backends.checkpoint.llama_layout import permute_for_gguf


def test_default_model_config_matches_checked_facts(smollm_checkpoint: Checkpoint) -> None:
    config = smollm_checkpoint.config
    assert smollm_checkpoint.format == "gguf"
    assert config == ModelConfig(
        name="SmolLM2-135M-Instruct",
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        rms_norm_eps=1e-5,
        rope_theta=100000.0,
        rope_scaling=None,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
    )
    assert config.num_params == 134_515_008


def test_default_model_tensor_names_and_shapes(smollm_checkpoint: Checkpoint) -> None:
    names = smollm_checkpoint.tensor_names()
    assert len(names) == 1 + 30 * 9 + 1
    assert names[0] == "model.embed_tokens.weight"
    assert names[-1] == "model.norm.weight"
    assert "lm_head.weight" not in names
    expected = {
        "model.embed_tokens.weight": (49152, 576),
        "model.layers.0.input_layernorm.weight": (576,),
        "model.layers.0.self_attn.q_proj.weight": (576, 576),
        "model.layers.0.self_attn.k_proj.weight": (192, 576),
        "model.layers.0.self_attn.v_proj.weight": (192, 576),
        "model.layers.0.self_attn.o_proj.weight": (576, 576),
        "model.layers.29.post_attention_layernorm.weight": (576,),
        "model.layers.29.mlp.gate_proj.weight": (1536, 576),
        "model.layers.29.mlp.up_proj.weight": (1536, 576),
        "model.layers.29.mlp.down_proj.weight": (576, 1536),
        "model.norm.weight": (576,),
    }
    for name, shape in expected.items():
        tensor = smollm_checkpoint.get_tensor(name)
        assert tensor.shape == shape, name
        assert tensor.dtype == np.float32 and tensor.flags.c_contiguous and tensor.flags.writeable
        assert np.isfinite(tensor).all()


def test_default_model_q_k_rows_are_unpermuted(smollm_checkpoint: Checkpoint) -> None:
    reader = gguf.GGUFReader(smollm_checkpoint.path)
    raw = {tensor.name: tensor for tensor in reader.tensors}
    for gguf_name, hf_name, num_heads in (
        ("blk.7.attn_q.weight", "model.layers.7.self_attn.q_proj.weight", 9),
        ("blk.7.attn_k.weight", "model.layers.7.self_attn.k_proj.weight", 3),
    ):
        tensor = raw[gguf_name]
        stored = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        np.testing.assert_array_equal(permute_for_gguf(smollm_checkpoint.get_tensor(hf_name), num_heads), stored)
    v = raw["blk.7.attn_v.weight"]
    np.testing.assert_array_equal(
        smollm_checkpoint.get_tensor("model.layers.7.self_attn.v_proj.weight"),
        gguf.quants.dequantize(v.data, v.tensor_type),
    )


def test_unknown_tensor_name_raises_key_error(smollm_checkpoint: Checkpoint) -> None:
    with pytest.raises(KeyError, match=r"lm_head\.weight"):
        smollm_checkpoint.get_tensor("lm_head.weight")


def test_tiny_f32_gguf_round_trips_exactly(tiny, tiny_gguf_path: Path, capsys: pytest.CaptureFixture) -> None:
    checkpoint = load_checkpoint(tiny_gguf_path)
    expected = tiny.state_dict()
    assert checkpoint.config.name == "tiny-llama"
    assert checkpoint.config.num_params == sum(weight.size for weight in expected.values())
    assert checkpoint.tensor_names() == list(expected)
    loaded = dict(checkpoint.iter_tensors(progress=True))
    assert list(loaded) == list(expected)
    for name, weight in expected.items():
        np.testing.assert_array_equal(loaded[name], weight, err_msg=name)
    assert "loading tiny-llama" in capsys.readouterr().err
    assert [name for name, _ in checkpoint.iter_tensors(progress=False)] == list(expected)
    assert capsys.readouterr().err == ""


def test_tiny_q8_0_gguf_dequantizes_close(tiny, tmp_path: Path) -> None:
    expected = tiny.state_dict(seed=3)
    path = tiny.write_gguf(tmp_path / "tiny.Q8_0.gguf", expected, quant=GGMLQuantizationType.Q8_0)
    checkpoint = load_checkpoint(path)
    for name, weight in expected.items():
        loaded = checkpoint.get_tensor(name)
        if weight.ndim == 1:
            np.testing.assert_array_equal(loaded, weight)
        else:
            np.testing.assert_allclose(loaded, weight, atol=np.abs(weight).max() / 100, err_msg=name)


def test_gguf_rope_scaling_metadata(tiny, tmp_path: Path) -> None:
    metadata = {"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0}
    path = tiny.write_gguf(tmp_path / "linear.gguf", tiny.state_dict(), extra_metadata=metadata)
    assert load_checkpoint(path).config.rope_scaling == {"rope_type": "linear", "factor": 4.0}


def test_gguf_llama3_rope_freqs_become_rope_scaling(tiny, tmp_path: Path) -> None:
    config = load_checkpoint(
        tiny.write_gguf(
            tmp_path / "llama3.gguf",
            tiny.state_dict(),
            rope_freqs=llama3_rope_factors(8, 10000.0, 8.0, 1.0, 4.0, 64),
            extra_metadata={"llama.rope.scaling.original_context_length": 64},
        )
    ).config
    assert config.rope_scaling == {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }


def test_llama3_scaling_recovered_without_original_context_and_rejected_when_unknown() -> None:
    factors = llama3_rope_factors(128, 500000.0, 32.0, 1.0, 4.0, 8192)  # Llama 3.2
    scaling = llama3_scaling_from_rope_freqs(factors, 128, 500000.0, None)
    assert scaling is not None
    assert (scaling["factor"], scaling["original_max_position_embeddings"]) == (32.0, 8192)
    assert llama3_scaling_from_rope_freqs(np.ones(64), 128, 500000.0, None) is None
    with pytest.raises(ValueError, match="unsupported"):
        llama3_scaling_from_rope_freqs(np.linspace(1.0, 3.0, 64), 128, 500000.0, None)


def test_non_llama_gguf_is_rejected(tiny, tmp_path: Path) -> None:
    path = tiny.write_gguf(tmp_path / "qwen.gguf", tiny.state_dict(), architecture="qwen2")
    with pytest.raises(ValueError, match="unsupported architecture 'qwen2'"):
        load_checkpoint(path)
