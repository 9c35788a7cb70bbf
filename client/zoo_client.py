"""The ZeroMQ client library: talk to a Silicon Zoo control plane from an application.

    async with AsyncZooClient("tcp://127.0.0.1:5556") as zoo:
        done = await zoo.generate(prompt="Once upon a time", max_tokens=32)          # Completion
        async with await zoo.generate(messages=[...], stream=True) as stream:        # GenerationStream
            async for chunk in stream:
                print(chunk.text, end="")

    with ZooClient("tcp://127.0.0.1:5556") as zoo:                                    # the same, blocking
        for chunk in zoo.generate(prompt="Hi", stream=True):
            ...

One DEALER socket per client, owned by the client's Link (a reader and a writer task in the client's task
group); chunks are demultiplexed by request id into one bounded stream per request. A refused request
raises at ``generate`` (ZooOverloadedError carries ``retry_after_s``; ``max_retries`` sends an overloaded or
no-node refusal again first: client/retry.py); a failure mid-stream raises from
the iteration (ZooNodeFailedError). Leaving a stream early, ``cancel()``, or a timeout sends a
CancelRequest, so the node stops generating. A request whose node fails mid-stream is resumed on another
node by the control plane: the stream simply continues.

The control plane itself may restart or vanish. While requests are in flight a watchdog pings it every
``ping_interval_s`` with their ids; the Pong names those it does not know (it restarted). Such a request
is sent again when it had produced no token yet (at most MAX_RESUBMITS times), else its stream raises
ZooConnectionLostError; a control plane silent for ``connection_timeout_s`` fails them all the same way.
So no stream waits for ``timeout_s`` on a control plane that is gone.
"""

from __future__ import annotations

import contextlib
import itertools
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import zmq.asyncio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from client.completion import Completion
from client.errors import ZooConnectionLostError, ZooError, ZooTimeoutError, error_from_reply
from client.request_build import build_request
from client.retry import retried, retry_delay_s
from engine.embeddings import cosine, score_pairs
from transport.actor import MailboxFull
from transport.curve import CurveClient
from transport.dispatch import Dispatcher, Incoming
from transport.link import Link
from transport.messages import (
    CancelRequest,
    ClientGenerate,
    ErrorCode,
    ErrorReply,
    NodeDrain,
    Ping,
    Pong,
    SleepControl,
    TokenChunk,
)
from transport.sockets import DEFAULT_CLIENT_ENDPOINT, Channel, Received, connect_dealer

# --------------------------------------------------------------------------- async client

MAX_RESUBMITS = 3  # a request that produced no token is sent again to a restarted control plane at most this often
WATCH_PING = "zoo-watch-"  # request ids of the watchdog's pings
EMBED_WAVE = 256  # embed(): requests in flight at once, as the gateway's /v1/embeddings sends them


@dataclass(slots=True)
class _Sent:
    """A ClientGenerate in flight: what to send again, and what came back (counted by the reader).
    num_ping: watchdog pings sent before it was (last) sent; only later pings' Pongs speak about it."""

    msg: ClientGenerate
    num_ping: int
    num_tokens: int = 0
    num_resubmits: int = 0


