"""The zmq hop probes on real processes: a ROUTER here (the control plane's role) and a DEALER agent child,
exchanging transport.codec messages on loopback. Every message must be counted and timed, exactly."""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest
import zmq

from engine.sampling_params import SamplingParams
from observe.ebpf.probe import ZooProbe, format_snapshot
from observe.ebpf.zmq_hops import RID_MAX, message_key
from transport.codec import decode, encode
from transport.messages import GenerateRequest

NUM_MESSAGES = 200
WAIT_MS = 20_000

AGENT = r"""
import json, sys, time
import pytest
import zmq
from transport.codec import decode, encode
from transport.messages import Heartbeat, TokenChunk

endpoint, node_id, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
d = zmq.Context().socket(zmq.DEALER)
d.setsockopt(zmq.ROUTING_ID, node_id.encode())
d.setsockopt(zmq.LINGER, 0)
d.connect(endpoint)
d.send_multipart(encode(Heartbeat(node_id=node_id, sent_ns=time.monotonic_ns())))
print("connected", flush=True)
assert sys.stdin.readline().strip() == "go"
app_hop_ns = {}
for _ in range(n):
    if not d.poll(20_000):
        raise SystemExit("no request within 20 s")
    frames = d.recv_multipart()
    recv_ns = time.monotonic_ns()
    msg, _ = decode(frames)
    app_hop_ns[msg.request_id] = recv_ns - msg.sent_ns
    reply = TokenChunk(request_id=msg.request_id, token_ids=[1, 2, 3], text="abc", node_id=node_id)
    reply.sent_ns = time.monotonic_ns()
    d.send_multipart(encode(reply))
print(json.dumps(app_hop_ns), flush=True)
"""


def _request_ids(n: int) -> list[str]:
    # fixstr (≤ 31 bytes), str8 (32..255 bytes), and longer than the RID_MAX bytes the probe hashes
    kinds = [lambda i: f"r{i}", lambda i: f"req-{i:04d}-{uuid.uuid4().hex}", lambda i: f"long-{i}-" + "x" * 80]
    return [kinds[i % 3](i) for i in range(n)]


@pytest.mark.parametrize("hop_mode", ["wire", "libzmq"])
def test_every_message_counted_and_timed(ebpf_ready, spawn, hop_mode):
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    agent = spawn(AGENT, f"tcp://127.0.0.1:{port}", "node-a", str(NUM_MESSAGES))
    try:
        assert agent.readline() == "connected"
        assert router.poll(WAIT_MS), "no hello from the agent"
        router.recv_multipart()  # the hello, sent before the probes attach: not counted
        request_ids = _request_ids(NUM_MESSAGES)
        app_back_ns: dict[str, int] = {}
        with ZooProbe(sched=False, hop_mode=hop_mode, trace_messages=True) as probe:
            probe.attach(controlplane=os.getpid(), agents={"node-a": agent.pid})
            agent.send("go")
            for rid in request_ids:
                msg = GenerateRequest(
                    request_id=rid,
                    prompt_token_ids=list(range(32)),
                    sampling=SamplingParams(),
                    arrival_ns=0,
                    routed_ns=0,
                )
                msg.sent_ns = time.monotonic_ns()
                router.send_multipart([b"node-a", *encode(msg)])
                assert router.poll(WAIT_MS), f"no reply to {rid}"
                _, *frames = router.recv_multipart()
                recv_ns = time.monotonic_ns()
                back, _ = decode(frames)
                app_back_ns[back.request_id] = recv_ns - back.sent_ns
            app_out_ns = json.loads(agent.finish().strip().splitlines()[-1])
            snap = probe.read()
            events = probe.take_events()
    finally:
        router.close()
        ctx.term()

    n = NUM_MESSAGES
    assert snap["messages"] == {
        "sent": {"router": n, "agent": n},
        "received": {"router": n, "agent": n},
        "matched": {"router->agent": n, "agent->router": n},
        "unmatched": 0,
    }
    for direction in ("router->agent", "agent->router"):
        h = snap["hops"][direction]
        assert h["count"] == n
        assert 0 < h["p50_ns"] <= h["p99_ns"]
        assert h["mean_ns"] > 0
        assert snap["hops_by_node"]["node-a"][direction]["count"] == n

    # per message: the right ids, the probe's key is message_key, and the eBPF hop (zmq_msg_send entry →
    # zmq_msg_recv return) lies inside the application's (sent_ns stamp → after recv_multipart)
    by_direction = {"router->agent": app_out_ns, "agent->router": app_back_ns}
    for direction, app in by_direction.items():
        seen = [e for e in events if e.direction == direction]
        assert sorted(e.request_id for e in seen) == sorted(rid.encode()[:RID_MAX].decode() for rid in request_ids)
        full = {rid.encode()[:RID_MAX].decode(): rid for rid in request_ids}
        for e in seen:
            rid = full[e.request_id]
            assert e.key == message_key(rid, e.sent_ns)
            assert 0 < e.hop_ns <= app[rid], (direction, rid, e.hop_ns, app[rid])
            assert e.node == 1
    assert "node-a router->agent" in format_snapshot(snap)
    pids = {e.direction: (e.sender_pid, e.receiver_pid) for e in events}
    assert pids == {"router->agent": (os.getpid(), agent.pid), "agent->router": (agent.pid, os.getpid())}
