"""`zoo controlplane --cells FILE --api-keys FILE`: the control plane gets the file's cells and classes and
the key file's tenants; the gateway's key config maps each key to its tenant."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.tenants import TenantSpec
from zoo.cli import build_parser
from zoo.keys import api_keys_from_args
from zoo.serve import controlplane_from_args

CELLS_FILE = Path(__file__).resolve().parents[2] / "examples" / "cells.toml"


def test_cells_and_tenants_reach_the_control_plane(tmp_path):
    keys = tmp_path / "api_keys"
    keys.write_text("zk-a tenant=crawler class=batch rpm=30 tpm=9000\nzk-b tenant=crawler\nzk-c\n")
    args = build_parser().parse_args(
        ["controlplane", "--fake-tokenizer", "--cells", str(CELLS_FILE), "--api-keys", str(keys)]
    )
    cp = controlplane_from_args(args)
    assert cp.config.router.cells.strict and cp.config.router.cells.home_cell("batch") == "bulk"
    assert cp.config.tenants == [TenantSpec("crawler", "batch", 30.0, 9000.0), TenantSpec("default")]
    config = api_keys_from_args(args, environ={})
    assert config.keys == {"zk-a", "zk-b", "zk-c"}
    assert dict(config.tenant_of) == {"zk-a": "crawler", "zk-b": "crawler", "zk-c": "default"}


def test_a_bad_cells_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "zoo.toml"
    bad.write_text('[[cells]]\nname = "a"\n[[traffic_classes]]\nname = "x"\ncell = "nowhere"\n')
    args = build_parser().parse_args(["controlplane", "--fake-tokenizer", "--cells", str(bad)])
    with pytest.raises(ValueError, match="unknown cell 'nowhere'"):
        controlplane_from_args(args)