class GenerationStream:
    """The chunks of one request, as they arrive. Iterate; ``aclose()``/``cancel()`` stops the request."""

    def __init__(
        self, client: AsyncZooClient, request_id: str, receive: MemoryObjectReceiveStream, first: TokenChunk | None
    ) -> None:
        self.client = client
        self.request_id = request_id
        self._receive = receive
        self._first = first
        self.finished = first is not None and first.finished

    def __aiter__(self) -> GenerationStream:
        return self

    async def __anext__(self) -> TokenChunk:
        if self._first is not None:
            chunk, self._first = self._first, None
            return chunk
        if self.finished:
            await self.aclose()
            raise StopAsyncIteration
        chunk = await self.client._next(self.request_id, self._receive)
        self.finished = chunk.finished
        return chunk

    async def cancel(self) -> None:
        """Ask the control plane to stop the request (no-op once it finished)."""
        if not self.finished:
            self.finished = True
            self.client._cancel(self.request_id)
        self.client._forget(self.request_id)
        self._receive.close()

    aclose = cancel

    async def __aenter__(self) -> GenerationStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.cancel()

    async def collect(self) -> Completion:
        """Read the stream to its end into one Completion."""
        text, token_ids, logprobs, n = [], [], [], 0
        last: TokenChunk | None = None
        prompt_logprobs = embedding = prompt_token_ids = None
        async for chunk in self:
            text.append(chunk.text)
            token_ids += chunk.token_ids
            logprobs += chunk.logprobs or []
            prompt_logprobs = chunk.prompt_logprobs if chunk.prompt_logprobs is not None else prompt_logprobs
            embedding = chunk.embedding if chunk.embedding is not None else embedding
            prompt_token_ids = chunk.prompt_token_ids if chunk.prompt_token_ids is not None else prompt_token_ids
            n += 1
            last = chunk
        assert last is not None
        return Completion(
            self.request_id,
            "".join(text),
            token_ids,
            last.finish_reason,
            last.num_prompt_tokens,
            last.num_output_tokens,
            last.node_id,
            n,
            logprobs,
            prompt_logprobs,
            embedding,
            prompt_token_ids,
        )


