"""CURVE: key files, the ZAP policy (sans-IO), and CURVE ROUTER/DEALER pairs on loopback.

The socket tests wait on conditions (ZAP counters, received messages), never on time; each wait is bounded.
"""

from __future__ import annotations

import os
import stat

import anyio
import pytest
import zmq
import zmq.asyncio
from zmq.utils import z85

from transport.curve import (
    AGENT_DOMAIN,
    CLIENT_DOMAIN,
    ControlPlaneCurve,
    CurveClient,
    CurveKeyError,
    CurveKeyPair,
    ZapHandler,
    ZapPolicy,
    load_allow_list,
    load_controlplane_curve,
    load_curve_client,
    make_curve_dir,
    only_key_name,
    write_key_pair,
)
from transport.link import Link
from transport.messages import Ping
from transport.sockets import Channel, PeerUnreachable, Received, bind_router, connect_dealer

WAIT_S = 20.0

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _zap_request(key: CurveKeyPair, domain: str = AGENT_DOMAIN, mechanism: bytes = b"CURVE") -> list[bytes]:
    return [b"1.0", b"7", domain.encode(), b"127.0.0.1", b"", mechanism, z85.decode(key.public_key)]


# --------------------------------------------------------------------------- keys and files


def test_key_pair_checks_that_the_halves_belong_together():
    a, b = CurveKeyPair.generate(), CurveKeyPair.generate()
    with pytest.raises(CurveKeyError, match="does not belong"):
        CurveKeyPair(a.public_key, b.secret_key)
    with pytest.raises(CurveKeyError, match="40-character"):
        CurveKeyPair(a.public_key[:-1], a.secret_key)
    assert a.secret_key.decode() not in repr(a)


def test_zoo_keys_layout_loads_back(tmp_path):
    written = make_curve_dir(tmp_path, agents=["gpu-0", "gpu-1"], clients=["app"])
    assert {p.relative_to(tmp_path).as_posix() for p in written} == {
        "controlplane.key",
        "controlplane.key_secret",
        "agents/gpu-0.key",
        "agents/gpu-0.key_secret",
        "agents/gpu-1.key",
        "agents/gpu-1.key_secret",
        "clients/app.key",
        "clients/app.key_secret",
    }
    for path in written:  # secrets are readable by their owner only
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode == (0o600 if path.name.endswith("_secret") else 0o644), path

    curve = load_controlplane_curve(tmp_path)
    assert sorted(curve.agents.values()) == ["gpu-0", "gpu-1"]
    assert list(curve.clients.values()) == ["app"]
    agent = load_curve_client(tmp_path, "agents", "gpu-1")
    assert agent.server_public_key == curve.keys.public_key
    assert curve.agents[agent.keys.public_key] == "gpu-1"
    assert load_controlplane_curve(tmp_path, any_client=True).clients is None

    # pyzmq reads the same files
    public, secret = zmq.auth.load_certificate(tmp_path / "agents" / "gpu-1.key_secret")
    assert (public, secret) == (agent.keys.public_key, agent.keys.secret_key)
    assert set(zmq.auth.load_certificates(tmp_path / "agents")) == set(curve.agents)


def test_zoo_keys_keeps_an_existing_control_plane_key_and_refuses_to_overwrite(tmp_path):
    make_curve_dir(tmp_path, agents=["a"])
    first = CurveKeyPair.load(tmp_path / "controlplane.key_secret")
    make_curve_dir(tmp_path, agents=["b"])
    assert CurveKeyPair.load(tmp_path / "controlplane.key_secret") == first
    with pytest.raises(FileExistsError):
        make_curve_dir(tmp_path, agents=["a"])
    assert only_key_name(tmp_path, "agents") is None  # two agents here
    assert only_key_name(tmp_path, "clients") is None


