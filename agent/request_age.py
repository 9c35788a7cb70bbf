"""How old a GenerateRequest is when the agent gets it: the engine's clocks start at the gateway's arrival.

    gateway arrival ── control plane (tokenize, route) ── sent ─ hop ─ received ── handler ── engine inbox …
    └──────────── sent_ns - arrival_ns ─────────────────┘ └ hop ┘ └ now - recv ┘
       (the control plane's clock: a duration, valid        (the agent's clock: always valid)
        whatever host the agent runs on)

The hop ``recv_ns - sent_ns`` compares two processes' CLOCK_MONOTONIC readings: meaningful on one host
(loopback: the usual `zoo up`), meaningless across hosts (each host's clock starts at its own boot). It is
counted only when it lies in [0, MAX_HOP_S); otherwise it is left out, and the server's TTFT is shorter than
the client's by at most that one network hop (plus the reply's way back, never counted).
"""

from __future__ import annotations

MAX_HOP_S = 1.0  # a router → node "hop" longer than this (or negative) is two hosts' unrelated clocks


def request_age_s(arrival_ns: int, sent_ns: int, recv_ns: int, now_ns: int) -> float:
    """Seconds since the request arrived at the gateway, as far as the agent can tell (>= 0).

    arrival_ns / sent_ns: the control plane's monotonic clock (GenerateRequest.arrival_ns, Envelope.sent_ns;
    0 when not stamped). recv_ns / now_ns: the agent's monotonic clock (receipt, now)."""
    at_control_plane_ns = sent_ns - arrival_ns if arrival_ns and sent_ns >= arrival_ns else 0
    hop_ns = recv_ns - sent_ns if sent_ns else 0
    if not 0 <= hop_ns < MAX_HOP_S * 1e9:
        hop_ns = 0
    since_receipt_ns = max(now_ns - recv_ns, 0)
    return (at_control_plane_ns + hop_ns + since_receipt_ns) / 1e9