class AsyncZooClient:
    """Use as ``async with AsyncZooClient(endpoint) as client``: the context owns the socket and its tasks.

    timeout_s: the longest wait for the first chunk and between chunks (ZooTimeoutError; the request is
        cancelled). model: the default model (None: the fleet's default).
    ping_interval_s / connection_timeout_s: while requests are in flight, ping the control plane this often;
        silent for connection_timeout_s → their streams raise ZooConnectionLostError.
    curve: CURVE to a control plane started with keys (``load_curve_client(dir, "clients", name)``); a
        control plane that allow-lists clients never completes the handshake of an unlisted key, so its
        requests time out.
    max_retries: a request refused as overloaded or with no node to take it (a fleet at capacity, a control plane
        draining for a restart) is sent again this many times, after the refusal's retry-after or the openai SDK's
        back-off (client/retry.py), before its refusal raises; 0 (the default): it raises at once.
    """

    def __init__(
        self,
        endpoint: str = DEFAULT_CLIENT_ENDPOINT,
        *,
        timeout_s: float = 60.0,
        model: str | None = None,
        context: zmq.asyncio.Context | None = None,
        curve: CurveClient | None = None,
        ping_interval_s: float = 0.5,
        connection_timeout_s: float = 5.0,
        max_retries: int = 0,
    ) -> None:
        if not 0 < ping_interval_s < connection_timeout_s:
            raise ValueError("need 0 < ping_interval_s < connection_timeout_s")
        if max_retries < 0:
            raise ValueError(f"need max_retries >= 0, got {max_retries}")
        self.max_retries = max_retries
        self.ping_interval_s = ping_interval_s
        self.connection_timeout_s = connection_timeout_s
        self._sent: dict[str, _Sent] = {}  # ClientGenerates in flight (the reader's view)
        self._num_pings = 0
        self._num_unanswered = 0  # watchdog pings sent since the control plane was last heard from
        self._last_recv_s = time.monotonic()
        self.control_plane_started_ns = 0  # from the latest Pong: a new value means it restarted
        self.endpoint = endpoint
        self.curve = curve
        self.timeout_s = timeout_s
        self.model = model
        self._ctx = context
        self._own_ctx = context is None
        self._link: Link | None = None
        self._streams: dict[str, MemoryObjectSendStream] = {}
        self._stack: contextlib.AsyncExitStack | None = None
        handlers = {TokenChunk: self._on_message, ErrorReply: self._on_message, Pong: self._on_pong}
        handlers[NodeDrain] = handlers[SleepControl] = self._on_message  # the answers to drain(), sleep(), wake()
        self._dispatcher = Dispatcher(handlers, name="zoo client")

    async def __aenter__(self) -> AsyncZooClient:
        if self._ctx is None:
            self._ctx = zmq.asyncio.Context()
        sock = connect_dealer(self._ctx, self.endpoint, curve=self.curve)
        self._link = Link(Channel(sock), self._on_batch, name="zoo client")
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(self._close)
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)  # runs first on exit: the loops never end on their own
            tg.start_soon(self._link.read_loop)
            tg.start_soon(self._link.write_loop)
            tg.start_soon(self._watch)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: object) -> bool | None:
        stack, self._stack = self._stack, None
        return await stack.__aexit__(*exc_info) if stack is not None else None

    def _close(self) -> None:
        for send in self._streams.values():
            send.close()
        self._streams.clear()
        self._link.close()
        if self._own_ctx:
            self._ctx.term()

    # -- the API ----------------------------------------------------------------------------------

    async def generate(
        self, prompt: str | None = None, *, stream: bool = False, request_id: str | None = None, **options: Any
    ) -> Completion | GenerationStream:
        """Send one request. stream=False: the whole Completion; stream=True: a GenerationStream
        (refusals raise here, before it is returned). Raises ZooError subclasses. ``options``: the request's
        keywords, client/request_build.py's ``build_request`` (``messages``, ``max_tokens``, ``temperature``, …,
        ``cache_salt``, ``continue_final_message``, ``priority``); an unknown one is a TypeError."""
        request_id = request_id or uuid.uuid4().hex
        options["model"] = options.get("model") or self.model
        msg = build_request(request_id, prompt, **options)
        max_tokens = msg.sampling.max_tokens
        # every chunk of the request fits: the reader never waits on a slow consumer
        bound = max_tokens + 2 if isinstance(max_tokens, int) and 0 < max_tokens < 1 << 20 else 2
        for num_retries in itertools.count():
            receive = self._open(request_id, bound)
            try:
                await self._send(msg)
                self._sent[request_id] = _Sent(msg, self._num_pings)  # pings queued from now on come after it
                first = await self._next(request_id, receive)
                break
            except BaseException as error:
                self._forget(request_id)
                receive.close()
                if not isinstance(error, ZooError) or not retried(error.code) or num_retries >= self.max_retries:
                    raise
                await anyio.sleep(retry_delay_s(num_retries, error.retry_after_s))  # nothing came: sent again
        result = GenerationStream(self, request_id, receive, first)
        return result if stream else await result.collect()

    async def embed(
        self,
        inputs: str | list[int] | list[str | list[int]],
        *,
        truncate_prompt_tokens: int | None = None,
        model: str | None = None,
        traffic_class: str = "default",
    ) -> list[list[float]]:
        """Each input's embedding (a text or token ids; engine/embeddings.py: the normalised final hidden state at its
        last token), in order: one request per input, EMBED_WAVE of them in flight at a time (a node's admission queue
        holds 256). Raises ZooError subclasses (the first refusal; the others are cancelled)."""
        one = isinstance(inputs, str) or (bool(inputs) and all(isinstance(t, int) for t in inputs))
        items: list[Any] = [inputs] if one else list(inputs)
        vectors: list[list[float]] = [[] for _ in items]
        refusals: list[ZooError] = []

        async def embed_one(i: int, item: str | list[int]) -> None:
            prompt, token_ids = (item, None) if isinstance(item, str) else (None, list(item))
            try:
                done = await self.generate(
                    prompt, prompt_token_ids=token_ids, max_tokens=1, temperature=0.0, embed=True, model=model,
                    truncate_prompt_tokens=truncate_prompt_tokens, traffic_class=traffic_class,
                )  # fmt: skip
            except ZooError as error:
                refusals.append(error)
                tg.cancel_scope.cancel()
                return
            vectors[i] = done.embedding or []

        for start in range(0, len(items), EMBED_WAVE):
            async with anyio.create_task_group() as tg:
                for i in range(start, min(start + EMBED_WAVE, len(items))):
                    tg.start_soon(embed_one, i, items[i])
            if refusals:
                raise refusals[0]
        return vectors

    async def rerank(self, query: str, documents: list[str], *, top_n: int = 0, **embed) -> list[tuple[int, float]]:
        """``documents`` by relevance to ``query``, the most relevant first: (its index, its score), at most ``top_n``
        of them (0: all). A score is the cosine similarity of the two texts' embeddings (engine/embeddings.py), as
        the gateway's /v1/rerank scores them; ``embed``: ``embed``'s options. ValueError: no documents, top_n < 0."""
        if not documents or top_n < 0:
            raise ValueError("rerank needs at least one document and top_n >= 0")
        query_vector, *vectors = await self.embed([query, *documents], **embed)
        scores = [(i, cosine(query_vector, vector)) for i, vector in enumerate(vectors)]
        ranked = sorted(scores, key=lambda item: -item[1])
        return ranked[:top_n] if top_n else ranked

    async def score(self, text_1: str | list[str], text_2: str | list[str], **embed) -> list[float]:
        """Each pair's score, as the gateway's /v1/score pairs and scores them: a text against each of ``text_2``
        (1:N), or the two lists pairwise (N:N); a score is the two texts' embeddings' cosine similarity. ValueError
        when the lengths pair neither way or a side is empty; ``embed``: ``embed``'s options."""
        first = [text_1] if isinstance(text_1, str) else list(text_1)
        second = [text_2] if isinstance(text_2, str) else list(text_2)
        pairs = score_pairs(len(first), len(second))  # ValueError before anything is sent
        vectors = await self.embed([*first, *second], **embed)
        return [cosine(vectors[i], vectors[j]) for i, j in pairs]

    async def ping(self) -> float:
        """Round trip to the control plane, in seconds."""
        request_id = uuid.uuid4().hex
        receive = self._open(request_id, 1)
        start_ns = time.monotonic_ns()
        try:
            await self._send(Ping(request_id=request_id))
            with anyio.fail_after(self.timeout_s):
                await receive.receive()
        except TimeoutError:
            raise ZooTimeoutError(f"no Pong within {self.timeout_s} s", request_id=request_id) from None
        finally:
            self._forget(request_id)
            receive.close()
        return (time.monotonic_ns() - start_ns) / 1e9

    async def cancel(self, request_id: str) -> None:
        self._cancel(request_id)
        self._forget(request_id)

    async def drain(self, node_id: str, *, resume: bool = False) -> int:
        """Drain ``node_id`` (`zoo drain`): the control plane routes nothing new to it, its requests finish there
        (or resume elsewhere when it leaves); the node keeps running. With ``resume`` (`zoo drain --resume`), a
        drained node is routed to again. Returns its requests in flight then. ZooInvalidRequestError: no such
        node, or (resume) one whose agent drains to stop."""
        reason = "zoo drain --resume" if resume else "zoo drain"
        answer = await self._ask(lambda rid: NodeDrain(request_id=rid, node_id=node_id, reason=reason, resume=resume))
        return answer.num_inflight

    async def sleep(self, node_id: str, *, level: int = 1, mode: str = "wait") -> SleepControl:
        """Put ``node_id`` to sleep (vLLM's sleep mode, a control plane with --enable-sleep-mode: POST /sleep's
        rules): level 1 frees its KV cache, 2 its weights too; mode "wait" lets its requests finish first, "abort"
        resumes them on other nodes. The node's answer (``ok``, ``detail``, ``sleep_level``, ``freed_bytes``; a
        "wait" sleep that waits longer than the control plane's answers not ok, and sleeps later).
        ZooInvalidRequestError: sleep mode off, no such node, a level or mode not taken."""
        sleep = {"action": "sleep", "node_id": node_id, "level": level, "mode": mode}
        return await self._ask(lambda rid: SleepControl(request_id=rid, **sleep))

    async def wake(self, node_id: str, *, tags: tuple[str, ...] = ()) -> SleepControl:
        """Wake ``node_id`` (POST /wake_up's rules; ``tags``: "weights", "kv_cache", every one when none); the
        node's answer. A node woken whole is routed to again."""
        wake = {"action": "wake_up", "node_id": node_id, "tags": [*tags]}
        return await self._ask(lambda rid: SleepControl(request_id=rid, **wake))

    async def _ask(self, make) -> Any:
        """Send ``make(request_id)`` and wait for its one answer (``timeout_s``); an ErrorReply raised as ZooError."""
        request_id = uuid.uuid4().hex
        receive = self._open(request_id, 1)
        try:
            await self._send(make(request_id))
            with anyio.fail_after(self.timeout_s):
                answer = await receive.receive()
        except TimeoutError:
            raise ZooTimeoutError(f"no answer within {self.timeout_s} s", request_id=request_id) from None
        finally:
            self._forget(request_id)
            receive.close()
        if isinstance(answer, ErrorReply):
            raise error_from_reply(answer)
        return answer

    # -- plumbing ------------------------------------------------------------------------------------

    def _open(self, request_id: str, bound: int) -> MemoryObjectReceiveStream:
        if self._link is None:
            raise RuntimeError("use the client as `async with AsyncZooClient(...) as client`")
        if request_id in self._streams:
            raise ValueError(f"request id {request_id!r} is in use")
        send, receive = anyio.create_memory_object_stream[Any](bound)
        self._streams[request_id] = send
        return receive

    def _forget(self, request_id: str) -> None:
        self._sent.pop(request_id, None)
        send = self._streams.pop(request_id, None)
        if send is not None:
            send.close()

    async def _send(self, msg) -> None:
        with anyio.fail_after(self.timeout_s):
            await self._link.send(msg)

    def _cancel(self, request_id: str) -> None:
        if self._link is not None:
            with contextlib.suppress(MailboxFull):
                self._link.send_nowait(CancelRequest(request_id=request_id))

    async def _next(self, request_id: str, receive: MemoryObjectReceiveStream) -> TokenChunk:
        try:
            with anyio.fail_after(self.timeout_s):
                item = await receive.receive()
        except TimeoutError:
            self._cancel(request_id)
            self._forget(request_id)
            raise ZooTimeoutError(f"no answer within {self.timeout_s} s", request_id=request_id) from None
        except anyio.EndOfStream:
            raise ZooError("the client was closed", request_id=request_id) from None
        if isinstance(item, ZooError):
            self._forget(request_id)
            raise item
        if isinstance(item, ErrorReply):
            self._forget(request_id)
            raise error_from_reply(item)
        if item.finished:
            self._forget(request_id)
        return item

    def _on_batch(self, batch: list[Received]) -> None:
        self._last_recv_s = time.monotonic()
        self._num_unanswered = 0
        for received in batch:
            self._dispatcher.dispatch(received)

    def _on_message(self, incoming: Incoming) -> None:
        msg = incoming.msg
        sent = self._sent.get(msg.request_id)
        if sent is not None:
            if isinstance(msg, ErrorReply) or msg.finished:
                del self._sent[msg.request_id]
            else:
                sent.num_tokens += len(msg.token_ids)
        self._deliver(msg.request_id, msg)

    def _deliver(self, request_id: str, item: TokenChunk | ErrorReply | Pong | ZooError) -> None:
        send = self._streams.get(request_id)
        if send is None:
            return  # cancelled or timed out here already
        try:
            send.send_nowait(item)
        except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._forget(request_id)

    # -- the watchdog: is the control plane still the one that knows our requests? -------------------

    async def _watch(self) -> None:
        while True:
            await anyio.sleep(self.ping_interval_s)
            request_ids = [rid for rid in self._sent if rid in self._streams]
            now_s = time.monotonic()
            if not request_ids:
                self._last_recv_s, self._num_unanswered = now_s, 0  # nothing in flight: nothing to miss
                continue
            # silent that long, and over that many pings (a stalled event loop here sends none: no false alarm)
            silent_s = now_s - self._last_recv_s
            if silent_s > self.connection_timeout_s and self._num_unanswered * self.ping_interval_s >= silent_s / 2:
                self._lose(request_ids, f"the control plane at {self.endpoint} has not answered for {silent_s:.1f} s")
                self._num_unanswered = 0
                continue
            self._num_pings += 1
            self._num_unanswered += 1
            ping = Ping(request_id=f"{WATCH_PING}{self._num_pings}", request_ids=request_ids)
            with contextlib.suppress(MailboxFull):
                self._link.send_nowait(ping)

    def _on_pong(self, incoming: Incoming) -> None:
        pong: Pong = incoming.msg
        if pong.started_ns:
            self.control_plane_started_ns = pong.started_ns
        if not pong.request_id.startswith(WATCH_PING):
            self._deliver(pong.request_id, pong)  # a user's ping()
            return
        num_ping = int(pong.request_id.removeprefix(WATCH_PING)) if pong.request_id[len(WATCH_PING) :].isdigit() else 0
        # only requests sent before that ping was: one sent after it may not have reached the control plane
        unknown = [r for r in pong.unknown_request_ids if r in self._sent and self._sent[r].num_ping < num_ping]
        for request_id in list(unknown):
            again = self._sent[request_id]
            if again.num_tokens or again.num_resubmits >= MAX_RESUBMITS:
                continue  # its tokens are gone with the old control plane
            try:
                self._link.send_nowait(again.msg)
            except MailboxFull:
                continue
            again.num_resubmits += 1
            again.num_ping = self._num_pings
            unknown.remove(request_id)
        if unknown:
            self._lose(unknown, f"the control plane at {self.endpoint} no longer knows the request (it restarted)")

    def _lose(self, request_ids: list[str], why: str) -> None:
        for request_id in request_ids:
            sent = self._sent.pop(request_id, None)
            if sent is None:
                continue
            tokens = f" after {sent.num_tokens} tokens" if sent.num_tokens else ""
            self._deliver(request_id, ZooConnectionLostError(f"{why}{tokens}", request_id=request_id))

    @property
    def rejected(self) -> dict[ErrorCode, int]:
        return self._dispatcher.rejected


