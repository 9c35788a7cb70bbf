"""Long prompts tokenized off the control plane's event loop, so one long prompt does not stall every other request.

The control plane tokenizes (controlplane/request_intake.py ``tokenize``) on its event loop, the loop that also routes
every request and relays every token. A long prompt holds it: SmolLM2's tokenizer stalled the loop 29 ms for 90 kB of
text and 452 ms for 900 kB; in a worker thread through its single-text ``encode``, which holds Python's GIL, 30 and
354 ms; through its batch path, which releases it, 3.8 and 8.8 ms (scripts/tokenize_loop_lag.py,
bench/results/2026-12-06-tokenize-loop-lag.json). An in-process (HTTP)
request whose prompt text (a completion's prompt, or a chat's message contents) has at least ``min_chars``
characters is therefore tokenized first, in a worker thread, through the tokenizer's ``encode_unlocked`` (its batch
path, which releases the GIL: backends/checkpoint/tokenizer.py; a tokenizer without it is called as it is), and
submitted with its ids; the loop runs meanwhile. The ids, the PromptError, the truncation are exactly ``tokenize``'s;
the choices of one request (OpenAI's ``n``) share one tokenization. A shorter prompt is tokenized on the loop, as
before (a thread hop costs more than it saves).

A ZeroMQ client's long prompt goes the same way (controlplane/client_requests.py: its request waits "pending" for its
tokens, and its cancels and pings are answered meanwhile).

Both paths share one ``TokenizeWorkers``: at most ``OFFLOAD_THREADS`` prompts are tokenized at once, the rest wait
their turn. Unbounded, each HTTP request took a thread of anyio's default pool (40), and the tokenizer's threads took
the cores from the loop: 16 prompts of 900 kB at once stalled it 435 ms; two at a time, 26 ms, and all 16 were
tokenized sooner (3.85 → 3.18 s; scripts/tokenize_loop_lag.py --concurrent 16,
bench/results/2026-12-06-tokenize-concurrent-lag.json).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable

import anyio

from backends.grammar import check as check_grammar
from controlplane.request_intake import tokenize
from controlplane.request_table import local_stream
from engine.prompt import PromptError
from engine.structured_output import StructuredOutputError
from transport.messages import ClientGenerate, ErrorReply, TokenChunk

Tokenized = list[int] | PromptError
OFFLOAD_THREADS = 2  # prompts tokenized at once, in worker threads (this project's hosts: 2 cores)


class TokenizeWorkers:
    """The worker threads that tokenize long prompts, shared by the HTTP path (``pretokenize``) and the ZeroMQ
    clients' (client_requests.py): at most ``threads`` at once. ``num_waiting``: prompts waiting for their turn or being
    tokenized (a request's, counted in flight: /health); ``num_tokenized_total``: prompts tokenized here."""

    def __init__(self, tokenizer, threads: int = OFFLOAD_THREADS) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.tokenizer, self.threads = tokenizer, threads
        self.num_waiting = 0
        self.num_tokenized_total = 0
        self._limiter: anyio.CapacityLimiter | None = None  # made on first use: in the event loop

    async def tokenize(self, msg: ClientGenerate, wanted: Callable[[], bool] | None = None) -> Tokenized | None:
        """``msg``'s ids (or PromptError) from a worker thread, once its turn comes; None, untokenized, when ``wanted``
        says no at its turn (a request cancelled while it waited)."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.threads)
        self.num_waiting += 1
        try:
            async with self._limiter:
                if wanted is not None and not wanted():
                    return None
                ids = await anyio.to_thread.run_sync(_prepare, self.tokenizer, msg)
                self.num_tokenized_total += 1
                return ids
        finally:
            self.num_waiting -= 1

    def summary(self) -> dict:
        """The control plane's ``stats()["tokenizing"]``: prompts waiting (or tokenizing) now, tokenized in all."""
        return {"waiting": self.num_waiting, "tokenized_total": self.num_tokenized_total, "threads": self.threads}


def prompt_chars(msg: ClientGenerate) -> int:
    """The characters of a request's prompt text (its token ids count none: they need no tokenizing)."""
    if msg.prompt is not None:
        return len(msg.prompt)
    return sum(len(m.content) for m in msg.messages or ())


def off_the_loop(msg: ClientGenerate, min_chars: int) -> bool:
    """A ZeroMQ client's request is prepared in a worker thread (controlplane/client_requests.py): its prompt is long,
    or it has a constraint to compile (a 34 kB JSON schema: ~20 ms of llguidance; the HTTP gateway compiles its
    requests' in threads already, gateway/structured_fields.py)."""
    return is_long(msg, min_chars) or msg.sampling.structured_outputs is not None


def is_long(msg: ClientGenerate, min_chars: int) -> bool:
    """Its prompt text is tokenized off the loop: at least ``min_chars`` characters (0: none is)."""
    return min_chars > 0 and prompt_chars(msg) >= min_chars


def _prepare(tokenizer, msg: ClientGenerate) -> Tokenized:
    """In a worker thread: ``msg``'s ids (``tokenize_unlocked``), and its constraint compiled, so the intake's check on
    the loop finds it among those that compiled (backends/grammar.py remembers them); one that does not compile is
    left to that check, which refuses it naming why."""
    ids = tokenize_unlocked(tokenizer, msg)
    if msg.sampling.structured_outputs is not None and not isinstance(ids, PromptError):
        with contextlib.suppress(StructuredOutputError):
            check_grammar(msg.sampling.structured_outputs)
    return ids


def tokenize_unlocked(tokenizer, msg: ClientGenerate) -> Tokenized:
    """``tokenize`` with the tokenizer's GIL-releasing encode (for a worker thread); its PromptError returned."""
    try:
        return tokenize(tokenizer, msg, encode=getattr(tokenizer, "encode_unlocked", None))
    except PromptError as error:
        return error


async def pretokenize(workers: TokenizeWorkers, msgs: list[ClientGenerate], min_chars: int) -> dict[str, Tokenized]:
    """The ids (or PromptError) of each of ``msgs`` whose prompt text has at least ``min_chars`` characters (0: none),
    by request id, each tokenized by ``workers``; messages sharing their prompt (one request's choices) share
    one tokenization."""
    out: dict[str, Tokenized] = {}
    done: dict[tuple, Tokenized] = {}
    for msg in msgs:
        if not is_long(msg, min_chars):
            continue
        key = (id(msg.prompt), id(msg.messages), id(msg.tools), id(msg.chat), msg.sampling.truncate_prompt_tokens)
        if key not in done:
            done[key] = await workers.tokenize(msg)
        out[msg.request_id] = done[key]
    return out


def request_stream(
    msgs: list[ClientGenerate], offload: tuple[TokenizeWorkers, int] | tuple[TokenizeWorkers, int, dict], *rest
) -> AsyncIterator[TokenChunk]:
    """``msgs``' stream: ``offloaded_stream(msgs, offload, *rest)`` when a prompt is long (``offload``'s
    ``min_chars``), else ``local_stream(msgs, *rest)`` (one generator less); ``rest``: their submit, cancel,
    open_streams and arrival_ns."""
    return (
        offloaded_stream(msgs, offload, *rest)
        if any(is_long(m, offload[1]) for m in msgs)
        else local_stream(msgs, *rest)
    )


async def offloaded_stream(
    msgs: list[ClientGenerate],
    offload: tuple[TokenizeWorkers, int],
    submit: Callable[..., ErrorReply | None],
    cancel: Callable[[str], bool],
    open_streams: set[str] | None = None,
    arrival_ns: int | None = None,
) -> AsyncIterator[TokenChunk]:
    """``local_stream`` (controlplane/request_table.py) of ``msgs``, their long prompts tokenized first off the loop
    (``offload``: the workers and ``min_chars``, and optionally a dict that keeps the tokens for the request's next
    try: one held for a node, controlplane/cold_start.py); ``submit(msg, consumer, arrival_ns, token_ids)``. The
    request's arrival is taken before its tokenization, so its queue wait counts it."""
    arrival_ns = time.monotonic_ns() if arrival_ns is None else arrival_ns
    workers, min_chars, *kept = offload
    tokenized = kept[0] if kept and kept[0] else await pretokenize(workers, msgs, min_chars)
    if kept:
        kept[0].update(tokenized)

    def submit_tokenized(msg: ClientGenerate, consumer, arrived_ns: int) -> ErrorReply | None:
        return submit(msg, consumer, arrived_ns, tokenized.get(msg.request_id))

    async for chunk in local_stream(msgs, submit_tokenized, cancel, open_streams, arrival_ns):
        yield chunk
