"""Model shapes served by simulated GPUs, as ``ModelConfig``s (Hugging Face config.json figures).

Names say the model is simulated (``sim:llama-3-8b``) so that no client mistakes a simulated node's dummy
tokens for text. Llama-2-7B/70B are here for calibration (the measured operator timings are of their shapes).
"""

from __future__ import annotations

from backends.checkpoint.model_config import ModelConfig

SIM_PREFIX = "sim:"


def _llama(
    name: str,
    *,
    vocab: int,
    hidden: int,
    intermediate: int,
    layers: int,
    heads: int,
    kv_heads: int,
    max_len: int,
    rope_theta: float,
    bos: int,
    eos: int,
    tied: bool = False,
) -> ModelConfig:
    return ModelConfig(
        name=SIM_PREFIX + name,
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        rms_norm_eps=1e-5,
        rope_theta=rope_theta,
        rope_scaling=None,
        max_position_embeddings=max_len,
        tie_word_embeddings=tied,
        bos_token_id=bos,
        eos_token_id=eos,
    )


SIM_MODELS: dict[str, ModelConfig] = {
    m.name: m
    for m in (
        _llama(
            "llama-3-8b", vocab=128256, hidden=4096, intermediate=14336, layers=32, heads=32, kv_heads=8,
            max_len=8192, rope_theta=500000.0, bos=128000, eos=128001,
        ),
        # Llama-3.1-8B: Llama-3-8B's shape with a 128k context (its llama3 RoPE scaling changes no cost)
        _llama(
            "llama-3.1-8b", vocab=128256, hidden=4096, intermediate=14336, layers=32, heads=32, kv_heads=8,
            max_len=131072, rope_theta=500000.0, bos=128000, eos=128001,
        ),
        _llama(
            "llama-3-70b", vocab=128256, hidden=8192, intermediate=28672, layers=80, heads=64, kv_heads=8,
            max_len=8192, rope_theta=500000.0, bos=128000, eos=128001,
        ),
        _llama(
            "smollm2-135m", vocab=49152, hidden=576, intermediate=1536, layers=30, heads=9, kv_heads=3,
            max_len=8192, rope_theta=100000.0, bos=1, eos=2, tied=True,
        ),
        _llama(  # Llama 3.2 1B: the usual draft for a Llama 3 8B target (same tokenizer)
            "llama-3.2-1b", vocab=128256, hidden=2048, intermediate=8192, layers=16, heads=32, kv_heads=8,
            max_len=8192, rope_theta=500000.0, bos=128000, eos=128001, tied=True,
        ),
        _llama(
            "llama-2-7b", vocab=32000, hidden=4096, intermediate=11008, layers=32, heads=32, kv_heads=32,
            max_len=4096, rope_theta=10000.0, bos=1, eos=2,
        ),
        _llama(
            "llama-2-70b", vocab=32000, hidden=8192, intermediate=28672, layers=80, heads=64, kv_heads=8,
            max_len=4096, rope_theta=10000.0, bos=1, eos=2,
        ),
    )
}  # fmt: skip


def sim_model(name: str) -> ModelConfig:
    """The shape called ``name`` (``sim:`` prefix optional); ValueError listing the valid names."""
    key = name if name.startswith(SIM_PREFIX) else SIM_PREFIX + name
    config = SIM_MODELS.get(key.lower())
    if config is None:
        raise ValueError(f"unknown simulated model {name!r}; valid: {', '.join(SIM_MODELS)}")
    return config


def weight_bytes(config: ModelConfig, bytes_per_param: float = 2.0) -> float:
    return config.num_params * bytes_per_param


def kv_bytes_per_token(config: ModelConfig, bytes_per_value: int = 2) -> int:
    """K and V of every layer for one token (whole model; a TP rank holds 1/tp of it)."""
    return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * bytes_per_value
