"""A key rotation without a restart: SIGHUP makes `zoo controlplane --api-keys FILE` read FILE again.

    kill -HUP <control plane>   FILE (and $ZOO_API_KEYS, --api-key, $VLLM_API_KEY as at start) read again
        ─► the tenants (controlplane/tenants.py: classes, rate limits) reconfigured, each keeping its usage and no
           fuller a bucket than it had
        ─► the gateway's ApiKeyRing (controlplane/gateway/api_keys.py) swapped: a revoked key is refused (401) from
           the next request on, a new key accepted; a stream already answering goes on

A restart would do the same and fail every stream in flight. A file that cannot be read, holds no key, or
describes a tenant two ways is refused: logged with why, counted (``zoo:api_key_reloads_total{outcome="refused"}``),
and the keys and tenants stay as they were. The same SIGHUP reloads the router (``--router-knobs-file``,
controlplane/router_reload.py). Keys given only in the environment or on the command line are not a file to re-read:
without ``--api-keys`` a SIGHUP leaves the keys alone.
"""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger(__name__)


def reload_api_keys(args: argparse.Namespace, ring, cp) -> bool:
    """Read ``args.api_keys`` again into ``ring`` (the gateway's ApiKeyRing) and ``cp``'s tenants; False (nothing
    changed, the refusal logged and counted) when the new file is refused."""
    from zoo.keys import api_keys_from_args, tenants_from_args

    try:
        config = api_keys_from_args(args)
        if config is None:
            raise ValueError("no key at all: the API would be open (remove --api-keys and restart to open it)")
        tenants = tenants_from_args(args)
        cp.path.tenants.reconfigure(tenants, cp.clock.now())  # checked first: all or nothing
    except ValueError as e:  # ApiKeyError too: an unreadable file
        ring.reloads["refused"] += 1
        log.error("API keys not reloaded, the running keys kept: %s", e)
        return False
    added, revoked = ring.replace(config)
    ring.reloads["ok"] += 1
    log.info(
        "API keys reloaded from %s: %d keys (%d added, %d revoked), %d tenants described",
        args.api_keys, len(config.keys), added, revoked, len(tenants),
    )  # fmt: skip
    return True
