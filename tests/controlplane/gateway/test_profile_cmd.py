"""`zoo profile start|stop` (zoo/profile_cmd.py) against a served gateway: a line per node with what it did and its
trace files, the exit status by outcome, the API key from the environment, and a gateway without the routes."""

from __future__ import annotations

from controlplane.gateway import create_app
from controlplane.gateway.api_keys import ApiKeyConfig
from controlplane.gateway.gateway_config import GatewayConfig
from zoo.cli import build_parser


class ProfilingFrontend:
    """A fleet of two nodes: ``a`` profiles, ``b`` has no profiler."""

    node_ids = ("a", "b")

    def __init__(self, frontend) -> None:
        self._frontend = frontend
        self.asked: list = []

    def __getattr__(self, name):
        return getattr(self._frontend, name)

    async def profile(self, action: str, node_ids: list[str]) -> dict:
        self.asked.append((action, node_ids))
        answers = {
            "a": {"ok": True, "detail": f"{action}: done", "trace_files": ["/t/a.1.pt.trace.json.gz"]},
            "b": {"ok": False, "detail": "profiling is off on this node", "trace_files": []},
        }
        return {n: answers[n] for n in node_ids}


def _run(*argv: str) -> int:
    args = build_parser().parse_args(["profile", *argv])
    return args.func(args)


def test_a_line_per_node_and_the_exit_status(make_frontend, serve, capsys, monkeypatch):
    monkeypatch.setenv("ZOO_API_KEY", "sk-ops")
    frontend = ProfilingFrontend(make_frontend())
    app = create_app(frontend, config=GatewayConfig(profiling=True), api_keys=ApiKeyConfig(keys=frozenset({"sk-ops"})))
    with serve(app) as url:
        assert _run("stop", "--url", url) == 0
        out = capsys.readouterr().out.splitlines()
        assert out == [
            "a\tok\tstop: done",
            "a\t\t/t/a.1.pt.trace.json.gz",
            "b\trefused\tprofiling is off on this node",
        ]
        assert _run("start", "b", "--url", url) == 1  # no node could: its reason on stderr
        assert "b: profiling is off on this node" in capsys.readouterr().err
        assert frontend.asked[-1] == ("start", ["b"])
        monkeypatch.setenv("ZOO_API_KEY", "sk-wrong")
        assert _run("start", "--url", url) == 2 and "401" in capsys.readouterr().err


def test_a_gateway_without_the_routes_or_not_reached(make_frontend, serve, capsys):
    with serve(create_app(make_frontend())) as url:
        assert _run("start", "--url", url) == 2
        assert "start its control plane with --profiler-config" in capsys.readouterr().err
    assert _run("start", "--url", "http://127.0.0.1:9", "--timeout-s", "5") == 2
    assert "ConnectError" in capsys.readouterr().err
