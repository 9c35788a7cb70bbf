"""Request intake: a client's ClientGenerate → its tokens and the node to serve it, or a refusal.

    ClientGenerate ─► request id ─► model ─► tokens (chat template for ``messages``, engine/prompt.py checks)
                   ─► live nodes of its cell ─► fits the longest context? ─► policy.choose ─► admission.check
                   ─► Placement(node_id, route, token_ids)

The sampling parameters arrive validated (``SamplingParams`` validates itself when built or decoded).
Any step may refuse with an ErrorReply (INVALID_REQUEST, UNKNOWN_MODEL, NO_NODE, PROMPT_TOO_LONG,
OVERLOADED) whose ``param`` names the request field at fault, if any; the first refusal wins.
Synchronous and without I/O: the control-plane actor and the fleet simulator (sim/des.py) both place
requests here, then send the request and record the placement (``policy.on_routed``,
``registry.on_routed``) once it is sent.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

from controlplane.router.block_hashes import prompt_block_hashes
from controlplane.router.policy import ClusterSnapshot, RouteRequest
from controlplane.router.router_config import RouterConfig
from engine.llm_engine import EngineTokenizer
from engine.prompt import PromptError, PromptTooLongError, check_prompt_length, check_token_ids
from transport.messages import ClientGenerate, ErrorCode, ErrorReply


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

    def refuse(
        code: ErrorCode, message: str, retry_after_s: float | None = None, param: str | None = None
    ) -> ErrorReply:
        return ErrorReply(request_id=rid, code=code, message=message, retry_after_s=retry_after_s, param=param)

    if not rid:
        return refuse(ErrorCode.INVALID_REQUEST, "request_id must not be empty")
    if rid in inflight:
        return refuse(ErrorCode.INVALID_REQUEST, f"request id {rid!r} is already in flight")
    if not model_names:
        return refuse(ErrorCode.NO_NODE, "no node is serving", retry_after_s=1.0)
    model = msg.model or model_names[0]
    if model not in model_names:
        served = f"the model {model!r} is not served (served: {model_names})"
        return refuse(ErrorCode.UNKNOWN_MODEL, served, param="model")
    try:
        token_ids = tokenize(tokenizer, msg)
    except PromptError as e:
        return refuse(ErrorCode.INVALID_REQUEST, str(e), param=e.param)
    cell = router.cell_for(msg.traffic_class)
    snapshot: ClusterSnapshot = registry.snapshot(model=model, cell=cell)
    if not snapshot.nodes:
        return refuse(ErrorCode.NO_NODE, f"no live node serves {model!r} in cell {cell!r}", retry_after_s=1.0)
    num_prompt_tokens = len(token_ids)
    try:
        check_prompt_length(num_prompt_tokens, max(v.max_model_len for v in snapshot.nodes))
    except PromptTooLongError as e:
        return refuse(ErrorCode.PROMPT_TOO_LONG, f"{e} on the longest context served", param=e.param)
    route = RouteRequest(
        request_id=rid,
        model=model,
        num_prompt_tokens=num_prompt_tokens,
        max_tokens=msg.sampling.max_tokens,
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
    """The prompt's token ids from exactly one of prompt / messages / prompt_token_ids; PromptError saying
    what is wrong (none or several given, ids out of the vocabulary, empty) and naming the field."""
    given = [x is not None for x in (msg.prompt, msg.messages, msg.prompt_token_ids)]
    if sum(given) != 1:
        raise PromptError("exactly one of prompt, messages, prompt_token_ids must be given", param=None)
    if msg.prompt_token_ids is not None:
        token_ids, param = msg.prompt_token_ids, "prompt_token_ids"
    elif msg.messages is not None:
        if not msg.messages:
            raise PromptError("messages must not be empty", "messages")
        rendered = tokenizer.apply_chat_template([{"role": m.role, "content": m.content} for m in msg.messages])
        token_ids, param = tokenizer.encode(rendered), "messages"
    else:
        token_ids, param = tokenizer.encode(msg.prompt), "prompt"
    try:
        check_token_ids(token_ids, tokenizer.vocab_size)
    except PromptError as e:
        raise PromptError(str(e), param) from None
    return token_ids
