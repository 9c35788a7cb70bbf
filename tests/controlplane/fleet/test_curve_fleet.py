"""An authenticated fleet with real agent processes: CURVE on both sockets, agents and clients allow-listed.

The control plane runs in the test's event loop (``controlplane(curve=...)``), agents are
``python -m zoo.serve agent --fake-runner --curve-dir DIR`` children; keys come from ``zoo keys``'s code.
Every wait is on a condition (the control plane re-checks after each message batch and expiry pass, the
ZAP handler after each handshake), bounded by WAIT_S.
"""

from __future__ import annotations

import shutil

import pytest

from client import AsyncZooClient, ZooTimeoutError
from transport.curve import AGENT_DOMAIN, CLIENT_DOMAIN, CurveClient, load_controlplane_curve, load_curve_client
from zoo.keys import make_keys

pytestmark = pytest.mark.anyio

WAIT_S = 60.0
PROMPT = [5, 6, 7, 8]


def _forged_dir(fleet, root, node_id: str, key_of: str | None):
    """A CURVE directory for an attacker: the control plane's public key (public knowledge) and, as
    ``agents/NODE_ID.key_secret``, either another agent's key (``key_of``) or a fresh unlisted one."""
    if key_of is None:
        make_keys(root, agents=[node_id])
    else:
        (root / "agents").mkdir(parents=True)
        shutil.copy(fleet / "agents" / f"{key_of}.key_secret", root / "agents" / f"{node_id}.key_secret")
    shutil.copy(fleet / "controlplane.key", root / "controlplane.key")
    return root


async def _generate_all(cp, curve: CurveClient, num_requests: int) -> list:
    async with AsyncZooClient(cp.client_endpoint, timeout_s=WAIT_S, curve=curve) as zoo:
        return [await zoo.generate(prompt_token_ids=PROMPT, max_tokens=3) for _ in range(num_requests)]


async def test_rogue_agents_without_a_listed_key_cannot_join_nor_get_prompts(controlplane, spawn_agent, tmp_path):
    fleet = tmp_path / "fleet"
    make_keys(fleet, agents=["node-a"], clients=["app"])
    unlisted = _forged_dir(fleet, tmp_path / "rogue", "rogue", key_of=None)
    async with controlplane(policy="hardware_aware", curve=load_controlplane_curve(fleet)) as cp:
        spawn_agent(cp.agent_endpoint, "node-a", "--curve-dir", str(fleet))
        # both rogues claim a far stronger GPU than node-a, so hardware_aware would send them everything
        rogue = spawn_agent(cp.agent_endpoint, "rogue", "--curve-dir", str(unlisted), "--fake-gpu-type", "h200")
        plain = spawn_agent(cp.agent_endpoint, "plain", "--fake-gpu-type", "h200")  # no CURVE at all
        await cp.wait_until(lambda: "node-a" in cp.registry, WAIT_S)
        await cp.zap.wait_until(lambda policy: policy.refused[AGENT_DOMAIN] >= 1, WAIT_S)  # the unlisted key
        await cp.wait_until(lambda: "serving" in plain.output(), WAIT_S)  # its DEALER is connecting

        done = await _generate_all(cp, load_curve_client(fleet, "clients", "app"), 10)

        assert [d.node_id for d in done] == ["node-a"] * 10
        assert [view.node_id for view in cp.registry.snapshot().nodes] == ["node-a"]
        assert set(cp.hellos) == {"node-a"}  # no hello of theirs ever reached the control plane
        assert set(cp.zap.policy.accepted_names) == {"node-a", "app"}
        assert cp.stats()["rejected_messages"]["agents"] == {}
        assert rogue.proc.poll() is None and plain.proc.poll() is None  # still knocking, never let in


async def test_a_hello_reusing_a_live_node_id_from_another_key_is_refused(controlplane, spawn_agent, tmp_path):
    fleet = tmp_path / "fleet"
    make_keys(fleet, agents=["node-a", "node-b"])
    # node-b's key (allow-listed, e.g. a compromised host) filed under node-a's name
    forged = _forged_dir(fleet, tmp_path / "forged", "node-a", key_of="node-b")
    curve = load_controlplane_curve(fleet, any_client=True)
    async with controlplane(policy="hardware_aware", curve=curve) as cp:
        live = spawn_agent(cp.agent_endpoint, "node-a", "--curve-dir", str(fleet))
        await cp.wait_until(lambda: "node-a" in cp.registry, WAIT_S)
        before = await _generate_all(cp, CurveClient(curve.keys.public_key), 5)

        impostor = spawn_agent(cp.agent_endpoint, "node-a", "--curve-dir", str(forged), "--fake-gpu-type", "h200")
        await cp.zap.wait_until(lambda policy: policy.accepted_names.get("node-b", 0) >= 1, WAIT_S)
        await cp.wait_until(lambda: "serving" in impostor.output(), WAIT_S)
        after = await _generate_all(cp, CurveClient(curve.keys.public_key), 20)  # any client: a fresh key

        assert [d.node_id for d in before + after] == ["node-a"] * 25
        assert all(d.num_output_tokens == 3 for d in after)
        assert cp.hellos["node-a"].hardware.gpu_type == "cpu"  # still the live node's own hello
        assert [view.node_id for view in cp.registry.snapshot().nodes] == ["node-a"]
        assert cp.counters.get("failed", 0) == 0
        assert live.proc.poll() is None and impostor.proc.poll() is None


async def test_clients_are_allow_listed_by_key(controlplane, spawn_agent, tmp_path):
    fleet = tmp_path / "fleet"
    make_keys(fleet, agents=["node-a"], clients=["app"])
    curve = load_controlplane_curve(fleet)
    async with controlplane(curve=curve) as cp:
        spawn_agent(cp.agent_endpoint, "node-a", "--curve-dir", str(fleet))
        await cp.wait_until(lambda: "node-a" in cp.registry, WAIT_S)
        assert [d.node_id for d in await _generate_all(cp, load_curve_client(fleet, "clients", "app"), 3)] == [
            "node-a"
        ] * 3

        stranger = CurveClient(curve.keys.public_key)  # knows the server key, not on the list
        for curve_client in (stranger, None):  # and one without CURVE
            async with AsyncZooClient(cp.client_endpoint, timeout_s=1.0, curve=curve_client) as zoo:
                with pytest.raises(ZooTimeoutError):
                    await zoo.generate(prompt_token_ids=PROMPT, max_tokens=3)
        assert cp.zap.policy.refused[CLIENT_DOMAIN] >= 1
        assert cp.counters["routed"] == 3  # nothing of theirs reached the control plane
