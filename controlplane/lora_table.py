"""The fleet's LoRA adapters: what a client may name as ``model``, the base model each one runs on, where
its files are. Sans-IO: checking an adapter's files is a function injected by whoever builds the table.

vLLM's conventions: adapters are given at start (``--lora-modules name=path``) or loaded and unloaded at run
time (``POST /v1/load_lora_adapter`` / ``/v1/unload_lora_adapter``, off unless enabled); ``/v1/models``
lists each with its ``parent`` (the base model); a request selects one by putting its name in ``model``.

Nodes learn an adapter from the requests that use it (``GenerateRequest.lora_name`` / ``lora_path``) and
read it on first use, so loading one here sends nothing to the nodes; they must see the same path
(a shared or replicated file system, as with vLLM's multi-node serving).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.lora import LoraRequest


class LoraTableError(ValueError):
    """A load or unload that cannot be done. ``status``: the HTTP status it maps to (400 or 404)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class LoraEntry:
    lora: LoraRequest
    parent: str | None  # the base model it runs on; None = the fleet's default model


class LoraTable:
    """name -> LoraEntry. ``check(path)`` raises ValueError when the directory is not a usable adapter."""

    def __init__(self, check: Callable[[str], None] | None = None) -> None:
        self._check = check
        self._entries: dict[str, LoraEntry] = {}

    def add(self, name: str, path: str, parent: str | None = None, served_models: Sequence[str] = ()) -> LoraEntry:
        """Register adapter ``name`` at ``path`` on ``parent``; LoraTableError (400) if the name is taken (by
        an adapter, or by a base model or an alias: ``served_models``) or the files are refused."""
        if not isinstance(name, str) or not name:
            raise LoraTableError("lora_name must be a non-empty string")
        if not isinstance(path, str) or not path:
            raise LoraTableError("lora_path must be a non-empty string")
        if name in self._entries:
            raise LoraTableError(f"The lora adapter '{name}' has already been loaded.")
        if name in served_models or name == parent:
            raise LoraTableError(f"'{name}' is the name of a base model or a model alias")
        if self._check is not None:
            try:
                self._check(path)
            except (ValueError, OSError) as error:
                raise LoraTableError(f"cannot load LoRA adapter '{name}': {error}") from error
        try:
            entry = LoraEntry(LoraRequest(name, path), parent)
        except ValueError as error:
            raise LoraTableError(str(error)) from error
        self._entries[name] = entry
        return entry

    def remove(self, name: str) -> LoraEntry:
        """LoraTableError (404) for an unknown name."""
        entry = self._entries.pop(name, None) if isinstance(name, str) else None
        if entry is None:
            raise LoraTableError(f"The lora adapter '{name}' cannot be found.", status=404)
        return entry

    def get(self, name: str | None) -> LoraEntry | None:
        return None if name is None else self._entries.get(name)

    def models(self, default_parent: str) -> list[tuple[str, str, str]]:
        """(name, parent model, path) of every adapter; ``default_parent`` for one loaded without a parent."""
        return [(e.lora.name, e.parent or default_parent, e.lora.path) for e in self.entries()]

    def entries(self) -> list[LoraEntry]:
        return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)
