from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from backends.checkpoint import Checkpoint, Tokenizer, load_checkpoint


@pytest.fixture(scope="module")
def tiny_tokenizer(tiny_gguf_path: Path) -> Tokenizer:
    return load_checkpoint(tiny_gguf_path).tokenizer


def test_hf_dir_round_trip(tiny, tiny_tokenizer: Tokenizer, tmp_path: Path) -> None:
    expected = tiny.state_dict(seed=5)
    path = tiny.write_hf_dir(tmp_path / "tiny-hf", expected, tiny_tokenizer)
    checkpoint = load_checkpoint(path)
    assert checkpoint.format == "hf"
    assert checkpoint.path == path
    assert checkpoint.config.name == "tiny-hf"
    assert dataclasses.replace(checkpoint.config, name="tiny-llama") == tiny.config
    assert checkpoint.tensor_names() == list(expected)
    for name, weight in checkpoint.iter_tensors(progress=False):
        assert weight.dtype == np.float32 and weight.flags.writeable
        np.testing.assert_array_equal(weight, expected[name], err_msg=name)

    tokenizer = checkpoint.tokenizer
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (1, 2, 2)
    assert tokenizer.special_token_ids == tiny_tokenizer.special_token_ids
    text = "<|im_start|>the thin tin, 42 ünïcode<|im_end|>"
    assert tokenizer.encode(text) == tiny_tokenizer.encode(text)
    assert tokenizer.decode(tokenizer.encode(text)) == "the thin tin, 42 ünïcode"
    messages = [{"role": "user", "content": "hi"}]
    assert tokenizer.apply_chat_template(messages) == tiny_tokenizer.apply_chat_template(messages)


def test_sharded_bf16_hf_dir(tiny, tiny_tokenizer: Tokenizer, tmp_path: Path) -> None:
    expected = tiny.state_dict(seed=6)
    path = tiny.write_hf_dir(tmp_path / "sharded", expected, tiny_tokenizer, num_shards=3, bf16=True)
    assert len(list(path.glob("*.safetensors"))) == 3
    checkpoint = load_checkpoint(path)
    for name, weight in checkpoint.iter_tensors(progress=False):
        rounded = torch.from_numpy(expected[name]).to(torch.bfloat16).float().numpy()
        np.testing.assert_array_equal(weight, rounded, err_msg=name)


def test_tied_config_ignores_lm_head_and_untied_requires_it(tiny, tiny_tokenizer: Tokenizer, tmp_path: Path) -> None:
    tied = dataclasses.replace(tiny.config, tie_word_embeddings=True)
    path = tiny.write_hf_dir(tmp_path / "tied", tiny.state_dict(), tiny_tokenizer, config=tied)
    assert "lm_head.weight" not in load_checkpoint(path).tensor_names()

    state_dict = tiny.state_dict()
    del state_dict["lm_head.weight"]
    path = tiny.write_hf_dir(tmp_path / "untied", state_dict, tiny_tokenizer)
    with pytest.raises(ValueError, match="lacks 1 tensors"):
        load_checkpoint(path)


def test_wrong_tensor_shape_is_rejected(tiny, tiny_tokenizer: Tokenizer, tmp_path: Path) -> None:
    state_dict = tiny.state_dict()
    state_dict["model.layers.1.mlp.up_proj.weight"] = np.zeros((3, 3), dtype=np.float32)
    path = tiny.write_hf_dir(tmp_path / "bad", state_dict, tiny_tokenizer)
    with pytest.raises(ValueError, match=r"up_proj\.weight' has shape"):
        load_checkpoint(path)


def test_smollm_tokenizer_survives_tokenizer_json(smollm_checkpoint: Checkpoint, tmp_path: Path) -> None:
    original = smollm_checkpoint.tokenizer
    original.backend_tokenizer.save(str(tmp_path / "tokenizer.json"))
    tokenizer_config = {
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|im_end|>",
        "chat_template": original.chat_template,
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    reloaded = Tokenizer.from_hf_dir(tmp_path)
    assert (reloaded.bos_token_id, reloaded.eos_token_id, reloaded.pad_token_id, reloaded.vocab_size) == (
        1,
        2,
        2,
        49152,
    )
    assert reloaded.special_token_ids == original.special_token_ids
    text = "<|im_start|>user\n  12345 café 日本 def f(): pass<|im_end|>"
    assert reloaded.encode(text) == original.encode(text)
    messages = [{"role": "user", "content": "hi"}]
    assert reloaded.apply_chat_template(messages) == original.apply_chat_template(messages)


def test_chat_template_jinja_file_wins(tiny_tokenizer: Tokenizer, tmp_path: Path) -> None:
    tiny_tokenizer.backend_tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "chat_template.jinja").write_text(
        "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    )
    tokenizer = Tokenizer.from_hf_dir(tmp_path)
    assert tokenizer.bos_token_id is None
    assert tokenizer.apply_chat_template([{"role": "user", "content": "x"}]) == "[user]x"
