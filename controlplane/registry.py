"""ClusterRegistry: which nodes are alive, what they can do, how loaded they are. Sans-IO.

The control plane's actor feeds it every message from an agent and asks it for snapshots; the fleet
simulator drives the same class on virtual time. It never fails a request itself: membership changes that
strand requests come back as ``LostNode`` values and the caller fails those requests with
``LostNode.error_message``.

Life of a node::

    join(hello) ──► live ──heartbeat()/report()──► live (liveness = any message within heartbeat_timeout_s)
                     │  └─ expire(): silent for > heartbeat_timeout_s ──► removed, LostNode(HEARTBEAT_TIMEOUT)
                     ├─ leave() ──► removed, LostNode(LEFT)
                     └─ join(hello) again (agent restarted) ──► fresh state, LostNode(RESTARTED)

    routing state of a live node (NodeState; only UP nodes are in snapshots, so policies never see the rest):
        UP ──suspect(): a send to it failed──► SUSPECT ──heartbeat()/report(): it is alive──► UP
        UP | SUSPECT ──drain(): it drains (SIGTERM, `zoo drain`)──► DRAINING (until it leaves or joins again)

Nodes are only reaped by ``expire()``: the caller runs it on a timer (e.g. every heartbeat_timeout_s / 4),
so a dead node can appear in snapshots for at most that long past its timeout: a node that died is
detected within heartbeat_timeout_s + that period of its last message.

In-flight accounting (fresher than the reports, which arrive a few times a second)::

    on_routed(node, request, prompt tokens,   num_inflight += 1, inflight prefill += prompt tokens
              max_tokens)
    report(...)                               inflight prefill := 0 (the report's queued_prefill_tokens
                                              now counts those prompts; one in transit at report time is
                                              missed until the next report)
    on_first_token(node, request)             the request's prompt leaves inflight prefill if still there;
                                              it joins the node's decoders (its max_tokens known)
    on_finished(node, request)                num_inflight -= 1

Snapshots: one NodeView object per node, rebuilt only when that node changes (policies rely on unchanged
nodes keeping the same object, see router/policies/node_table.py; these views compare by identity), kept
in four groups — all nodes, by
model, by cell, by (model, cell) — each in node-id order, so ``snapshot()`` is one tuple copy. Each
replaced view is logged (``changes``: router/node_changes.py), and a snapshot carries its place in that
log, so a policy re-derives only the nodes that changed since its last snapshot of the same group.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import operator
from collections import deque
from dataclasses import dataclass
from itertools import repeat

from backends.kv_link_model import check_place_name
from controlplane.router.decode_steps import NO_DECODERS, NUM_BINS, bin_of
from controlplane.router.node_changes import NodeChangeLog
from controlplane.router.policy import ClusterSnapshot, NodeView
from engine.clock import Clock
from engine.config import HASH_ALGOS
from transport.messages import LoadReport, NodeHello


class LossReason(enum.StrEnum):
    HEARTBEAT_TIMEOUT = "heartbeat_timeout"
    LEFT = "left"
    RESTARTED = "restarted"


class NodeState(enum.StrEnum):
    """A live node's routing state (FleetStats shows it as the node's ``state``)."""

    UP = "up"  # routed to
    SUSPECT = "suspect"  # a send to it failed: not routed to until it is heard from again
    DRAINING = "draining"  # not routed to; its requests finish there (or resume elsewhere when it leaves)


@dataclass(frozen=True, slots=True)
class LostNode:
    """A node that went away, and the requests that were in flight there (to be failed by the caller)."""

    node_id: str
    reason: LossReason
    request_ids: tuple[str, ...]
    detail: str = ""
    silent_s: float = 0.0  # registry clock: from the node's last message to its removal

    @property
    def error_message(self) -> str:
        what = {
            LossReason.HEARTBEAT_TIMEOUT: "stopped sending heartbeats",
            LossReason.LEFT: "left the cluster",
            LossReason.RESTARTED: "restarted",
        }[self.reason]
        detail = f" ({self.detail})" if self.detail else ""
        return f"node {self.node_id!r} {what}{detail} while serving this request; it was not completed"


@dataclass(frozen=True, slots=True)
class RegistryStats:
    """``*_total`` fields count since the registry was created."""

    num_nodes: int
    num_nodes_by_model: dict[str, int]
    num_inflight: int
    num_joins_total: int
    num_rejoins_total: int
    num_leaves_total: int
    num_expired_total: int
    num_failed_requests_total: int  # in flight on a node that was lost
    num_unknown_node_messages_total: int  # heartbeats/reports from a node not (or no longer) registered
    num_suspect: int = 0
    num_draining: int = 0
    num_suspected_total: int = 0  # UP → SUSPECT transitions (failed sends)
    num_drains_total: int = 0
    num_resumes_total: int = 0  # DRAINING → UP: an operator's drain undone (`zoo drain --resume`)


class _LiveView(NodeView):
    """A NodeView that compares by identity (policies compare snapshot tuples; the generated ``__eq__`` costs ~2 µs
    a node); the registry compares values as tuples (``_Node.view_values``), making one object per node state."""

    __slots__ = ()
    __eq__ = object.__eq__
    __hash__ = object.__hash__


def step_mean_ms(report: LoadReport) -> float:
    """``NodeView.step_mean_ms`` from a report: its ``decode_token_step_ms`` (the mean time of the window's steps
    that carried decode rows, mixed ones included), 0.0 where that is not a finite time >= 0."""
    value = report.decode_token_step_ms
    return float(value) if 0.0 <= value < math.inf else 0.0


_VIEW_FIELDS = tuple(field.name for field in dataclasses.fields(NodeView))
_VIEW_SETTERS = tuple(getattr(NodeView, name).__set__ for name in _VIEW_FIELDS)  # the slots' own setters


def _new_live_view(values: tuple) -> _LiveView:
    """``_LiveView(*values)`` (values: every field, in order) at half the cost: the frozen dataclass's ``__init__``
    sets each field through ``object.__setattr__``; this sets the slots directly, in one C loop. NodeView has no
    ``__post_init__`` nor field converters to skip (tests/controlplane/test_registry_views.py checks it)."""
    view = object.__new__(_LiveView)
    deque(map(operator.call, _VIEW_SETTERS, repeat(view), values), maxlen=0)
    return view


class _Group:
    """A snapshot group's views in node-id order, as a list (a snapshot copies it into a tuple: ~4x faster
    than copying a dict's values, ~2 µs instead of ~7 at 1,024 nodes), and each node's position in it."""

    __slots__ = ("position", "views")

    def __init__(self) -> None:
        self.views: list[NodeView] = []
        self.position: dict[str, int] = {}

    def put(self, node_id: str, view: NodeView) -> bool:
        """``view`` is now ``node_id``'s view; True when it was not a member (appended: out of order until sort)."""
        i = self.position.get(node_id)
        if i is not None:
            self.views[i] = view
            return False
        self.position[node_id] = len(self.views)
        self.views.append(view)
        return True

    def remove(self, node_id: str) -> None:
        i = self.position.pop(node_id, None)
        if i is not None:
            del self.views[i]
            for view in self.views[i:]:
                self.position[view.node_id] -= 1

    def sort(self) -> None:
        self.views.sort(key=_node_id_of)
        self.position = {view.node_id: i for i, view in enumerate(self.views)}


