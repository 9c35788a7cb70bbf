"""``--router-knobs``: RouterConfig fields an operator sets from one JSON object (``zoo controlplane`` / ``zoo up``,
``zoo sim``: sim/router_knobs.py).

The policies' own knobs (hardware_aware's SLO terms, the prefix-aware thresholds, ...) are RouterConfig fields
(controlplane/router/router_config.py documents each). This reads them from one JSON object, checked as
RouterConfig itself checks them: msgspec types each value against the field (a float field takes an int, not a
string or a bool) and RouterConfig's own checks refuse a value out of range. The fields a tool sets from its other
options (``set_elsewhere``: the control plane's --policy and --cells) are refused here, so one setting has one
place. Anything wrong is a ValueError naming it. Sans-IO.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Any

import msgspec

from controlplane.router.router_config import RouterConfig

# the control plane's: --policy, --cells (its cells and the traffic classes they serve)
SET_BY_CONTROLPLANE_FLAGS = frozenset({"policy", "cells", "cells_by_traffic_class"})


def settable_knobs(set_elsewhere: frozenset[str] = SET_BY_CONTROLPLANE_FLAGS) -> list[str]:
    return sorted({f.name for f in dataclasses.fields(RouterConfig)} - set_elsewhere)


def parse_router_knobs(
    text: str | None, flag: str = "--router-knobs", set_elsewhere: frozenset[str] = SET_BY_CONTROLPLANE_FLAGS
) -> dict[str, Any]:
    """The fields of ``text`` (a JSON object; None or empty: none), each as RouterConfig types it. ``flag``: the
    option's name in the errors; ``set_elsewhere``: the fields that tool sets from its other flags."""
    if not text:
        return {}
    try:
        knobs = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError) as e:  # RecursionError: nested past msgspec's depth
        raise ValueError(f"{flag} is not JSON: {str(e)[:200]}") from None
    if not isinstance(knobs, dict):
        raise ValueError(f"{flag} must be a JSON object of RouterConfig fields, e.g. '{{\"tpot_weight\": 0.3}}'")
    settable = settable_knobs(set_elsewhere)
    unknown = sorted(set(knobs) - set(settable))
    if unknown:
        named = ", ".join(repr(k[:60]) for k in unknown[:5])
        raise ValueError(
            f"{flag}: not a settable RouterConfig field: {named}{' ...' if len(unknown) > 5 else ''}; settable: "
            f"{', '.join(settable)} (set by the tool's other options: {', '.join(sorted(set_elsewhere))})"
        )
    try:
        checked = msgspec.convert(knobs, RouterConfig)  # typed per field, then RouterConfig's own range checks
    except msgspec.ValidationError as e:
        raise ValueError(f"{flag}: {str(e)[:300]}") from None
    return {name: getattr(checked, name) for name in knobs}


# an entry of RouterConfig's docstring: "name: text", or "a / b: text" for fields described together
_DOC_ENTRY = re.compile(r"([a-z][a-z0-9_]*(?: / [a-z][a-z0-9_]*)*): ")


def knob_docs() -> dict[str, str]:
    """Each RouterConfig field's entry in RouterConfig's docstring (at the docstring's own indent, continued on the
    deeper-indented lines below it), as one line of text, by field name; fields described together share theirs."""
    docs: dict[str, str] = {}
    names: list[str] = []
    for line in inspect.cleandoc(RouterConfig.__doc__ or "").splitlines():
        entry = None if line.startswith(" ") else _DOC_ENTRY.match(line)
        if entry is not None:
            names = entry.group(1).split(" / ")
            docs.update((name, line[entry.end() :]) for name in names)
        elif line.startswith(" ") and names:
            for name in names:
                docs[name] += " " + line.strip()
        else:
            names = []
    return docs


def knob_table(set_elsewhere: frozenset[str] = SET_BY_CONTROLPLANE_FLAGS) -> list[dict[str, Any]]:
    """Every settable RouterConfig field, in declaration order: name, type, default (as JSON gives it) and its
    docstring entry (``zoo router-knobs``)."""
    docs = knob_docs()
    return [
        {
            "name": f.name,
            "type": str(f.type),
            "default": msgspec.to_builtins(_default(f)),
            "doc": docs.get(f.name, ""),
        }
        for f in dataclasses.fields(RouterConfig)
        if f.name not in set_elsewhere
    ]


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


def knobs_set(config: RouterConfig, set_elsewhere: frozenset[str] = SET_BY_CONTROLPLANE_FLAGS) -> dict[str, Any]:
    """The settable fields of ``config`` whose value is not RouterConfig's default, by name in sorted order: what
    the operator's ``--router-knobs`` (or zoo.toml's ``[controlplane.router]``) changed, as the running control plane
    holds it (``zoo:router_config_info``, ``FleetStats.router_knobs``). Values as ``msgspec.to_builtins`` gives them
    (a dict field's keys as strings, in JSON's types)."""
    changed = {}
    for f in dataclasses.fields(RouterConfig):
        if f.name in set_elsewhere:
            continue
        value = getattr(config, f.name)
        if value != _default(f):
            changed[f.name] = msgspec.to_builtins(value)
    return dict(sorted(changed.items()))
