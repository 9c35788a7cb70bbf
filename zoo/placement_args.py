"""A node's placement from flags and zoo.toml: ``zoo agent --host-id NAME --rack NAME`` and ``host``/``rack`` in a
zoo.toml ``[[agents]]`` table. The hello carries them; the control plane prices KV moves between nodes by them
(backends/kv_link_model.py: one host NVLink, one rack InfiniBand, else Ethernet)."""

from __future__ import annotations

import re
import socket

from backends.kv_link_model import check_place_name

PLACEMENT_KEYS = {"host": "host_id", "rack": "rack"}  # zoo.toml key → `zoo agent` option (--host-id, --rack)


def default_host_id() -> str:
    """This machine's hostname as a host name (characters a name may not hold become '-'); "localhost" if none."""
    name = re.sub(r"[^A-Za-z0-9._:-]", "-", socket.gethostname())[:255].lstrip("._:-")
    return name or "localhost"


def placement_options(raw: dict, where: str) -> dict[str, str]:
    """Pop ``host``/``rack`` (also accepted as ``host_id``) from an [[agents]] table; the `zoo agent` options they
    become. A bad value is a ValueError naming ``where`` (e.g. "zoo.toml: agents[1]")."""
    options = {}
    if "host" in raw and "host_id" in raw:
        raise ValueError(f"{where}: give host or host_id, not both")
    for key in ("host", "host_id", "rack"):
        if key not in raw:
            continue
        value = raw.pop(key)
        if not isinstance(value, str):
            raise ValueError(f"{where}: {key} must be a string, got {value!r}")
        check_place_name(f"{where}: {key}", value)
        options[PLACEMENT_KEYS.get(key, key)] = value
    return options