def _node_id_of(view: NodeView) -> str:
    return view.node_id


class _Node:
    __slots__ = (
        "decode_hist", "decode_inv_steps", "decode_slack_hist", "decode_steps_hist", "decoding", "hello", "inflight",
        "inv_steps", "last_seen_s", "leaving", "num_routed_total", "report", "routed_order", "state",
        "unreported_prefill", "view", "view_values",
    )  # fmt: skip

    def __init__(self, hello: NodeHello, now_s: float) -> None:
        self.hello = hello
        self.state = NodeState.UP
        self.leaving = False  # its agent drains to stop: a drain that cannot be undone
        self.report: LoadReport | None = None
        self.last_seen_s = now_s
        self.inflight: dict[str, int] = {}  # request id → prompt tokens
        self.unreported_prefill: dict[str, int] = {}  # routed, not in a report yet, no first token yet
        # 1 / max(max_tokens - 1, 1) of the requests in flight whose max_tokens is known, and of those decoding
        # (first token seen), and the mean of ``decoding`` (NodeView.decode_inv_steps; 0.0: none), kept as it changes
        self.inv_steps: dict[str, float] = {}
        self.decoding: dict[str, float] = {}
        self.decode_inv_steps = 0.0
        # the decoders of ``decoding`` counted per bin of their decode steps (router/decode_steps.py), and that as
        # NodeView.decode_steps_hist (empty: none), kept as it changes
        self.decode_hist = [0] * NUM_BINS
        self.decode_steps_hist = NO_DECODERS
        self.decode_slack_hist = NO_DECODERS  # NodeView.decode_slack_hist: the last report's, if well formed
        self.num_routed_total = 0
        self.routed_order: deque[tuple[int, str]] = deque()  # (routing sequence number, request id)
        self.view: NodeView | None = None
        self.view_values: tuple = ()  # its view's fields, in order (ClusterRegistry._refresh)

    def decoding_changed(self, inv_steps: float, delta: int) -> None:
        """``decoding`` gained (``delta`` 1) or lost (-1) a request of ``inv_steps``: its mean and histogram again."""
        decoding = self.decoding
        self.decode_inv_steps = sum(decoding.values()) / len(decoding) if decoding else 0.0
        self.decode_hist[bin_of(round(1.0 / inv_steps))] += delta
        self.decode_steps_hist = tuple(self.decode_hist) if decoding else NO_DECODERS

    def take_reported(self, report: LoadReport) -> None:
        """Forget the routed requests ``report`` accounts for: the first ``num_requests_received_total`` the
        node was sent (one link, in order); the rest are still on their way to it (no herding). Keeps its
        decode_slack_hist where it is one count per bin (none otherwise: a malformed one counts nothing)."""
        self.decode_slack_hist = _slack_hist(report.decode_slack_hist)
        received = report.num_requests_received_total
        if received < 0:
            self.unreported_prefill.clear()
            self.routed_order.clear()
            return
        order, unreported = self.routed_order, self.unreported_prefill
        while order and order[0][0] < received:
            unreported.pop(order.popleft()[1], None)


