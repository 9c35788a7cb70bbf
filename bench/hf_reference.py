"""The independent reference: Hugging Face transformers loading the same GGUF, offline.

transformers' GGUF loading dequantizes and converts every tensor (~30 s here). The first load saves
the resulting state dict as safetensors under .cache/ (keyed by the GGUF's size and mtime); later loads
rebuild the model from that file in a few seconds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from bench.workload import REPO_ROOT

CACHE_DIR = REPO_ROOT / ".cache" / "hf_reference"


def load_hf_reference(gguf_path: Path, dtype: str = "float32"):
    """A transformers causal LM with the weights of ``gguf_path``, in eval mode, on the CPU."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    st = gguf_path.stat()
    key = f"{gguf_path.stem}-{st.st_size}-{int(st.st_mtime)}"
    weights, config_file = CACHE_DIR / f"{key}.safetensors", CACHE_DIR / f"{key}.config.json"
    if weights.exists() and config_file.exists():
        config = AutoConfig.for_model(**json.loads(config_file.read_text()))
        # built on the CPU (not meta): RoPE's inv_freq is a non-persistent buffer the file lacks
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
        missing, unexpected = model.load_state_dict(load_file(str(weights)), strict=False)
        if unexpected or any(k != "lm_head.weight" for k in missing):
            raise RuntimeError(f"cached reference does not fit its config: {missing=} {unexpected=}")
        model.tie_weights()
    else:
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf_path.parent), gguf_file=gguf_path.name, torch_dtype=torch.float32
        )
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        if model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        tmp = weights.with_suffix(".tmp")
        save_file(state, str(tmp))
        tmp.rename(weights)
        config_file.write_text(model.config.to_json_string())
    return model.to(torch_dtype).eval()
