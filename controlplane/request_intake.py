"""Request intake: a client's ClientGenerate → its tokens and the node to serve it, or a refusal.

    ClientGenerate ─► request id ─► model ─► tokens (chat template for ``messages``, engine/prompt.py checks)
                   ─► live nodes of its cell ─► fits the longest context? ─► policy.choose ─► admission.check
                   ─► Placement(node_id, route, token_ids)
                      (the chosen node's queue full: the policy's next-best node without it, MAX_CHOICES at most)

The sampling parameters arrive validated (``SamplingParams`` validates itself when built or decoded).
Any step may refuse with an ErrorReply (INVALID_REQUEST, UNKNOWN_MODEL, NO_NODE, PROMPT_TOO_LONG,
OVERLOADED) whose ``param`` names the request field at fault, if any; the first refusal wins.
Synchronous and without I/O: the control-plane actor and the fleet simulator (sim/des.py) both place
requests here, then send the request and record the placement (``policy.on_routed``,
``registry.on_routed``) once it is sent.

A request whose node was lost mid-stream is placed again the same way (``resumed_request``: the same id,
its prompt extended by the tokens already streamed, ``max_tokens`` reduced by their number); the node
it was on is no longer in the registry's snapshot, so it cannot be chosen again.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass

import msgspec

from controlplane.lora_table import LoraTable
from controlplane.router.block_hashes import prompt_block_hashes
from controlplane.router.lora_affinity import prefer_resident
from controlplane.router.policy import ClusterSnapshot, RouteRequest
from controlplane.router.router_config import RouterConfig
from engine.llm_engine import EngineTokenizer
from engine.lora import LoraRequest
from engine.prompt import PromptError, PromptTooLongError, check_prompt_length, check_token_ids
from transport.messages import ClientGenerate, ErrorCode, ErrorReply

MAX_CHOICES = 4  # nodes tried per request when admission refuses the chosen node's queue (bounded decision)


@dataclass(slots=True, frozen=True)
class Placement:
    """An admitted request: the node the policy chose, what the policy was asked, the prompt's tokens."""

    node_id: str
    route: RouteRequest
    token_ids: list[int]
    lora: LoraRequest | None = None  # the adapter the node applies


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
    exclude: Container[str] = (),
    loras: LoraTable | None = None,
) -> Placement | ErrorReply:
    """Validate, tokenize, choose a node and admit; ``model_names``: the served models, the default first;
    ``inflight``: request ids in flight (a reused one is refused); ``exclude``: node ids the policy must
    not choose (a resumed request's last node, when it is still registered); ``loras``: the fleet's LoRA
    adapters (a ``model`` naming one runs on its parent, on nodes that serve adapters)."""
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
    lora_entry = loras.get(msg.model) if loras is not None else None
    model = (msg.model or model_names[0]) if lora_entry is None else (lora_entry.parent or model_names[0])
    if model not in model_names:
        served = f"the model {model!r} is not served (served: {model_names})"
        return refuse(ErrorCode.UNKNOWN_MODEL, served, param="model")
    try:
        token_ids = tokenize(tokenizer, msg)
    except PromptError as e:
        return refuse(ErrorCode.INVALID_REQUEST, str(e), param=e.param)
    cell = router.cell_for(msg.traffic_class)
    snapshot: ClusterSnapshot = registry.snapshot(model=model, cell=cell)
    if lora_entry is not None:
        snapshot = ClusterSnapshot(snapshot.now_s, tuple(v for v in snapshot.nodes if v.max_loras > 0))
        if not snapshot.nodes:
            message = f"no live node serves LoRA adapters of {model!r} in cell {cell!r}"
            return refuse(ErrorCode.NO_NODE, message, retry_after_s=1.0)
    admission_snapshot = snapshot
    if exclude:
        snapshot = ClusterSnapshot(snapshot.now_s, tuple(v for v in snapshot.nodes if v.node_id not in exclude))
    if lora_entry is not None:
        snapshot = prefer_resident(snapshot, lora_entry.lora.name)  # router/lora_affinity.py
    if not snapshot.nodes:
        return refuse(ErrorCode.NO_NODE, f"no live node serves {model!r} in cell {cell!r}", retry_after_s=1.0)
    num_prompt_tokens = len(token_ids)
    try:
        check_prompt_length(num_prompt_tokens, max(v.max_model_len for v in snapshot.nodes))
    except PromptTooLongError as e:
        return refuse(ErrorCode.PROMPT_TOO_LONG, f"{e} on the longest context served", param=e.param)
    lora_id = None if lora_entry is None else lora_entry.lora.lora_id
    route = RouteRequest(
        request_id=rid,
        model=model,
        num_prompt_tokens=num_prompt_tokens,
        max_tokens=msg.sampling.max_tokens,
        block_hashes=prompt_block_hashes(token_ids, snapshot.nodes[0].block_size, lora_id),
        traffic_class=msg.traffic_class,
        lora_name=None if lora_entry is None else lora_entry.lora.name,
    )
    for _ in range(MAX_CHOICES):
        node_id = policy.choose(route, snapshot)
        if node_id is None:
            return refuse(ErrorCode.NO_NODE, "no node can take this request now", retry_after_s=1.0)
        refusal = admission.check(admission_snapshot, node_id)
        if refusal is None:
            return Placement(node_id, route, token_ids, None if lora_entry is None else lora_entry.lora)
        if getattr(refusal, "node_id", None) != node_id:  # the whole cluster is full: no other node helps
            break
        # that node's queue is full: the policy's next-best node, without it
        snapshot = ClusterSnapshot(snapshot.now_s, tuple(v for v in snapshot.nodes if v.node_id != node_id))
        if not snapshot.nodes:
            break
    return refuse(
        ErrorCode.OVERLOADED, str(getattr(refusal, "message", refusal)), getattr(refusal, "retry_after_s", 1.0)
    )


def resumed_request(
    msg: ClientGenerate, model: str, prompt_token_ids: Sequence[int], output_token_ids: Sequence[int]
) -> ClientGenerate:
    """What to place when ``msg`` (served as ``model``, tokenized to ``prompt_token_ids``) resumes on another
    node after ``output_token_ids`` were streamed to its client: the prompt extended by them (re-prefilled
    there; a prefix cache holding the prompt helps), ``max_tokens`` reduced by their number (at least one
    must remain), the same id, model, traffic class and other sampling parameters. Greedy decoding then
    continues exactly as it would have on the lost node."""
    remaining = msg.sampling.max_tokens - len(output_token_ids)
    if remaining < 1:
        raise ValueError(f"request {msg.request_id!r} has no token left to generate")
    return ClientGenerate(
        request_id=msg.request_id,
        model=model,
        prompt_token_ids=[*prompt_token_ids, *output_token_ids],
        sampling=msgspec.structs.replace(msg.sampling, max_tokens=remaining),
        traffic_class=msg.traffic_class,
    )


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
