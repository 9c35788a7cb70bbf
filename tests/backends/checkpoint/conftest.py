"""Fixtures shared by the checkpoint tests: the default model opened once per session, and small factories."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType

from backends.checkpoint import Checkpoint, ModelConfig, Tokenizer, load_checkpoint
from backends.checkpoint.llama_layout import hf_name_from_gguf, llama_tensor_shapes
from backends.checkpoint.locate import default_model_path
from backends.checkpoint.tokenizer import bytes_to_unicode


@pytest.fixture(scope="session")
def smollm_checkpoint() -> Checkpoint:
    try:
        default_model_path()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    return load_checkpoint()


@pytest.fixture(scope="session")
def smollm_tokenizer(smollm_checkpoint: Checkpoint) -> Tokenizer:
    return smollm_checkpoint.tokenizer


# A tiny Llama whose files the tests write themselves, in both formats.
TINY_CONFIG = ModelConfig(
    name="tiny-llama",
    vocab_size=263,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    rope_scaling=None,
    max_position_embeddings=128,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_id=2,
)
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _byte_alphabet() -> list[str]:
    table = bytes_to_unicode()
    return [table[byte] for byte in range(256)]


class TinyModels:
    """Writers for tiny random Llama checkpoints: GGUF files (as llama.cpp's converter lays them out) and
    Hugging Face directories."""

    control_tokens = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
    merges = ("Ġ t", "h e", "Ġt he", "i n")

    config = TINY_CONFIG

    @property
    def tokens(self) -> list[str]:
        return [*self.control_tokens, *_byte_alphabet(), "Ġt", "he", "Ġthe", "in"]

    def state_dict(self, config: ModelConfig = TINY_CONFIG, seed: int = 0) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {
            name: rng.standard_normal(shape).astype(np.float32) for name, shape in llama_tensor_shapes(config).items()
        }

    def write_gguf(
        self,
        path: Path,
        state_dict: dict[str, np.ndarray],
        config: ModelConfig = TINY_CONFIG,
        *,
        architecture: str = "llama",
        quant: GGMLQuantizationType | None = None,
        rope_freqs: np.ndarray | None = None,
        extra_metadata: dict[str, str | int | float] | None = None,
    ) -> Path:
        """HF tensors -> llama.cpp names, q/k rows permuted like convert_hf_to_gguf.py, 2-D weights quantized."""
        writer = gguf.GGUFWriter(path, architecture)
        writer.add_block_count(config.num_hidden_layers)
        writer.add_context_length(config.max_position_embeddings)
        writer.add_embedding_length(config.hidden_size)
        writer.add_feed_forward_length(config.intermediate_size)
        writer.add_head_count(config.num_attention_heads)
        writer.add_head_count_kv(config.num_key_value_heads)
        writer.add_rope_freq_base(config.rope_theta)
        writer.add_rope_dimension_count(config.head_dim)
        writer.add_layer_norm_rms_eps(config.rms_norm_eps)
        writer.add_vocab_size(config.vocab_size)
        for key, value in (extra_metadata or {}).items():
            if isinstance(value, str):
                writer.add_string(key, value)
            elif isinstance(value, int):
                writer.add_uint32(key, value)
            else:
                writer.add_float32(key, value)
        tokens = self.tokens
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("smollm")
        writer.add_token_list(tokens)
        writer.add_token_types([3 if token in self.control_tokens else 1 for token in tokens])
        writer.add_token_merges(list(self.merges))
        writer.add_bos_token_id(1)
        writer.add_eos_token_id(2)
        writer.add_pad_token_id(2)
        writer.add_add_bos_token(False)
        writer.add_chat_template(TINY_CHAT_TEMPLATE)
        gguf_names = {hf: gg for gg in _all_gguf_names(config) if (hf := hf_name_from_gguf(gg)) is not None}
        for hf_name, weight in state_dict.items():
            if hf_name.endswith("q_proj.weight"):
                weight = llama_cpp_permute(weight, config.num_attention_heads, config.num_attention_heads)
            elif hf_name.endswith("k_proj.weight"):
                weight = llama_cpp_permute(weight, config.num_attention_heads, config.num_key_value_heads)
            if quant is not None and weight.ndim == 2:
                writer.add_tensor(gguf_names[hf_name], gguf.quants.quantize(weight, quant), raw_dtype=quant)
            else:
                writer.add_tensor(gguf_names[hf_name], weight)
        if rope_freqs is not None:
            writer.add_tensor("rope_freqs.weight", rope_freqs.astype(np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path

    def write_hf_dir(
        self,
        path: Path,
        state_dict: dict[str, np.ndarray],
        tokenizer: Tokenizer,
        config: ModelConfig = TINY_CONFIG,
        *,
        num_shards: int = 1,
        bf16: bool = False,
    ) -> Path:
        """config.json, model(-0000i-of-0000n).safetensors (+ index when sharded), tokenizer files."""
        import torch  # only this writer needs it (numpy cannot hold bfloat16)
        from safetensors.torch import save_file

        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(config.to_hf_dict()))
        names = list(state_dict)
        weight_map = {}
        for shard in range(num_shards):
            shard_name = (
                "model.safetensors" if num_shards == 1 else f"model-{shard + 1:05d}-of-{num_shards:05d}.safetensors"
            )
            tensors = {name: torch.from_numpy(state_dict[name]) for name in names[shard::num_shards]}
            if bf16:
                tensors = {name: tensor.to(torch.bfloat16) for name, tensor in tensors.items()}
            save_file(tensors, str(path / shard_name))
            weight_map.update(dict.fromkeys(tensors, shard_name))
        if num_shards > 1:
            (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
        tokenizer.backend_tokenizer.save(str(path / "tokenizer.json"))
        tokenizer_config = {
            "bos_token": tokenizer.id_to_token(tokenizer.bos_token_id),
            "eos_token": {"content": tokenizer.id_to_token(tokenizer.eos_token_id)},
            "pad_token": tokenizer.id_to_token(tokenizer.pad_token_id),
            "chat_template": tokenizer.chat_template,
        }
        (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
        return path


def llama_cpp_permute(weights: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """What llama.cpp's converter does to q/k rows, written as explicit row indices (an oracle independent
    of the reshape in llama_layout): per head, HF's half-split rows [x0..x_{d/2-1} | y0..y_{d/2-1}] become
    interleaved pairs [x0, y0, x1, y1, ...]."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    head_dim = weights.shape[0] // n_head
    half = head_dim // 2
    order = []
    for h in range(n_head):
        for i in range(half):
            order += [h * head_dim + i, h * head_dim + half + i]
    return weights[np.array(order)]


def _all_gguf_names(config: ModelConfig) -> list[str]:
    block = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
    names = ["token_embd.weight", "output_norm.weight", "output.weight"]
    for layer in range(config.num_hidden_layers):
        names += [f"blk.{layer}.{suffix}.weight" for suffix in block]
    return names


@pytest.fixture(scope="session")
def tiny() -> TinyModels:
    return TinyModels()


@pytest.fixture(scope="session")
def tiny_gguf_path(tiny: TinyModels, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny.write_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.F32.gguf", tiny.state_dict())
