"""A node's serving digest: what decides the tokens it samples for a given request and seed, hashed. The hello carries
it (``NodeHello.config_digest``); the gateway shows it as a reply's ``system_fingerprint``
(controlplane/gateway/system_fingerprint.py), so a client that fixes ``seed`` can tell when the backend behind its
replies changed (OpenAI's meaning of the field). In a mismatched fleet that is not one value: a T4 in fp32 under
torch and an H100 in bf16 under JAX sample different tokens from the same logits' neighbourhood.

What goes in: the served model and its checkpoint's identity (file name and size: the weights are not hashed, a
multi-GB read at every start), the backend and the kernels it chose, the device (its name: a CPU's vector units and
thread count change the float sums), the numerics' settings of the engine (dtype, KV dtype, tensor parallelism and
its all-reduce's compression, the attention kernel, CUDA graphs, the CPU decode kernel, speculative decoding) and the
package's version. Left out: what changes speed, not tokens (block counts, batch sizes, ports, the node's id).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from engine.config import EngineConfig
from transport.messages import HardwareInfo
from transport.package_version import package_version

DIGEST_HEX_CHARS = 16
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


def serving_digest(
    *, model: str, backend: str, hardware: HardwareInfo, kernels: str, engine: EngineConfig | None
) -> str:
    """``DIGEST_HEX_CHARS`` hex digits of a SHA-256 over the parts above (``engine`` None: an engine built by the
    caller, whose settings are not known here; its backend, kernels and device still count)."""
    parts: dict[str, object] = {
        "model": model,
        "backend": backend,
        "device": [hardware.device_name, hardware.gpu_type, hardware.compute_capability],
        "kernels": kernels,
        "version": package_version(),
    }
    if engine is not None:
        spec = engine.speculative
        parts["engine"] = {
            "checkpoint": checkpoint_identity(engine.model),
            "dtype": engine.dtype,
            "kv_dtype": engine.kv_dtype,
            "tp": [engine.tp, engine.tp_allreduce, engine.tp_domain_size, engine.tp_compression],
            "attention_backend": engine.attention_backend,
            "cuda_graphs": engine.cuda_graphs,
            "cpu_decode_kernel": engine.cpu_decode_kernel,
            "speculative": None if spec is None else [spec.method, spec.num_spec_tokens, spec.draft_model],
        }
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_HEX_CHARS]


def checkpoint_identity(model: str | None) -> list:
    """A checkpoint's name and the sizes of its weight files (a file: its own; a folder: each weight file's, by
    name); a simulated model or the embedded default: its name alone. A path that cannot be read: its name."""
    if model is None:
        return ["default"]
    path = Path(model)
    try:
        if path.is_file():
            return [path.name, path.stat().st_size]
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in _WEIGHT_SUFFIXES and p.is_file())
            return [path.name, [[p.name, p.stat().st_size] for p in files]]
    except OSError:
        pass
    return [os.path.basename(model) or model]
