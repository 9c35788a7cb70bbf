"""This build's version (the installed ``silicon-zoo`` package's): the gateway's ``/version``, and a node's serving
digest (agent/serving_digest.py)."""

from __future__ import annotations

import importlib.metadata


def package_version() -> str:
    """The installed package's version; "unknown" in a source tree that was never installed."""
    try:
        return importlib.metadata.version("silicon-zoo")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
