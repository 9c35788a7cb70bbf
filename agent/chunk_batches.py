"""An engine pass's TokenChunks sent as one message (TokenChunks) rather than one message each.

A decode step of N requests makes N TokenChunks. Sent one by one, each costs a ZeroMQ message on both sides: here a
send from the agent's event loop (which shares the GIL with the engine thread), and at the control plane a receive, an
envelope decode and a dispatch, per token. ``wire_messages`` groups the consecutive TokenChunks of one pass's outbox
batch (at most ``MAX_CHUNKS``, in their order; other messages keep their place between them, so a LoadReport still
follows the chunks before it) into TokenChunks; a lone chunk goes as it is. Chunks that may be large (a prompt's
embedding or prompt logprobs, its token ids) go alone, so a batch stays far under the payload bound. Only when the
control plane's Welcome says it reads them (``token_chunk_batches``): an older control plane gets TokenChunk messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from transport.messages import MAX_TOKEN_CHUNKS, TokenChunk, TokenChunks

# chunks in one TokenChunks, the control plane's bound (a step's batch is usually smaller)
MAX_CHUNKS = MAX_TOKEN_CHUNKS


def batchable(msg: object) -> bool:
    """A TokenChunk without the fields that can be large."""
    return (
        msg.__class__ is TokenChunk
        and msg.embedding is None
        and msg.prompt_logprobs is None
        and msg.prompt_token_ids is None
    )


def wire_messages(batch: Iterable[object], enabled: bool = True) -> Iterator[object]:
    """``batch``'s messages in order, consecutive batchable TokenChunks grouped (``enabled``: else as they are)."""
    if not enabled:
        yield from batch
        return
    chunks: list[TokenChunk] = []
    for msg in batch:
        if batchable(msg):
            chunks.append(msg)
            if len(chunks) == MAX_CHUNKS:
                yield TokenChunks(chunks=chunks)
                chunks = []
            continue
        if chunks:
            yield chunks[0] if len(chunks) == 1 else TokenChunks(chunks=chunks)
            chunks = []
        yield msg
    if chunks:
        yield chunks[0] if len(chunks) == 1 else TokenChunks(chunks=chunks)
