"""`zoo sleep` and `zoo wake` (zoo/sleep_cmd.py) against a served gateway: the level, mode and tags sent as vLLM's
query parameters, a line per node, `--status` from GET /is_sleeping, the exit status by outcome, and a gateway
without the routes."""

from __future__ import annotations

from controlplane.gateway import create_app
from controlplane.gateway.gateway_config import GatewayConfig
from zoo.cli import build_parser


class Sleeps:
    """NodeSleeps' face to the routes, for two nodes: ``a`` sleeps, ``b``'s backend has no sleep mode."""

    def __init__(self) -> None:
        self.levels: dict[str, int] = {}
        self.asked: list = []

    @property
    def is_sleeping(self) -> bool:
        return False

    async def sleep(self, node_ids, level, mode):
        self.asked.append(("sleep", node_ids, level, mode))
        self.levels["a"] = level
        answers = {
            "a": {"ok": True, "detail": f"asleep at level {level}", "sleep_level": level, "freed_bytes": 1},
            "b": {"ok": False, "detail": "no sleep mode", "sleep_level": 0, "freed_bytes": 0},
        }
        return {n: answers[n] for n in node_ids}

    async def wake_up(self, node_ids, tags):
        self.asked.append(("wake_up", node_ids, tags))
        return {n: {"ok": True, "detail": "awake", "sleep_level": 0, "freed_bytes": 0} for n in node_ids}


class SleepingFrontend:
    node_ids = ("a", "b")

    def stats(self) -> dict:
        return {"nodes": {"a": {"gpu_type": "T4", "cell": "west"}, "b": {"gpu_type": "L4", "cell": "west"}}}

    def __init__(self, frontend) -> None:
        self._frontend = frontend
        self.sleeps = Sleeps()

    def __getattr__(self, name):
        return getattr(self._frontend, name)


def _run(*argv: str) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


def test_sleep_wake_and_status_a_line_per_node(make_frontend, serve, capsys):
    frontend = SleepingFrontend(make_frontend())
    with serve(create_app(frontend, config=GatewayConfig(sleep_mode=True))) as url:
        assert _run("sleep", "--level", "2", "--mode", "wait", "--url", url) == 0
        assert capsys.readouterr().out.splitlines() == ["a\tok\tasleep at level 2", "b\trefused\tno sleep mode"]
        assert frontend.sleeps.asked[-1] == ("sleep", ["a", "b"], 2, "wait")
        assert _run("sleep", "b", "--url", url) == 1 and "b: no sleep mode" in capsys.readouterr().err
        assert _run("sleep", "--status", "--url", url) == 0
        assert capsys.readouterr().out.splitlines() == ["a\tasleep at level 1", "b\tawake"]
        assert _run("wake", "a", "--tags", "weights", "--url", url) == 0
        assert frontend.sleeps.asked[-1] == ("wake_up", ["a"], ["weights"])
        assert _run("wake", "--tags", "gpu", "--url", url) == 1 and "unknown wake_up tag" in capsys.readouterr().err
        assert _run("sleep", "--gpu-type", "T4", "--cell", "west", "--url", url) == 0  # the T4s of the west cell
        assert frontend.sleeps.asked[-1] == ("sleep", ["a"], 1, "abort")


def test_a_gateway_without_the_routes(make_frontend, serve, capsys):
    with serve(create_app(make_frontend())) as url:
        assert _run("sleep", "--url", url) == 2
        assert "start its control plane with --enable-sleep-mode" in capsys.readouterr().err