def _slack_hist(counts: list[int]) -> tuple[int, ...]:
    """LoadReport.decode_slack_hist as NodeView carries it: NUM_BINS counts >= 0 with one at least, else none."""
    if len(counts) != NUM_BINS or min(counts) < 0 or not any(counts):
        return NO_DECODERS
    return tuple(counts)


_ALL = (None, None)


class ClusterRegistry:
    def __init__(self, clock: Clock, heartbeat_timeout_s: float = 3.0) -> None:
        if heartbeat_timeout_s <= 0:
            raise ValueError(f"heartbeat_timeout_s must be > 0, got {heartbeat_timeout_s}")
        self.clock = clock
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self._nodes: dict[str, _Node] = {}
        self._node_of_request: dict[str, str] = {}
        # (model | None, cell | None) → its UP nodes' views in node-id order; (None, None) = every node
        self._groups: dict[tuple[str | None, str | None], _Group] = {_ALL: _Group()}
        self.changes = NodeChangeLog()  # views replaced (ids), and an epoch bumped when a group's members change
        self._num_joins_total = 0
        self._num_rejoins_total = 0
        self._num_leaves_total = 0
        self._num_expired_total = 0
        self._num_failed_requests_total = 0
        self._num_unknown_total = 0
        self._num_suspected_total = 0
        self._num_drains_total = 0
        self._num_resumes_total = 0

    # -- membership ----------------------------------------------------------------------------------

    def join(self, hello: NodeHello) -> LostNode | None:
        """Register ``hello.node_id``. A known id means the agent restarted: its state starts afresh and
        the requests that were in flight on the old process come back as a LostNode(RESTARTED)."""
        _validate_hello(hello)
        node_id = hello.node_id
        lost = None
        if node_id in self._nodes:
            lost = self._remove(node_id, LossReason.RESTARTED, f"pid {hello.pid}" if hello.pid else "")
            self._num_rejoins_total += 1
        self._num_joins_total += 1
        node = self._nodes[node_id] = _Node(hello, self.clock.now())
        self._refresh(node)
        self._sort_groups(hello)
        return lost

    def leave(self, node_id: str, reason: str = "") -> LostNode | None:
        """The node said goodbye (or the caller removes it); None if it was not registered."""
        if node_id not in self._nodes:
            return None
        self._num_leaves_total += 1
        return self._remove(node_id, LossReason.LEFT, reason)

    def expire(self) -> list[LostNode]:
        """Remove every node silent for more than heartbeat_timeout_s; returns them with their requests."""
        deadline_s = self.clock.now() - self.heartbeat_timeout_s
        dead = [node_id for node_id, node in self._nodes.items() if node.last_seen_s < deadline_s]
        lost = []
        for node_id in dead:
            silent_s = self.clock.now() - self._nodes[node_id].last_seen_s
            lost.append(self._remove(node_id, LossReason.HEARTBEAT_TIMEOUT, f"silent for {silent_s:.1f} s", silent_s))
        self._num_expired_total += len(dead)
        return lost

    def heartbeat(self, node_id: str) -> bool:
        """Any message from ``node_id`` proves it alive (a SUSPECT node is UP again). False: unknown node
        (it should join again)."""
        node = self._nodes.get(node_id)
        if node is None:
            self._num_unknown_total += 1
            return False
        node.last_seen_s = self.clock.now()
        if node.state is NodeState.SUSPECT:
            self._restore(node)
        return True

    def report(self, report: LoadReport) -> bool:
        """Take a node's load report (also a heartbeat). False: unknown node (it should join again)."""
        node = self._nodes.get(report.node_id)
        if node is None:
            self._num_unknown_total += 1
            return False
        node.last_seen_s = self.clock.now()
        node.report = report
        node.take_reported(report)
        self._refresh(node)
        if node.state is NodeState.SUSPECT:
            self._restore(node)
        return True

    # -- routing state -------------------------------------------------------------------------------

    def suspect(self, node_id: str) -> bool:
        """A send to ``node_id`` failed: route nothing more there until it is heard from (``heartbeat``,
        ``report``). False when it is unknown or not UP (a draining node stays draining)."""
        node = self._nodes.get(node_id)
        if node is None or node.state is not NodeState.UP:
            return False
        node.state = NodeState.SUSPECT
        self._num_suspected_total += 1
        self._ungroup(node_id, node.hello)
        return True

    def drain(self, node_id: str, leaving: bool = False) -> bool:
        """Route nothing new to ``node_id`` until it leaves (or joins again), or, unless ``leaving`` (its agent
        drains to stop), until it is resumed; False when it is unknown."""
        node = self._nodes.get(node_id)
        if node is None:
            return False
        node.leaving |= leaving
        if node.state is not NodeState.DRAINING:
            node.state = NodeState.DRAINING
            self._num_drains_total += 1
            self._ungroup(node_id, node.hello)
        return True

    def resume(self, node_id: str) -> str:
        """A drained node is routed to again (DRAINING → UP): "resumed"; "not_draining" (nothing done), "leaving"
        (its agent drains to stop: it stays draining) or "unknown"."""
        node = self._nodes.get(node_id)
        if node is None:
            return "unknown"
        if node.leaving:
            return "leaving"
        if node.state is not NodeState.DRAINING:
            return "not_draining"
        self._restore(node)
        self._num_resumes_total += 1
        return "resumed"

    def state(self, node_id: str) -> NodeState | None:
        node = self._nodes.get(node_id)
        return None if node is None else node.state

    def leaving(self, node_id: str) -> bool:
        """Whether the node drains to stop (its agent's SIGTERM): a drain that no resume undoes."""
        return getattr(self._nodes.get(node_id), "leaving", False)

    # -- in-flight accounting ------------------------------------------------------------------------

    def on_routed(self, node_id: str, request_id: str, num_prompt_tokens: int, max_tokens: int = 0) -> None:
        """``request_id`` was sent to ``node_id``, to generate at most ``max_tokens`` (0: not known). KeyError:
        unknown node; ValueError: id already in flight."""
        node = self._nodes.get(node_id)
        if node is None:
            raise KeyError(f"cannot route {request_id!r} to unknown node {node_id!r}")
        if request_id in self._node_of_request:
            raise ValueError(f"request {request_id!r} is already in flight on {self._node_of_request[request_id]!r}")
        node.inflight[request_id] = num_prompt_tokens
        node.unreported_prefill[request_id] = num_prompt_tokens
        if max_tokens > 0:
            node.inv_steps[request_id] = 1.0 / max(max_tokens - 1, 1)
        node.routed_order.append((node.num_routed_total, request_id))
        node.num_routed_total += 1
        self._node_of_request[request_id] = node_id
        self._refresh(node)

    def on_first_token(self, node_id: str, request_id: str) -> None:
        """The request's prefill is done. Unknown node or request: ignored (e.g. after a restart)."""
        node = self._nodes.get(node_id)
        if node is None:
            return
        changed = node.unreported_prefill.pop(request_id, None) is not None
        inv_steps = node.inv_steps.get(request_id)
        if inv_steps is not None and request_id not in node.decoding:
            node.decoding[request_id] = inv_steps
            node.decoding_changed(inv_steps, 1)
            changed = True
        if changed:
            self._refresh(node)

    def on_finished(self, node_id: str, request_id: str) -> None:
        """The request finished, failed or was cancelled. Unknown node or request: ignored."""
        node = self._nodes.get(node_id)
        if node is None or node.inflight.pop(request_id, None) is None:
            return
        node.unreported_prefill.pop(request_id, None)
        node.inv_steps.pop(request_id, None)
        inv_steps = node.decoding.pop(request_id, None)
        if inv_steps is not None:
            node.decoding_changed(inv_steps, -1)
        del self._node_of_request[request_id]
        self._refresh(node)

    # -- queries -------------------------------------------------------------------------------------

    def snapshot(self, model: str | None = None, cell: str | None = None) -> ClusterSnapshot:
        """The UP nodes serving ``model`` in ``cell`` (None: any), in node-id order: what may be routed to."""
        key = (model, cell)
        group = self._groups.get(key)
        nodes = () if group is None else tuple(group.views)
        return ClusterSnapshot(self.clock.now(), nodes, self.changes.mark(key))

    def views(self) -> tuple[NodeView, ...]:
        """Every registered node's view, whatever its state, in node-id order (for stats; O(N log N))."""
        return tuple(self._nodes[node_id].view for node_id in sorted(self._nodes))

    def view(self, node_id: str) -> NodeView | None:
        """The node's current view (None: unknown node)."""
        node = self._nodes.get(node_id)
        return None if node is None else node.view

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def __len__(self) -> int:
        return len(self._nodes)

    def hello(self, node_id: str) -> NodeHello:
        return self._nodes[node_id].hello

    def last_report(self, node_id: str) -> LoadReport | None:
        """The node's latest LoadReport (None: unknown node, or none yet)."""
        node = self._nodes.get(node_id)
        return None if node is None else node.report

    def model_names(self) -> list[str]:
        """Models some registered node serves, in the order their first node joined."""
        return list(dict.fromkeys(node.hello.model for node in self._nodes.values()))

    def node_of_request(self, request_id: str) -> str | None:
        return self._node_of_request.get(request_id)

    def inflight_request_ids(self, node_id: str) -> list[str]:
        node = self._nodes.get(node_id)
        return [] if node is None else list(node.inflight)

    def make_stats(self) -> RegistryStats:
        by_model: dict[str, int] = {}
        for node in self._nodes.values():
            by_model[node.hello.model] = by_model.get(node.hello.model, 0) + 1
        return RegistryStats(
            num_nodes=len(self._nodes),
            num_nodes_by_model=by_model,
            num_inflight=len(self._node_of_request),
            num_joins_total=self._num_joins_total,
            num_rejoins_total=self._num_rejoins_total,
            num_leaves_total=self._num_leaves_total,
            num_expired_total=self._num_expired_total,
            num_failed_requests_total=self._num_failed_requests_total,
            num_unknown_node_messages_total=self._num_unknown_total,
            num_suspect=sum(node.state is NodeState.SUSPECT for node in self._nodes.values()),
            num_draining=sum(node.state is NodeState.DRAINING for node in self._nodes.values()),
            num_suspected_total=self._num_suspected_total,
            num_drains_total=self._num_drains_total,
            num_resumes_total=self._num_resumes_total,
        )

    # -- internals -----------------------------------------------------------------------------------

    def _remove(self, node_id: str, reason: LossReason, detail: str, silent_s: float = 0.0) -> LostNode:
        node = self._nodes.pop(node_id)
        for request_id in node.inflight:
            self._node_of_request.pop(request_id, None)
        self._num_failed_requests_total += len(node.inflight)
        self._ungroup(node_id, node.hello)
        return LostNode(node_id, reason, tuple(node.inflight), detail, silent_s)

    def _ungroup(self, node_id: str, hello: NodeHello) -> None:
        """Take the node out of every snapshot group (it stays registered, or is being removed)."""
        self.changes.reorder()
        for key in _group_keys(hello):
            group = self._groups.get(key)
            if group is not None:
                group.remove(node_id)
                if not group.views and key != _ALL:
                    del self._groups[key]

    def _restore(self, node: _Node) -> None:
        """SUSPECT or DRAINING → UP: back in its snapshot groups, in node-id order."""
        node.state = NodeState.UP
        self._refresh(node)
        self._group(node)
        self._sort_groups(node.hello)

    def _refresh(self, node: _Node) -> None:
        """Rebuild ``node``'s view and put it in its groups (at the same position)."""
        hello, report = node.hello, node.report
        hw = hello.hardware
        # NodeView's fields in order (_VIEW_FIELDS), compared as a tuple with the current view's before any
        # object is made: most refreshes change a count or two, some nothing
        if report is None:
            load = (hello.kv.num_device_blocks, 0.0, 0, 0, 0, 0, 0, hello.prefill_tok_per_s, hello.decode_step_ms)
            lora_resident, lora_load_s = (), 0.0
        else:
            load = (
                report.num_free_device_blocks,
                report.kv_usage,
                report.num_running,
                report.num_waiting,
                report.num_swapped,
                report.queued_prefill_tokens,
                report.decode_batch_size,
                # measured by the node: in its reports, else at its start-up (hello); 0 = never measured
                report.prefill_tok_per_s or hello.prefill_tok_per_s,
                report.decode_step_ms or hello.decode_step_ms,
            )
            lora_resident, lora_load_s = tuple(report.lora_resident), report.lora_load_s
        values = (
            hello.node_id,
            hw.gpu_type,
            hello.cell,
            hello.model,
            hello.power_score,
            hw.memory_bandwidth_gbps,
            hw.peak_tflops,
            hello.max_model_len,
            hello.kv.block_size,
            hello.kv.num_device_blocks,
            *load,
            len(node.inflight),
            sum(node.unreported_prefill.values()),
            hello.max_loras,
            lora_resident,
            lora_load_s,
            hello.host,
            hello.rack,
            hello.kv.prefix_hash_algo,
            0.0 if report is None else step_mean_ms(report),
            node.decode_inv_steps,
            node.decode_steps_hist,
            node.decode_slack_hist,
            bool(hello.speculative),
        )
        if values == node.view_values:
            return  # keep the old object: policies treat an unchanged object as an unchanged node
        node.view_values = values
        node.view = view = _new_live_view(values)
        self.changes.record(view)
        if node.state is NodeState.UP:
            self._group(node)

    def _group(self, node: _Node) -> None:
        """Put the node's view in its groups (at its position there, if it is a member already)."""
        groups = self._groups
        node_id = node.hello.node_id
        for key in _group_keys(node.hello):
            group = groups.get(key)
            if group is None:
                group = groups[key] = _Group()
            if group.put(node_id, node.view):
                self.changes.reorder()  # a new member (at the end until _sort_groups puts it in order)

    def _sort_groups(self, hello: NodeHello) -> None:
        self.changes.reorder()
        for key in _group_keys(hello):
            self._groups[key].sort()


def _group_keys(hello: NodeHello) -> tuple[tuple[str | None, str | None], ...]:
    return (_ALL, (hello.model, None), (None, hello.cell), (hello.model, hello.cell))


def _validate_hello(hello: NodeHello) -> None:
    if not hello.node_id:
        raise ValueError("NodeHello.node_id must not be empty")
    if hello.kv.block_size < 1 or hello.kv.num_device_blocks < 1:
        raise ValueError(f"node {hello.node_id!r}: KV needs block_size >= 1 and num_device_blocks >= 1, got {hello.kv}")
    if hello.kv.prefix_hash_algo not in HASH_ALGOS:
        algo = hello.kv.prefix_hash_algo[:64]  # a peer's string, bounded in the error
        raise ValueError(f"node {hello.node_id!r}: KV prefix_hash_algo must be one of {list(HASH_ALGOS)}, got {algo!r}")
    if hello.max_model_len < 1:
        raise ValueError(f"node {hello.node_id!r}: max_model_len must be >= 1, got {hello.max_model_len}")
    for what, name in (("host", hello.host), ("rack", hello.rack)):
        if name:  # "": not said
            check_place_name(f"node {hello.node_id!r}: {what}", name)
