"""Model aliases: other names clients may give as ``model``, each standing for a served model or LoRA adapter.

    ``zoo controlplane --model-alias gpt-4o-mini=SmolLM2-135M-Instruct``
    {"model": "gpt-4o-mini", ...}  ─► runs on the nodes serving SmolLM2-135M-Instruct; the reply names
                                      "model": "SmolLM2-135M-Instruct"

Why: applications written against another API name a model the fleet does not serve, and an operator who swaps
the model behind a name should not have to change every client. The rules are the ones users know:

- **The reply names the model that served the request**, not the alias: vLLM's documented rule for several
  ``--served-model-name``s ("the model name in the model field of a response will be the first name in this
  list", vllm-project/vllm, vllm/config/model.py, ModelConfig.served_model_name), and OpenAI's and Anthropic's
  for their own aliases ("gpt-4o" answers as "gpt-4o-2024-08-06").
- **The alias is rewritten before routing**, as production-stack's router does with ``--static-aliases``
  (vllm-project/production-stack, src/vllm_router/routers/request.py, route_general_request: the body's model
  becomes the alias's target before the endpoints are filtered by model).
  Everything after (the router, the metrics' ``model_name`` label, the nodes) sees the real name.
- **``/v1/models`` lists an alias** while its target is served, ``root`` and ``parent`` naming the target, so a
  client that checks the list before calling finds the name it will call.

An alias may not name another alias (one step, no chains or loops), nor be empty; one may name a LoRA adapter. An
alias named like a served model stands for its target (the alias is resolved first): name it apart.
An alias of a model no node serves is refused like an unknown model (404 ``model_not_found``, naming both).
Resolution is one dict look-up per request; the HTTP gateway and the ZeroMQ intake resolve the same table, and
resolving twice changes nothing (a target is never an alias).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping

__all__ = ["aliases_of", "check_model_aliases", "parse_model_alias", "resolve_model", "served_aliases"]

MAX_NAME_CHARS = 256


def check_model_aliases(aliases: Mapping[str, str]) -> None:
    """Raise ValueError naming the first bad entry: an empty or overlong name, an alias of itself, or a chain."""
    for alias, target in aliases.items():
        for what, name in (("alias", alias), ("target", target)):
            if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
                message = f"the {what} must be a name of 1 to {MAX_NAME_CHARS} characters"
                raise ValueError(f"model alias {alias!r}: {message}")
        if alias == target:
            raise ValueError(f"model alias {alias!r} names itself")
        if target in aliases:
            raise ValueError(f"model alias {alias!r} names another alias, {target!r} (name the model itself)")


def aliases_of(frontend: object) -> Mapping[str, str]:
    """A front door's view of the control plane's aliases (``ControlPlane.model_aliases``; {}: a frontend without)."""
    return getattr(frontend, "model_aliases", None) or {}


def resolve_model(aliases: Mapping[str, str], name: str | None) -> str | None:
    """The model ``name`` stands for: an alias's target, else the name itself (None stays None: the default)."""
    return aliases.get(name, name) if name else name


def served_aliases(aliases: Mapping[str, str], served: Iterable[str]) -> list[tuple[str, str]]:
    """(alias, target) for each alias whose target is served now (a model some node serves, or an adapter)."""
    served = set(served)
    return [(alias, target) for alias, target in aliases.items() if target in served]


def parse_model_alias(text: str) -> tuple[str, str]:
    """``--model-alias ALIAS=MODEL`` as (alias, model); an argparse type."""
    alias, sep, target = text.partition("=")
    if not sep or not alias.strip() or not target.strip():
        raise argparse.ArgumentTypeError(f"--model-alias takes ALIAS=MODEL, got {text!r}")
    return alias.strip(), target.strip()
