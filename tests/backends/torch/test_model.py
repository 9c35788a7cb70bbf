"""Model pieces: RoPE tables vs transformers' init functions, weight loading errors."""

from __future__ import annotations

import pytest
import torch

from backends.torch.model import LlamaModel, rope_inv_freq
from backends.torch.weights import load_weights, random_state_dict


@pytest.mark.parametrize(
    "scaling",
    [
        None,
        {"rope_type": "linear", "factor": 4.0},
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    ],
)
def test_rope_inv_freq_matches_transformers(scaling):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope_parameters = {"rope_type": "default", "rope_theta": 500000.0}
    if scaling:
        rope_parameters.update(scaling)
    config = LlamaConfig(
        hidden_size=256, num_attention_heads=4, max_position_embeddings=16384, rope_parameters=rope_parameters
    )
    if scaling:
        ref, _ = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](config, "cpu")
    else:
        ref = 1.0 / (500000.0 ** (torch.arange(0, 64, 2, dtype=torch.int64).float() / 64))
    torch.testing.assert_close(rope_inv_freq(64, 500000.0, scaling), ref, atol=0, rtol=1e-6)


def test_unknown_rope_type_rejected():
    with pytest.raises(ValueError, match="unsupported rope_scaling"):
        rope_inv_freq(64, 10000.0, {"rope_type": "yarn", "factor": 2.0})


def test_load_weights_checks_names_and_shapes(kit):
    config = kit.tiny_config(tie_word_embeddings=False)
    sd = random_state_dict(config)
    model = LlamaModel(config)
    load_weights(model, sd.items())
    assert torch.equal(model.lm_head, sd["lm_head.weight"])
    assert torch.equal(model.layers[1].qkv_proj[48:64], sd["model.layers.1.self_attn.k_proj.weight"])
    bad = dict(sd)
    del bad["model.layers.0.mlp.up_proj.weight"]
    with pytest.raises(ValueError, match="lacks 1 tensors"):
        load_weights(LlamaModel(config), bad.items())
    bad = dict(sd, **{"model.norm.weight": torch.ones(3)})
    with pytest.raises(ValueError, match="shape"):
        load_weights(LlamaModel(config), bad.items())
