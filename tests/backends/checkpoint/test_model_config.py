from __future__ import annotations

import dataclasses

import pytest

from backends.checkpoint import ModelConfig

SMOLLM = dict(
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


def make_config(**overrides) -> ModelConfig:
    return ModelConfig(**{**SMOLLM, **overrides})


def test_num_params_counts_tied_embedding_once() -> None:
    assert make_config().num_params == 134_515_008
    assert make_config(tie_word_embeddings=False).num_params == 134_515_008 + 49152 * 576


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", ""),
        ("vocab_size", 0),
        ("hidden_size", -1),
        ("intermediate_size", 1.5),
        ("num_hidden_layers", True),
        ("num_key_value_heads", 4),
        ("head_dim", 63),
        ("rms_norm_eps", 0.0),
        ("rope_theta", float("inf")),
        ("max_position_embeddings", 0),
        ("tie_word_embeddings", 1),
        ("bos_token_id", 49152),
        ("eos_token_id", -1),
        ("rope_scaling", {"rope_type": "llama3", "factor": 8.0}),
        ("rope_scaling", {"rope_type": "ntk-magic", "factor": 2.0}),
        ("rope_scaling", [("factor", 2.0)]),
    ],
)
def test_invalid_fields_raise_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        make_config(**{field: value})


def test_rope_scaling_is_normalised_and_copied() -> None:
    scaling = {"type": "linear", "factor": 2.0}
    config = make_config(rope_scaling=scaling)
    scaling["factor"] = 4.0
    assert config.rope_scaling == {"type": "linear", "rope_type": "linear", "factor": 2.0}
    assert make_config(rope_scaling={"rope_type": "default"}).rope_scaling is None


def test_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        make_config().hidden_size = 1  # type: ignore[misc]


def test_hf_dict_round_trip() -> None:
    llama3 = {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    config = make_config(rope_scaling=llama3, tie_word_embeddings=False)
    assert ModelConfig.from_hf_dict(config.to_hf_dict(), name=config.name) == config


def test_hf_dict_defaults_and_transformers5_rope_parameters() -> None:
    hf = {
        "model_type": "llama",
        "vocab_size": 100,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "eos_token_id": [2, 7],
        "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
    }
    config = ModelConfig.from_hf_dict(hf, name="x")
    assert (config.head_dim, config.num_key_value_heads, config.rope_theta) == (16, 4, 500000.0)
    assert (config.rope_scaling, config.tie_word_embeddings, config.eos_token_id) == (None, False, 2)


@pytest.mark.parametrize(
    ("hf", "message"),
    [
        ({"model_type": "mistral", "architectures": ["MistralForCausalLM"]}, "unsupported architecture"),
        ({"model_type": "llama", "attention_bias": True}, "attention_bias"),
        ({"model_type": "llama", "vocab_size": 10}, "missing required keys: hidden_size"),
    ],
)
def test_hf_dict_errors(hf: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf_dict(hf, name="x")
