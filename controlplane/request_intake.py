"""Request intake: a client's ClientGenerate → its tokens and the node to serve it, or a refusal.

    ClientGenerate ─► request id ─► model ─► sampling ─► tokens (chat template for ``messages``)
                   ─► live nodes of its cell ─► fits the longest context? ─► policy.choose ─► admission.check
                   ─► Placement(node_id, route, token_ids)

Any step may refuse with an ErrorReply (INVALID_REQUEST, UNKNOWN_MODEL, NO_NODE, PROMPT_TOO_LONG,
OVERLOADED); the first refusal wins. Synchronous and without I/O: the actor sends the GenerateRequest
and records a placement (``policy.on_routed``, ``registry.on_routed``) only once it is sent.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

from controlplane.engine.llm_engine import EngineTokenizer
from controlplane.engine.sampling_params import SamplingParamsError
from controlplane.router.block_hashes import prompt_block_hashes
from controlplane.router.policy import ClusterSnapshot, RouteRequest
from controlplane.router.router_config import RouterConfig
from controlplane.sampling_wire import sampling_params_from_wire
from transport.messages import ClientGenerate, ErrorCode, ErrorReply

_INVALID_SAMPLING = "invalid sampling parameter "


@dataclass(slots=True, frozen=True)
class Placement:
    """An admitted request: the node the policy chose, what the policy was asked, the prompt's tokens."""

    node_id: str
    route: RouteRequest
    token_ids: list[int]


def place_request(
    msg: ClientGenerate,
    *,
    model_names: list[str],
    inflight: Container[str],
    tokenizer: EngineTokenizer,
    registry,
    policy,
    admission,
    router: RouterConfig,
) -> Placement | ErrorReply:
    """Validate, tokenize, choose a node and admit; ``model_names``: the served models, the default first;
    ``inflight``: request ids in flight (a reused one is refused)."""
    rid = msg.request_id

    def refuse(code: ErrorCode, message: str, retry_after_s: float | None = None) -> ErrorReply:
        return ErrorReply(request_id=rid, code=code, message=message, retry_after_s=retry_after_s)

    if not rid:
        return refuse(ErrorCode.INVALID_REQUEST, "request_id must not be empty")
    if rid in inflight:
        return refuse(ErrorCode.INVALID_REQUEST, f"request id {rid!r} is already in flight")
    if not model_names:
        return refuse(ErrorCode.NO_NODE, "no node is serving", retry_after_s=1.0)
    model = msg.model or model_names[0]
    if model not in model_names:
        return refuse(ErrorCode.UNKNOWN_MODEL, f"the model {model!r} is not served (served: {model_names})")
    try:
        params = sampling_params_from_wire(msg.sampling)
    except SamplingParamsError as e:
        return refuse(ErrorCode.INVALID_REQUEST, f"{_INVALID_SAMPLING}{e}")
    try:
        token_ids = tokenize(tokenizer, msg)
    except ValueError as e:
        return refuse(ErrorCode.INVALID_REQUEST, str(e))
    cell = router.cell_for(msg.traffic_class)
    snapshot: ClusterSnapshot = registry.snapshot(model=model, cell=cell)
    if not snapshot.nodes:
        return refuse(ErrorCode.NO_NODE, f"no live node serves {model!r} in cell {cell!r}", retry_after_s=1.0)
    num_prompt_tokens = len(token_ids)
    longest = max(v.max_model_len for v in snapshot.nodes)
    if num_prompt_tokens >= longest:
        return refuse(
            ErrorCode.PROMPT_TOO_LONG,
            f"the prompt has {num_prompt_tokens} tokens; the longest context served is {longest} tokens "
            "(prompt + output)",
        )
    route = RouteRequest(
        request_id=rid,
        model=model,
        num_prompt_tokens=num_prompt_tokens,
        max_tokens=params.max_tokens,
        block_hashes=prompt_block_hashes(token_ids, snapshot.nodes[0].block_size),
        traffic_class=msg.traffic_class,
    )
    node_id = policy.choose(route, snapshot)
    if node_id is None:
        return refuse(ErrorCode.NO_NODE, "no node can take this request now", retry_after_s=1.0)
    refusal = admission.check(snapshot, node_id)
    if refusal is not None:
        return refuse(
            ErrorCode.OVERLOADED, str(getattr(refusal, "message", refusal)), getattr(refusal, "retry_after_s", 1.0)
        )
    return Placement(node_id, route, token_ids)


def tokenize(tokenizer: EngineTokenizer, msg: ClientGenerate) -> list[int]:
    """The prompt's token ids from exactly one of prompt / messages / prompt_token_ids; ValueError saying
    what is wrong (none or several given, ids out of the vocabulary, empty)."""
    given = [x is not None for x in (msg.prompt, msg.messages, msg.prompt_token_ids)]
    if sum(given) != 1:
        raise ValueError("exactly one of prompt, messages, prompt_token_ids must be given")
    if msg.prompt_token_ids is not None:
        token_ids = msg.prompt_token_ids
        vocab = tokenizer.vocab_size
        bad = [t for t in token_ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt token ids out of range [0, {vocab}): {bad[:5]}")
    elif msg.messages is not None:
        if not msg.messages:
            raise ValueError("messages must not be empty")
        rendered = tokenizer.apply_chat_template([{"role": m.role, "content": m.content} for m in msg.messages])
        token_ids = tokenizer.encode(rendered)
    else:
        token_ids = tokenizer.encode(msg.prompt)
    if not token_ids:
        raise ValueError("the prompt is empty")
    return token_ids


def refused_param(error: ErrorReply) -> str | None:
    """The request field a refusal is about (for an OpenAI error's ``param``), None when it names none."""
    if error.code is ErrorCode.INVALID_REQUEST and error.message.startswith(_INVALID_SAMPLING):
        return error.message.removeprefix(_INVALID_SAMPLING).split(":", 1)[0]
    if error.code is ErrorCode.UNKNOWN_MODEL:
        return "model"
    return None
