"""`zoo export-tokenizer DIR`: a Hugging Face tokenizer folder that encodes, decodes and renders chat prompts
exactly as the control plane does, loadable offline (by our own loader, and by transformers.AutoTokenizer)."""

from __future__ import annotations

import json

import pytest

from backends.checkpoint.tokenizer import Tokenizer
from zoo.cli import main
from zoo.export_tokenizer import export_tokenizer

TEXTS = ["Hello, world — café 北京 12345", "<|im_start|>user\nHi<|im_end|>", "  two  spaces\n\ttab"]
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def test_the_cli_writes_a_folder_our_loader_reads_back(tmp_path, smollm2_gguf_path, smollm2_checkpoint):
    out = tmp_path / "tok"
    assert main(["export-tokenizer", str(out), "--model", str(smollm2_gguf_path)]) == 0
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast" and config["model_max_length"] == 8192
    assert config["eos_token"] == "<|im_end|>"
    served, exported = smollm2_checkpoint.tokenizer, Tokenizer.from_hf_dir(out)
    for text in TEXTS:
        assert exported.encode(text) == served.encode(text)
        assert exported.decode(served.encode(text), skip_special_tokens=False) == text
    assert (exported.bos_token_id, exported.eos_token_id, exported.pad_token_id) == (1, 2, 2)
    assert exported.apply_chat_template(MESSAGES) == served.apply_chat_template(MESSAGES)


@pytest.mark.slow
def test_transformers_autotokenizer_loads_it_offline(tmp_path, smollm2_checkpoint, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoTokenizer

    export_tokenizer(smollm2_checkpoint.tokenizer, tmp_path, model_max_length=8192)
    hf = AutoTokenizer.from_pretrained(str(tmp_path))
    served = smollm2_checkpoint.tokenizer
    for text in TEXTS:
        assert hf.encode(text) == served.encode(text)
    assert hf.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True) == served.apply_chat_template(
        MESSAGES
    )
    assert (hf.eos_token, hf.model_max_length) == ("<|im_end|>", 8192)
