"""`zoo controlplane --shutdown-timeout SECONDS` (zoo/controlplane_shutdown.py): 0 by default, as vLLM's; a value
that is not a finite number of seconds >= 0 is refused by name."""

from __future__ import annotations

import pytest

from zoo.cli import build_parser


def test_the_default_fails_what_is_in_flight_at_once_and_a_value_drains_that_long():
    assert build_parser().parse_args(["controlplane"]).shutdown_timeout == 0.0
    assert build_parser().parse_args(["controlplane", "--shutdown-timeout", "30"]).shutdown_timeout == 30.0


@pytest.mark.parametrize("bad", ["-1", "nan", "inf", "soon"])
def test_a_bad_value_is_refused_by_name(bad, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["controlplane", "--shutdown-timeout", bad])
    assert "--shutdown-timeout" in capsys.readouterr().err
