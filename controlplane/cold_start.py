"""A request for a pool scaled to zero waits for the pool's first node rather than fail at once (Knative's activator
holds requests the same way while a revision scales from zero).

    ControlPlane.generate ─► its stream ─► refused NO_NODE (the intake: no live node of its pool), its model held at
        zero nodes by the capacity plan (a variant of min_nodes 0 whose nodes are gone: controlplane/capacity_plan.py)
      ─► that refusal counted as the pool's arrival, so the plan asks for a node (and KEDA starts it)
      ─► wait until a node of the model joins, at most ``cold_start_wait_s`` from the request's arrival
      ─► a fresh stream: submitted again (refused again, say a node of another cell joined: wait again)

Held: a refusal before the stream's first chunk (the intake's; a failure mid-stream has another code), for a model
the plan holds at zero nodes or declares (controlplane/capacity_variants.py). A fleet that lost its nodes otherwise
still fails fast (503). Past the wait, the last refusal stands: 503 with Retry-After. A held request's refusals are
not counted while it waits (``RequestPath.submit``'s ``held``): one served in the end is no refusal; one refused in the
end counts once (``zoo:rejected_requests_total``, its class's refusals, its span from its arrival, the request log);
one its client left while it waited counts as cancelled. Its queue wait and TTFT count from its arrival, so the wait
shows where the client sees it. While it waits, the plan keeps a node of its pool asked for
(``CapacityPlanner.waiting``).

Once a node joined, the held requests try at once and its queue may fill: one refused then for its pool's full queues
waits on, tried again each ``HELD_RETRY_S`` as well as at each join (Knative's activator, too, keeps a request until a
pod has room). A held request's first refusal is its pool's arrival (the plan's demand); its later tries are not
(``RequestPath.submit``'s ``again``).

At most ``cold_start_max_waiting`` requests wait for a first node of one model at once (as Knative's activator queues
a bounded number per revision); one more is refused at once, as past its wait, and the first such refusal of a flood is
logged.

A ZeroMQ client's request waits the same way (controlplane/client_requests.py): pending meanwhile, so its client's
ping knows it and its cancel drops it; past the wait its ErrorReply is the refusal's.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import anyio

from controlplane.capacity_plan import CapacityPlanner
from controlplane.frontend import FrontendError
from controlplane.model_aliases import resolve_model
from controlplane.request_path import HeldRefusal
from transport.messages import ErrorCode, TokenChunk

log = logging.getLogger(__name__)

HELD_RETRY_S = 1.0  # a held request its pool's full queues refused tries again this often (admission's Retry-After)

WaitUntil = Callable[[Callable[[], bool], float], Awaitable[None]]


class WaitsFull(TimeoutError):
    """``cold_start_max_waiting`` requests wait for a first node of the model already: this one may not."""


class ColdStart:
    """``held(model, model_names, open_stream)``: the request's stream, held for a node while the plan (``planner``)
    holds its model at zero nodes (an HTTP request's); ``wait_s``, ``live`` and ``wait_for_join``: the same wait for a
    ZeroMQ client's request (controlplane/client_requests.py). ``registry``: the live nodes; ``path``: the RequestPath
    (its ``aliases``, other names of models, ``draining``: no request is held while the control plane drains, and
    ``submit`` and ``settle_held``: a held request's refusals counted once its wait ends); ``wait_until``:
    ControlPlane.wait_until."""

    def __init__(self, planner: CapacityPlanner, registry, path, wait_until: WaitUntil) -> None:
        self.planner, self.registry, self.path, self.wait_until = planner, registry, path, wait_until
        self._full: set[str] = set()  # models whose waits were full since none waited (logged once)

    def wait_s(self, asked: str, model_names: list[str]) -> tuple[str, float]:
        """The model a request asks for (``asked``: its model field, "" the default, ``model_names[0]``), and how
        long it may wait for a node of it (0: not at all)."""
        model = resolve_model(self.path.aliases, asked) or next(iter(model_names), "")
        return model, 0.0 if self.path.draining else self.planner.cold_start_wait_s(model)

    def live(self, model: str) -> frozenset[str]:
        return frozenset(view.node_id for view in self.registry.snapshot(model).nodes)

    async def wait_for_join(
        self, model: str, before: frozenset[str], timeout_s: float, stop: Callable[[], bool] = lambda: False
    ) -> None:
        """Until a node of ``model`` not in ``before`` joins, ``stop()`` or the control plane drains
        (TimeoutError past ``timeout_s``), counted in the plan's ``waiting`` for ``model`` meanwhile: a request
        waiting for a node keeps its pool asked for."""
        with self._waiting(model):
            await self.wait_until(lambda: stop() or self.path.draining or bool(self.live(model) - before), timeout_s)

    @contextlib.contextmanager
    def _waiting(self, model: str) -> Iterator[None]:
        """A request counted in the plan's ``waiting`` for ``model`` meanwhile; TimeoutError at once when
        ``cold_start_max_waiting`` requests wait already (its refusal stands)."""
        waiting, most = self.planner.waiting, self.planner.config.cold_start_max_waiting
        if waiting.get(model, 0) >= most:
            if model not in self._full:
                self._full.add(model)
                log.warning(
                    "%d requests wait for a first node of %r (cold_start_max_waiting): more are refused", most, model
                )
            raise WaitsFull
        waiting[model] = waiting.get(model, 0) + 1
        try:
            yield
        finally:
            waiting[model] -= 1
            if not waiting[model]:
                del waiting[model]
                self._full.discard(model)  # the flood is over: the next one is logged again

    def held(
        self, asked: str, model_names: list[str], open_stream: Callable[..., AsyncIterator[TokenChunk]]
    ) -> AsyncIterator[TokenChunk]:
        """``asked``: the request's model field ("": the default, ``model_names[0]``); ``open_stream(submit)``: a
        fresh stream of it, submitted through ``submit`` (``open_stream()``: through the control plane's own)."""
        model, wait_s = self.wait_s(asked, model_names)
        if wait_s <= 0:
            return open_stream()
        uncounted: list[HeldRefusal] = []  # the last try's refusal for want of a node, not counted yet
        tries = [0]

        def attempt() -> AsyncIterator[TokenChunk]:
            uncounted.clear()
            tries[0] += 1  # a try after the first: an arrival its pool counted already
            return open_stream(functools.partial(self.path.submit, held=uncounted.append, again=tries[0] > 1))

        def settle(refused: bool) -> None:
            for held in uncounted:
                self.path.settle_held(held, refused)
            uncounted.clear()

        async def wait_for_node(predicate: Callable[[], bool], timeout_s: float) -> None:
            with self._waiting(model):
                await self.wait_until(predicate, timeout_s)

        live = functools.partial(self.live, model)
        waits = lambda refused: bool(uncounted)  # noqa: E731 (refused for want of capacity: held, not counted yet)
        return held_stream(attempt, live, wait_for_node, wait_s, lambda: self.path.draining, settle, waits)


async def held_stream(
    open_stream: Callable[[], AsyncIterator[TokenChunk]],
    live_nodes: Callable[[], frozenset[str]],
    wait_until: WaitUntil,
    wait_s: float,
    stop: Callable[[], bool] = lambda: False,
    settle: Callable[[bool], None] = lambda refused: None,
    waits: Callable[[FrontendError], bool] = lambda refused: refused.code is ErrorCode.NO_NODE,
) -> AsyncIterator[TokenChunk]:
    """``open_stream()``: a fresh stream of the request (it is submitted at its first chunk); ``live_nodes()``: the
    live nodes of its model now; ``wait_until(predicate, timeout_s)``: ControlPlane.wait_until (TimeoutError past
    it); ``wait_s``: how long it may wait for a node (0: not at all); ``stop()``: wait no more (the control plane
    drains: its refusal stands); ``settle(refused)``: its wait ended unserved, ``refused`` (its refusal raised) or not
    (its stream closed, or cancelled, while it waited); ``waits(refused)``: whether a refusal is one to wait through
    (for want of a node; at a try after a node joined, its pool's queues full too: then tried again each
    ``HELD_RETRY_S`` as well as at each join, as Knative's activator keeps a request queued until a pod has room)."""
    deadline = anyio.current_time() + wait_s
    while True:
        before = live_nodes()
        stream = open_stream()
        try:
            first = await anext(stream)
        except StopAsyncIteration:
            return
        except FrontendError as refused:
            await stream.aclose()
            left_s = deadline - anyio.current_time()
            if not waits(refused) or left_s <= 0 or stop():
                settle(True)
                raise
            full = refused.code is not ErrorCode.NO_NODE  # its pool's nodes are there, their queues full
            try:
                joined = lambda: stop() or bool(live_nodes() - before)  # noqa: B023, E731 (called in here)
                await wait_until(joined, min(left_s, HELD_RETRY_S) if full else left_s)
            except WaitsFull:
                settle(True)
                raise refused from None
            except TimeoutError:
                if not full or anyio.current_time() >= deadline:
                    settle(True)
                    raise refused from None
            except BaseException:  # cancelled or closed while it waited: its client left, not refused
                settle(False)
                raise
            continue
        break
    try:
        yield first
        async for chunk in stream:
            yield chunk
    finally:
        await stream.aclose()
