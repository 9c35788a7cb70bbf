"""local_stream with several choices (OpenAI's n): one stream for all, done when every choice has finished, and
any refusal or failure ends them all (the others cancelled on their nodes)."""

from __future__ import annotations

import pytest

from controlplane.frontend import FrontendError, choice_request_ids, choice_seed
from controlplane.request_table import local_stream
from engine.sampling_params import SamplingParams
from transport.messages import ClientGenerate, ErrorCode, ErrorReply, TokenChunk

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _msgs(n: int) -> list[ClientGenerate]:
    return [
        ClientGenerate(request_id=rid, prompt="x", sampling=SamplingParams(max_tokens=2))
        for rid in choice_request_ids("r", n)
    ]


def _chunk(rid: str, finished: bool) -> TokenChunk:
    return TokenChunk(request_id=rid, token_ids=[5], text="z", finished=finished)


class _Fleet:
    """Each submitted choice delivers its scripted replies at once (the stream buffers them); ``refuse``: ids
    refused at submit."""

    def __init__(self, script: dict[str, list], refuse: frozenset[str] = frozenset()) -> None:
        self.script = script
        self.refuse = refuse
        self.arrivals: list[int] = []
        self.cancelled: list[str] = []

    def submit(self, msg, consumer, arrival_ns):
        if msg.request_id in self.refuse:
            return ErrorReply(request_id=msg.request_id, code=ErrorCode.OVERLOADED, message="full", retry_after_s=2)
        self.arrivals.append(arrival_ns)
        for item in self.script.get(msg.request_id, []):
            consumer.deliver(item)
        return None

    def cancel(self, request_id: str) -> bool:
        self.cancelled.append(request_id)
        return True


def test_choice_ids_and_seeds():
    assert choice_request_ids("r", 1) == ["r"] and choice_request_ids("r", 3) == ["r-0", "r-1", "r-2"]
    assert [choice_seed(7, i) for i in range(3)] == [7, 8, 9] and choice_seed(None, 2) is None
    assert choice_seed(2**63 - 1, 1) == 0  # stays a valid seed


async def test_every_choice_streams_into_one_iterator_until_all_have_finished():
    fleet = _Fleet({"r-0": [_chunk("r-0", False), _chunk("r-0", True)], "r-1": [_chunk("r-1", True)]})
    open_streams: set[str] = set()
    chunks = [c async for c in local_stream(_msgs(2), fleet.submit, fleet.cancel, open_streams, arrival_ns=42)]
    assert [(c.request_id, c.finished) for c in chunks] == [("r-0", False), ("r-0", True), ("r-1", True)]
    assert fleet.arrivals == [42, 42] and fleet.cancelled == [] and open_streams == set()


async def test_a_refused_choice_cancels_the_ones_already_submitted():
    fleet = _Fleet({}, refuse=frozenset({"r-2"}))
    with pytest.raises(FrontendError) as refused:
        await local_stream(_msgs(3), fleet.submit, fleet.cancel).__anext__()
    assert refused.value.code == ErrorCode.OVERLOADED and refused.value.retry_after_s == 2
    assert fleet.cancelled == ["r-0", "r-1"]


async def test_a_failed_choice_fails_the_request_and_cancels_the_others():
    failure = ErrorReply(request_id="r-1", code=ErrorCode.NODE_FAILED, message="node died")
    fleet = _Fleet({"r-0": [_chunk("r-0", False)], "r-1": [failure]})
    received = []
    with pytest.raises(FrontendError, match="node died"):
        async for chunk in local_stream(_msgs(2), fleet.submit, fleet.cancel):
            received.append(chunk.request_id)
    assert received == ["r-0"] and fleet.cancelled == ["r-0"]
