"""The one reader of the project's TOML files (zoo.toml, cells, simulated fleets): a file's table, or a ValueError
naming the file. tomllib recurses into inline tables and arrays, so a value nested past the interpreter's depth
raises RecursionError; that is refused here as invalid TOML like any other, so no such file ends a command with a
traceback. Opening the file raises what ``open`` raises (FileNotFoundError, ...)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any


def load_toml(path: str | Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        try:
            return tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{path}: invalid TOML: {e}") from None
        except RecursionError:
            raise ValueError(f"{path}: invalid TOML: values nested deeper than its parser reads") from None
