"""A beam search's run through the fleet (gateway/beam_search.py holds the rule): each step, one one-token request
per live beam, at once, its prompt the beam's tokens; the first step's is the request's own prompt (text, token ids or
a chat the intake renders), whose tokens come back with it. The answer is an ordinary reply of ``n`` choices, best
first, with the usage of the prompt once and every choice's tokens. The client's disconnect stops the search and its
requests in flight."""

from __future__ import annotations

import dataclasses
import time

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response

from controlplane.frontend import FrontendError, invalid_param
from controlplane.gateway.beam_search import BeamSearch, BeamSpec, step_candidates, step_sampling
from controlplane.gateway.openai_reply import OpenAIReply
from controlplane.gateway.reply_stream import close_stream, next_chunk, until_disconnect
from controlplane.gateway.request_ids import RequestIds
from transport.messages import ErrorCode, TokenChunk


async def beam_search_reply(
    gateway, request: Request, args, spec: BeamSpec, ids: RequestIds, arrival_ns: int, *, chat: bool, role: str
) -> Response:
    """The whole reply of a request with ``use_beam_search`` (``gateway``: the app's Gateway; ``args``: its
    GenerateArgs, checked by beam_search.check_beam_request)."""
    tokenizer = gateway.token_text.tokenizer
    if tokenizer is None:
        raise invalid_param("use_beam_search", "needs the model's tokenizer at the gateway, to read the beams' text")
    search = await until_disconnect(request, _search(gateway, request, args, spec, ids, arrival_ns, tokenizer))
    beams = search.best()
    choice_ids = [f"{ids.engine}-{i}" for i in range(len(beams))]
    reply = OpenAIReply(
        chat=chat,
        request_id=ids.reply,
        model=gateway.model_name(args.model),
        created=int(time.time()),
        include_usage=False,
        choice_ids=choice_ids,
        choices_per_prompt=len(choice_ids),  # one prompt: counted once
        token_text=gateway.token_text,
        role=role,
    )
    for choice_id, beam in zip(choice_ids, beams, strict=True):
        tokens = search.output_tokens(beam)
        reply.add(
            TokenChunk(
                request_id=choice_id,
                token_ids=tokens,
                text=tokenizer.decode(tokens),
                finished=True,
                finish_reason=beam.finish_reason,
                stop_reason=beam.stop_reason,
                num_prompt_tokens=len(search.prompt),
                num_output_tokens=len(beam.tokens) - len(search.prompt),
            )
        )
    body = msgspec.json.encode(reply.full_object())
    return Response(body, headers={"x-request-id": ids.header}, media_type="application/json")


async def _search(gateway, request: Request, args, spec: BeamSpec, ids: RequestIds, arrival_ns: int, tokenizer):
    sampling = step_sampling(args.sampling, spec)
    first = dataclasses.replace(args, sampling=sampling, n=1, return_token_ids=False)
    more = {"prompt": args.prompt, "prompt_token_ids": args.prompt_token_ids, "return_prompt_token_ids": True}
    chunk = await _one_token(gateway.start(request, f"{ids.engine}-beam-0", first, arrival_ns, **more))
    if chunk.prompt_token_ids is None:
        raise FrontendError(ErrorCode.INTERNAL, "a beam search's first step came back without its prompt's tokens")
    context = getattr(gateway.frontend, "model_max_len", lambda model: None)(args.model)
    max_tokens = args.sampling.max_tokens
    if context is not None:  # a beam stops at the context's end, as a generation does
        max_tokens = min(max_tokens, context - len(chunk.prompt_token_ids))
    search = BeamSearch(
        chunk.prompt_token_ids,
        spec,
        max_tokens,
        tokenizer.eos_token_id,
        ignore_eos=args.sampling.ignore_eos,
        include_stop_str_in_output=args.sampling.include_stop_str_in_output,
    )
    search.advance([step_candidates(chunk.logprobs)])
    step_args = dataclasses.replace(first, messages=None, chat=None, tool_plan=None, prompt=None)
    while not search.done:
        candidates: list[dict[int, float]] = [{} for _ in search.live]
        async with anyio.create_task_group() as tg:
            for i, beam in enumerate(search.live):
                request_id = f"{ids.engine}-beam-{search.num_steps}-{i}"
                chunks = gateway.start(
                    request, request_id, step_args, arrival_ns, prompt=None, prompt_token_ids=beam.tokens
                )
                tg.start_soon(_extend, chunks, candidates, i)
        search.advance(candidates)
    return search


async def _extend(chunks, candidates: list[dict[int, float]], i: int) -> None:
    """Live beam i's step: its next tokens and their log-probabilities, into ``candidates[i]``."""
    candidates[i] = step_candidates((await _one_token(chunks)).logprobs)


async def _one_token(chunks) -> TokenChunk:
    """A one-token request's chunk that carries its token (the first; the stream closed after its end)."""
    try:
        while True:
            chunk = await next_chunk(chunks)
            if chunk.token_ids or chunk.finished:
                return chunk
    finally:
        await close_stream(chunks)