def test_allow_list_refuses_one_key_under_two_names_and_bad_names(tmp_path):
    write_key_pair(tmp_path, "a", "agent")
    (tmp_path / "b.key").write_bytes((tmp_path / "a.key").read_bytes())
    with pytest.raises(CurveKeyError, match="same public key"):
        load_allow_list(tmp_path)
    with pytest.raises(CurveKeyError, match="key name"):
        write_key_pair(tmp_path, "../evil", "agent")
    with pytest.raises(CurveKeyError, match="does not exist"):
        load_allow_list(tmp_path / "missing")
    with pytest.raises(CurveKeyError, match="no secret key"):
        CurveKeyPair.load(tmp_path / "a.key")


# --------------------------------------------------------------------------- ZAP policy


def test_zap_policy_admits_listed_keys_under_their_names():
    node, stranger = CurveKeyPair.generate(), CurveKeyPair.generate()
    policy = ZapPolicy({AGENT_DOMAIN: {node.public_key: "gpu-0"}, CLIENT_DOMAIN: None})

    assert policy.reply(_zap_request(node)) == [b"1.0", b"7", b"200", b"OK", b"gpu-0", b""]
    refused = policy.reply(_zap_request(stranger))
    assert refused[2] == b"400" and refused[4] == b""
    # any client with the server key: admitted, its User-Id is its public key
    assert policy.reply(_zap_request(stranger, CLIENT_DOMAIN))[2:5] == [b"200", b"OK", stranger.public_key]
    assert policy.reply(_zap_request(node, "elsewhere"))[2] == b"400"
    assert policy.reply(_zap_request(node, mechanism=b"NULL"))[2] == b"400"
    assert policy.reply([b"0.9", b"1"])[2] == b"400"
    assert policy.accepted == {AGENT_DOMAIN: 1, CLIENT_DOMAIN: 1}
    assert policy.refused == {AGENT_DOMAIN: 2, CLIENT_DOMAIN: 0}
    assert policy.accepted_names == {"gpu-0": 1}


# --------------------------------------------------------------------------- sockets on loopback


class _Router:
    """A CURVE ROUTER (agent side: peers bound to keys) with its ZAP handler and a Link collecting messages."""

    def __init__(self, ctx: zmq.asyncio.Context, curve: ControlPlaneCurve) -> None:
        self.zap = ZapHandler(ctx, curve.zap_policy())
        sock, self.endpoint = bind_router(ctx, "tcp://127.0.0.1:0", handover=True, curve=curve.agent_server)
        self.channel = Channel(sock, peers_bound_to_keys=True)
        self.received: list[Received] = []
        self.changed = anyio.Event()
        self.link = Link(self.channel, self._on_batch, name="test router")

    def _on_batch(self, batch: list[Received]) -> None:
        self.received += batch
        self.changed.set()
        self.changed = anyio.Event()

    async def wait_until(self, predicate) -> None:
        with anyio.fail_after(WAIT_S):
            while not predicate():
                await self.changed.wait()

    def close(self) -> None:
        self.link.close()
        self.zap.close()


@pytest.fixture
async def curve_router():
    ctx = zmq.asyncio.Context()
    server = CurveKeyPair.generate()
    agents = {"node-a": CurveKeyPair.generate(), "node-b": CurveKeyPair.generate()}
    curve = ControlPlaneCurve(server, {k.public_key: name for name, k in agents.items()})
    router = _Router(ctx, curve)
    dealers: list[zmq.asyncio.Socket] = []

    def dealer(keys: CurveKeyPair | None, routing_id: bytes) -> Channel:
        client = None if keys is None else CurveClient(server.public_key, keys)
        sock = connect_dealer(ctx, router.endpoint, routing_id=routing_id, curve=client)
        dealers.append(sock)
        return Channel(sock)

    async with anyio.create_task_group() as tg:
        tg.start_soon(router.zap.serve)
        tg.start_soon(router.link.read_loop)
        tg.start_soon(router.link.write_loop)
        try:
            yield router, agents, dealer
        finally:
            tg.cancel_scope.cancel()
    for sock in dealers:
        sock.close(linger=0)
    router.close()
    ctx.term()


async def _recv(channel: Channel) -> Received:
    with anyio.fail_after(WAIT_S):
        return (await channel.recv_batch(1))[0]


async def _zap_counted(router: _Router, predicate) -> None:
    await router.zap.wait_until(predicate, WAIT_S)