# --------------------------------------------------------------------------- blocking client


class ZooClient:
    """The blocking twin of AsyncZooClient: an event loop in a helper thread (anyio's blocking portal)."""

    def __init__(
        self,
        endpoint: str = DEFAULT_CLIENT_ENDPOINT,
        *,
        timeout_s: float = 60.0,
        model: str | None = None,
        curve: CurveClient | None = None,
        **watchdog: float,
    ) -> None:
        """``watchdog``: ``ping_interval_s`` / ``connection_timeout_s`` (and ``max_retries``), as AsyncZooClient's."""
        self._stack = contextlib.ExitStack()
        try:
            self._portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())
            client = AsyncZooClient(endpoint, timeout_s=timeout_s, model=model, curve=curve, **watchdog)
            self._client: AsyncZooClient = self._stack.enter_context(self._portal.wrap_async_context_manager(client))
        except BaseException:
            self._stack.close()
            raise

    def generate(
        self, prompt: str | None = None, *, stream: bool = False, **kwargs
    ) -> Completion | Iterator[TokenChunk]:
        """As AsyncZooClient.generate; stream=True returns an iterator whose ``close()`` cancels."""
        if not stream:
            return self._portal.call(lambda: self._client.generate(prompt, stream=False, **kwargs))
        s: GenerationStream = self._portal.call(lambda: self._client.generate(prompt, stream=True, **kwargs))
        return self._iterate(s)

    def _iterate(self, s: GenerationStream) -> Iterator[TokenChunk]:
        try:
            while True:
                try:
                    yield self._portal.call(s.__anext__)
                except StopAsyncIteration:
                    return
        finally:
            self._portal.call(s.cancel)

    def embed(self, inputs: str | list[int] | list[str | list[int]], **kwargs) -> list[list[float]]:
        """As AsyncZooClient.embed."""
        return self._portal.call(lambda: self._client.embed(inputs, **kwargs))

    def rerank(self, query: str, documents: list[str], **kwargs) -> list[tuple[int, float]]:
        """As AsyncZooClient.rerank."""
        return self._portal.call(lambda: self._client.rerank(query, documents, **kwargs))

    def score(self, text_1: str | list[str], text_2: str | list[str], **kwargs) -> list[float]:
        """As AsyncZooClient.score."""
        return self._portal.call(lambda: self._client.score(text_1, text_2, **kwargs))

    def ping(self) -> float:
        return self._portal.call(self._client.ping)

    def drain(self, node_id: str, *, resume: bool = False) -> int:
        return self._portal.call(lambda: self._client.drain(node_id, resume=resume))

    def sleep(self, node_id: str, **kwargs) -> SleepControl:
        """As AsyncZooClient.sleep."""
        return self._portal.call(lambda: self._client.sleep(node_id, **kwargs))

    def wake(self, node_id: str, **kwargs) -> SleepControl:
        """As AsyncZooClient.wake."""
        return self._portal.call(lambda: self._client.wake(node_id, **kwargs))

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> ZooClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
