"""`zoo top`'s node actions: D drains the selected node, U resumes it, through the node actions given (a
recorder here; tui/node_actions.py against a real fleet: tests/controlplane/fleet/test_drain.py); without ``--client``
the keys say how to turn them on; a refusal is shown as an error."""

from __future__ import annotations

import anyio
import pytest

from tui.zoo_top import ZooTopApp

pytestmark = pytest.mark.anyio

FED_BY_HAND = 1e9  # snapshots are applied by the test itself: never stale


def _messages(app: ZooTopApp) -> list[tuple[str, str]]:
    return [(n.message, n.severity) for n in app._notifications]


async def _until(pilot, predicate, timeout_s: float = 10.0) -> None:
    with anyio.fail_after(timeout_s):
        while not predicate():
            await pilot.pause(0.02)


async def test_d_drains_and_u_resumes_the_selected_node(make_stats):
    asked: list[tuple[str, str]] = []

    async def actions(node_id: str, action: str) -> tuple[bool, str]:
        asked.append((node_id, action))
        return (action == "drain", "refused: it is leaving" if action == "resume" else f"{node_id} drains")

    app = ZooTopApp(None, stale_after_s=FED_BY_HAND, node_actions=actions)
    async with app.run_test(size=(160, 48)) as pilot:
        app.apply_stats(make_stats(1))
        await pilot.pause()
        await pilot.press("down")
        node = app.selected_node_id()
        await pilot.press("D")
        await _until(pilot, lambda: len(app._notifications) == 1)
        await pilot.press("U")
        await _until(pilot, lambda: len(app._notifications) == 2)
    assert asked == [(node, "drain"), (node, "resume")]
    assert _messages(app) == [(f"{node} drains", "information"), ("refused: it is leaving", "error")]


async def test_z_puts_the_selected_node_to_sleep_and_w_wakes_it(make_stats):
    asked: list[tuple[str, str]] = []

    async def actions(node_id: str, action: str) -> tuple[bool, str]:
        asked.append((node_id, action))
        return action == "sleep", f"{action} {node_id}: " + ("asleep at level 1" if action == "sleep" else "sleep off")

    app = ZooTopApp(None, stale_after_s=FED_BY_HAND, node_actions=actions)
    async with app.run_test(size=(160, 48)) as pilot:
        app.apply_stats(make_stats(1))
        await pilot.pause()
        node = app.selected_node_id()
        await pilot.press("Z")
        await _until(pilot, lambda: len(app._notifications) == 1)
        await pilot.press("W")
        await _until(pilot, lambda: len(app._notifications) == 2)
    assert asked == [(node, "sleep"), (node, "wake")]
    assert _messages(app) == [(f"sleep {node}: asleep at level 1", "information"), (f"wake {node}: sleep off", "error")]


async def test_without_a_client_endpoint_the_keys_say_how_to_turn_them_on(make_stats):
    app = ZooTopApp(None, stale_after_s=FED_BY_HAND)
    async with app.run_test(size=(160, 48)) as pilot:
        app.apply_stats(make_stats(1))
        await pilot.pause()
        await pilot.press("D")
        await _until(pilot, lambda: len(app._notifications) == 1)
    ((message, severity),) = _messages(app)
    assert "--client" in message and severity == "warning"