async def test_listed_agent_gets_through_with_its_key_name(curve_router):
    router, agents, dealer = curve_router
    a = dealer(agents["node-a"], b"node-a")
    a.send(Ping(payload=b"hi"))
    await router.wait_until(lambda: router.received)
    got = router.received[0]
    assert (got.peer, got.user_id) == (b"node-a", "node-a")
    router.channel.send(Ping(payload=b"back"), b"node-a")
    assert (await _recv(a)).user_id is None  # a DEALER does not authenticate its server by User-Id


async def test_unlisted_key_and_no_curve_are_refused(curve_router):
    router, agents, dealer = curve_router
    rogue = dealer(CurveKeyPair.generate(), b"rogue")
    rogue.send(Ping(payload=b"let me in"))
    await _zap_counted(router, lambda p: p.refused[AGENT_DOMAIN] >= 1)
    failed = zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    monitor = router.channel.socket.get_monitor_socket(failed)
    try:
        plain = dealer(None, b"plain")  # no CURVE at all: the handshake fails before ZAP
        plain.send(Ping(payload=b"let me in"))
        with anyio.fail_after(WAIT_S):
            await monitor.recv_multipart()
    finally:
        router.channel.socket.disable_monitor()
        monitor.close(linger=0)
    a = dealer(agents["node-a"], b"node-a")
    a.send(Ping(payload=b"hi"))
    await router.wait_until(lambda: router.received)
    with pytest.raises(PeerUnreachable):  # neither rogue ever became a peer of the ROUTER
        router.channel.send(Ping(), b"rogue")
    with pytest.raises(PeerUnreachable):
        router.channel.send(Ping(), b"plain")
    assert [r.peer for r in router.received] == [b"node-a"]


async def test_a_key_cannot_take_over_a_live_node_id(curve_router):
    router, agents, dealer = curve_router
    a = dealer(agents["node-a"], b"node-a")
    a.send(Ping(payload=b"a"))
    await router.wait_until(lambda: router.received)
    # node-b's (listed) key connects under node-a's routing id while node-a is live
    impostor = dealer(agents["node-b"], b"node-a")
    impostor.send(Ping(payload=b"I am node-a"))
    await _zap_counted(router, lambda p: p.accepted_names.get("node-b", 0) >= 1)
    for i in range(20):  # node-a keeps its traffic, message after message
        router.channel.send(Ping(request_id=str(i)), b"node-a")
        got = await _recv(a)
        assert got.frames  # it arrived at the real node-a
    a.send(Ping(payload=b"a again"))
    await router.wait_until(lambda: len(router.received) >= 2)
    assert all(r.user_id == "node-a" for r in router.received)
    assert router.channel.num_impostors == 0  # libzmq never attached the impostor's pipe


async def test_a_message_whose_routing_id_is_not_its_key_name_is_dropped(curve_router):
    router, agents, dealer = curve_router
    monitor = router.channel.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    try:
        a = dealer(agents["node-a"], b"node-a")
        a.send(Ping(payload=b"a"))
        await router.wait_until(lambda: router.received)
        a.socket.close(linger=0)
        with anyio.fail_after(WAIT_S):  # the router has let node-a's routing id go
            await monitor.recv_multipart()
        # node-b's (listed) key now claims node-a's free routing id: its messages are dropped
        impostor = dealer(agents["node-b"], b"node-a")
        impostor.send(Ping(payload=b"I am node-a"))
        await router.wait_until(lambda: router.channel.num_impostors >= 1)
        assert [r.user_id for r in router.received] == ["node-a"]
        with pytest.raises(PeerUnreachable):  # and node-a's traffic is not sent to it
            router.channel.send(Ping(payload=b"for node-a only"), b"node-a")
        # a free routing id that was never a key's name: dropped too
        other = dealer(agents["node-b"], b"node-c")
        other.send(Ping(payload=b"I am node-c"))
        await router.wait_until(lambda: router.channel.num_impostors >= 2)
        assert [r.user_id for r in router.received] == ["node-a"]
    finally:
        router.channel.socket.disable_monitor()
        monitor.close(linger=0)
