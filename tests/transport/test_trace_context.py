"""W3C Trace Context (transport/trace_context.py): a caller's traceparent makes a span its child, a bad one starts a
new trace, the sampling flag and tracestate travel on, and no header of any shape raises."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from transport.trace_context import (
    MAX_HEADER_CHARS,
    TraceContext,
    WallClock,
    child_of,
    incoming,
    root_sampled,
    trace_headers,
)

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
PARENT_ID = 0x00F067AA0BA902B7
TRACEPARENT = f"00-{TRACE_ID:032x}-{PARENT_ID:016x}-01"


def test_a_span_under_a_callers_traceparent_is_its_child_in_the_same_trace():
    ctx = child_of({"traceparent": TRACEPARENT, "tracestate": "vendor=abc,other=1"})
    assert (ctx.trace_id, ctx.parent_span_id, ctx.sampled) == (TRACE_ID, PARENT_ID, True)
    assert ctx.span_id not in (0, PARENT_ID)
    assert ctx.tracestate == "vendor=abc,other=1"
    # its own headers make it the next hop's parent, the tracestate passed on
    assert ctx.headers() == {
        "traceparent": f"00-{TRACE_ID:032x}-{ctx.span_id:016x}-01",
        "tracestate": "vendor=abc,other=1",
    }
    assert child_of(ctx.headers()).parent_span_id == ctx.span_id


def test_without_a_parent_a_span_starts_a_new_sampled_trace():
    a, b = child_of(None), child_of({})
    assert a.parent_span_id == 0 and a.sampled and a.trace_id != 0 and a.span_id != 0
    assert a.trace_id != b.trace_id
    assert "tracestate" not in a.headers()


def test_new_traces_are_sampled_by_their_trace_id_at_the_ratio_and_a_parents_decision_wins():
    low = (1 << 64) - 1
    assert root_sampled(5 << 64, 0.5) and not root_sampled((5 << 64) | low, 0.5)  # the low 64 bits decide
    assert root_sampled((1 << 63) - 1, 0.5) and not root_sampled(1 << 63, 0.5)
    assert all(root_sampled(t, 1.0) for t in (1, low, (7 << 64) | low)) and not root_sampled(1, 0.0)
    roots = [child_of(None, 0.25) for _ in range(2000)]
    assert 0.15 < sum(r.sampled for r in roots) / len(roots) < 0.35
    assert all(r.sampled == root_sampled(r.trace_id, 0.25) for r in roots)
    assert child_of({"traceparent": TRACEPARENT}, 0.0).sampled  # the caller sampled it: followed


def test_a_caller_that_does_not_sample_gets_no_sampled_child():
    ctx = child_of({"traceparent": f"00-{TRACE_ID:032x}-{PARENT_ID:016x}-00"})
    assert ctx.trace_id == TRACE_ID and not ctx.sampled
    assert ctx.headers()["traceparent"].endswith("-00")  # the decision travels on


def test_malformed_or_zero_traceparents_are_no_parent():
    for bad in (
        "garbage",
        f"00-{0:032x}-{PARENT_ID:016x}-01",  # all-zero trace id
        f"00-{TRACE_ID:032x}-{0:016x}-01",  # all-zero span id
        f"ff-{TRACE_ID:032x}-{PARENT_ID:016x}-01",  # version ff is invalid
        f"00-{TRACE_ID:032x}"[:-1] + f"-{PARENT_ID:016x}-01",  # a trace id one digit short
        TRACEPARENT + "x" * MAX_HEADER_CHARS,  # over the bound: not read at all
    ):
        assert incoming({"traceparent": bad}) is None, bad
        assert child_of({"traceparent": bad}).parent_span_id == 0


def test_trace_headers_keeps_only_the_two_headers_within_bounds():
    assert trace_headers({"traceparent": TRACEPARENT, "authorization": "secret", "x": "y"}) == {
        "traceparent": TRACEPARENT
    }
    assert trace_headers({"tracestate": "a" * (MAX_HEADER_CHARS + 1)}) is None
    assert trace_headers(None) is None and trace_headers({}) is None


def test_wall_clock_maps_monotonic_stamps_by_one_offset():
    clock = WallClock(offset_ns=1_000)
    assert clock.wall_ns(5) == 1_005
    assert clock.wall_ns_of_s(2.5) == 2_500_001_000


@given(st.dictionaries(st.sampled_from(["traceparent", "tracestate", "other"]), st.text(max_size=600)))
def test_no_header_value_raises(headers):
    ctx = child_of(headers)
    assert isinstance(ctx, TraceContext) and ctx.trace_id and ctx.span_id
    assert len(ctx.headers()["traceparent"]) == 55
