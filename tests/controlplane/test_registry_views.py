"""The registry's views are built from a tuple of NodeView's fields (``_new_live_view``, compared as tuples before
any object is made): field for field what the keyword construction of NodeView gives, at every step of a node's
life; an unchanged node keeps its object."""

from __future__ import annotations

import dataclasses

from controlplane.registry import ClusterRegistry, _LiveView, _new_live_view
from controlplane.router.policy import NodeView
from engine.clock import ManualClock


def _fields(view: NodeView) -> tuple:
    return tuple(getattr(view, f.name) for f in dataclasses.fields(NodeView))


def _expected(hello, report, inflight: int, inflight_prefill: int) -> NodeView:
    """NodeView by keywords, from the hello and the last report (the registry's rule, spelt out)."""
    hw, kv = hello.hardware, hello.kv
    return NodeView(
        node_id=hello.node_id,
        gpu_type=hw.gpu_type,
        cell=hello.cell,
        model=hello.model,
        power_score=hello.power_score,
        memory_bandwidth_gbps=hw.memory_bandwidth_gbps,
        peak_tflops=hw.peak_tflops,
        max_model_len=hello.max_model_len,
        block_size=kv.block_size,
        num_device_blocks=kv.num_device_blocks,
        num_free_device_blocks=kv.num_device_blocks if report is None else report.num_free_device_blocks,
        kv_usage=0.0 if report is None else report.kv_usage,
        num_running=0 if report is None else report.num_running,
        num_waiting=0 if report is None else report.num_waiting,
        num_swapped=0 if report is None else report.num_swapped,
        queued_prefill_tokens=0 if report is None else report.queued_prefill_tokens,
        decode_batch_size=0 if report is None else report.decode_batch_size,
        prefill_tok_per_s=(report.prefill_tok_per_s if report is not None else 0.0) or hello.prefill_tok_per_s,
        decode_step_ms=(report.decode_step_ms if report is not None else 0.0) or hello.decode_step_ms,
        num_inflight=inflight,
        inflight_prefill_tokens=inflight_prefill,
        max_loras=hello.max_loras,
        lora_resident=() if report is None else tuple(report.lora_resident),
        lora_load_s=0.0 if report is None else report.lora_load_s,
        host=hello.host,
        rack=hello.rack,
    )


def test_nodeview_has_nothing_a_direct_slot_fill_would_skip():
    assert not hasattr(NodeView, "__post_init__")
    assert _LiveView.__slots__ == () and not hasattr(_LiveView, "__post_init__")
    values = tuple(range(len(dataclasses.fields(NodeView))))
    view = _new_live_view(values)
    assert type(view) is _LiveView and _fields(view) == values


def test_views_equal_the_keyword_construction_through_a_nodes_life(make_hello, make_report):
    registry = ClusterRegistry(ManualClock())
    hello = make_hello("a", prefill_tok_per_s=5000.0, decode_step_ms=9.0, max_loras=2, host="h1", rack="r1")
    registry.join(hello)

    def view():
        (v,) = registry.snapshot().nodes
        return v

    assert _fields(view()) == _fields(_expected(hello, None, 0, 0))
    registry.on_routed("a", "r1", 300)
    registry.on_routed("a", "r2", 50)
    assert _fields(view()) == _fields(_expected(hello, None, 2, 350))
    report = make_report(
        "a", num_running=1, num_waiting=1, kv_usage=0.25, num_free_device_blocks=700, queued_prefill_tokens=50,
        decode_batch_size=1, prefill_tok_per_s=0.0, decode_step_ms=11.0, lora_resident=["x"], lora_load_s=0.5,
        num_requests_received_total=1,
    )  # fmt: skip
    registry.report(report)
    assert _fields(view()) == _fields(_expected(hello, report, 2, 50))  # r1 reported, r2 still in transit
    registry.on_first_token("a", "r2")
    assert _fields(view()) == _fields(_expected(hello, report, 2, 0))
    before = view()
    registry.on_first_token("a", "r2")  # nothing changes: the same object
    registry.report(report)
    assert view() is before
    registry.on_finished("a", "r1")
    assert _fields(view()) == _fields(_expected(hello, report, 1, 0)) and view() is not before
