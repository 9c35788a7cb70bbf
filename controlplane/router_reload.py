"""A router reload: new RouterConfig knobs on a running control plane, nothing in flight dropped.

    zoo controlplane --router-knobs-file PATH      the knobs, read at start
    kill -HUP <control plane>                      PATH read again ─► reload(cp, knobs) ─► the next decision

Changing the router's SLO or a hardware_aware term used to mean a restart, and a restart fails every stream in
flight (its clients learn the control plane no longer knows their requests). A reload swaps the policy instead:
the policy builds itself under the new settings and carries over what it learnt (``reconfigured``: hardware_aware's
prefix index, overload mode's window, its counters), the request path routes with it from the next request on,
and the requests in flight go on where they are. A new policy that asks the nodes for other KV cache events
(hardware_aware_kv_evictions, hardware_aware_prefix_snapshot) sends every node its Welcome again, asking for them:
the nodes that joined before the reload are heard as those that join after it. Like vLLM production-stack's
dynamic router config (a file the router re-reads) and the SIGHUP reload of nginx or Prometheus.

The file holds the whole set: a knob it no longer names returns to its default. A JSON file is one object of
RouterConfig fields (as ``--router-knobs``); a TOML file is read as a zoo.toml, its ``[controlplane.router]`` table
(none: every knob at its default; a knob at its top level is refused). The policy, cells and traffic classes stay as
started (their own flags). A file that cannot be read or holds a bad knob, or a policy with no ``reconfigured``
(ours have one: hardware_aware, prefix_aware, least_requests, round_robin; the anchors, keeping per-request state a
new instance would not know, and pd_split do not), is refused: logged, counted
(``zoo:router_config_reloads_total{outcome="refused"}``), and the running router is left as it was.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import msgspec

from controlplane.router.router_config import RouterConfig
from controlplane.router.router_knobs import parse_router_knobs, settable_knobs
from controlplane.toml_file import load_toml

log = logging.getLogger(__name__)

MAX_KNOBS_FILE_BYTES = 1 << 20  # a knobs file is a few hundred bytes; anything near this is not one


def read_knobs_file(path: str | Path) -> dict[str, Any]:
    """The knobs in ``path`` (module docstring), each checked by name as ``--router-knobs`` checks it; ValueError
    naming the file for anything wrong (unreadable, too large, not JSON/TOML, a bad knob)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_KNOBS_FILE_BYTES:
            raise ValueError(f"{path}: {size} bytes, more than a knobs file's {MAX_KNOBS_FILE_BYTES}")
        if path.suffix == ".toml":
            text = msgspec.json.encode(_router_table(load_toml(path), path)).decode()
        else:
            text = path.read_text()
    except OSError as e:
        raise ValueError(f"{path}: cannot read it: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    return parse_router_knobs(text, flag=str(path))


def _router_table(data: dict, path: Path) -> dict:
    """A zoo.toml's [controlplane.router] table (none: no knobs); a knob at the file's top level is refused, not
    silently left out."""
    stray = sorted(set(data) & set(settable_knobs()))
    if stray:
        raise ValueError(f"{path}: {', '.join(stray)}: router knobs go under [controlplane.router]")
    section = data.get("controlplane", {})
    table = section.get("router", {}) if isinstance(section, dict) else None
    if not isinstance(table, dict):
        raise ValueError(f"{path}: [controlplane] and its router must be tables")
    return table


def reload_router(cp, knobs: dict[str, Any]) -> RouterConfig:
    """Route ``cp`` (a ControlPlane) under ``knobs`` from its next request on: a RouterConfig of its policy, cells
    and traffic classes with ``knobs`` set (the others at their defaults). ValueError, with the running router
    unchanged, where its policy cannot be reconfigured or the knobs are refused."""
    current = cp.path.router
    reconfigured = getattr(cp.path.policy, "reconfigured", None)
    if reconfigured is None:
        raise ValueError(
            f"policy {current.policy} cannot be reconfigured while it runs (it keeps per-request state a new "
            "instance would not have): restart the control plane to change its knobs"
        )
    try:
        config = RouterConfig(
            policy=current.policy, cells=current.cells, cells_by_traffic_class=current.cells_by_traffic_class, **knobs
        )
    except (TypeError, ValueError) as e:  # knobs not from read_knobs_file / parse_router_knobs
        raise ValueError(f"router knobs refused: {e}") from None
    if config == current:
        return current  # nothing changed: the running policy goes on, its tables and windows as they are
    policy = reconfigured(config)
    asked = _kv_asks(cp.policy)
    cp.config.router = config
    cp.policy = policy  # the control plane tells it of nodes that leave
    cp.path.use_router(config, policy)
    if _kv_asks(policy) != asked:  # the nodes that joined before it: their Welcome again, with what it asks for
        cp.welcome_again()
    return config


def _kv_asks(policy) -> tuple[bool, bool]:
    """What a policy asks of the nodes in their Welcome: KV cache events, a snapshot of their cache."""
    return getattr(policy, "wants_kv_events", False), getattr(policy, "wants_kv_snapshot", False)


def reload_from_file(cp, path: str | Path) -> bool:
    """Read ``path`` and reload ``cp``'s router with it; False (logged, counted, the router unchanged) when the
    file or the reload is refused. Never raises for a bad file: a SIGHUP handler calls it in the serving loop."""
    reloads = cp.path.router_reloads
    try:
        config = reload_router(cp, read_knobs_file(path))
    except ValueError as e:
        reloads["refused"] += 1
        log.error("router reload refused, the router is unchanged: %s", e)
        return False
    except Exception:  # a policy that failed to build itself: its bug, but the serving loop goes on
        reloads["refused"] += 1
        log.exception("router reload failed, the router is unchanged")
        return False
    reloads["ok"] += 1
    log.info("router reloaded from %s: SLO TTFT %g s, TPOT %g s; knobs %s", path, config.slo_ttft_s,
             config.slo_tpot_s, cp.path.router_settings["knobs"])  # fmt: skip
    return True
