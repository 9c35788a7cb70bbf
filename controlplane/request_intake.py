"""Request intake: a client's ClientGenerate → its tokens and the node to serve it, or a refusal.

    ClientGenerate ─► request id ─► model ─► tokens (chat template for ``messages``, engine/prompt.py checks)
                   ─► a structured-output constraint compiles (backends/grammar.py)
                   ─► live nodes of its cell ─► fits the longest context? ─► policy.choose ─► admission.check
                   ─► Placement(node_id, route, token_ids)
                      (the chosen node's queue full: the policy's next-best node without it, MAX_CHOICES at most)

The sampling parameters arrive validated (``SamplingParams`` validates itself when built or decoded).
Any step may refuse with an ErrorReply (INVALID_REQUEST, UNKNOWN_MODEL, NO_NODE, PROMPT_TOO_LONG,
OVERLOADED) whose ``param`` names the request field at fault, if any; the first refusal wins. A refusal for want
of capacity (no live node of its pool, or every one's queue full) is told to ``on_unserved`` with the pool, (model,
cell; None: any cell of the model): demand the pool did not serve, which the capacity plan counts
(controlplane/capacity_plan.py).
Synchronous and without I/O: the control-plane actor and the fleet simulator (sim/des.py) both place
requests here, then send the request and record the placement (``policy.on_routed``,
``registry.on_routed``) once it is sent.

A request whose node was lost mid-stream is placed again the same way (``resumed_request``: the same id,
its prompt extended by the tokens already streamed, ``max_tokens`` reduced by their number); the node
it was on is no longer in the registry's snapshot, so it cannot be chosen again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass

import msgspec

from backends.chat_render import render_chat
from backends.grammar import check as check_grammar
from controlplane.admission import queued_requests
from controlplane.cells import DEFAULT_CLASS, REQUEST_PRIORITY_RANGE, engine_priority
from controlplane.lora_table import LoraTable
from controlplane.model_aliases import resolve_model
from controlplane.router.block_hashes import prompt_block_hashes
from controlplane.router.lora_affinity import prefer_resident
from controlplane.router.policy import ClusterSnapshot, RouteRequest
from controlplane.router.prediction_affinity import prefer_speculating
from controlplane.router.router_config import RouterConfig
from controlplane.tenants import RESERVED_SALT_PREFIX, TenantLimiter
from engine import bad_words, thinking_budget
from engine.llm_engine import EngineTokenizer
from engine.lora import LoraRequest
from engine.prefix_key import cache_key
from engine.prompt import (
    PromptError,
    PromptTooLongError,
    check_prompt_length,
    check_sampling_token_ids,
    check_token_ids,
)
from engine.spec import prediction_drafts as predictions
from engine.structured_output import StructuredOutputError
from transport.messages import ClientGenerate, ErrorCode, ErrorReply

MAX_CHOICES = 4  # nodes tried per request when admission refuses the chosen node's queue (bounded decision)


@dataclass(slots=True, frozen=True)
class Placement:
    """An admitted request: the node the policy chose, what the policy was asked, the prompt's tokens, and
    what its traffic class gives it (its priority inside the engine, the cell it was placed in)."""

    node_id: str
    route: RouteRequest
    token_ids: list[int]
    priority: int = 0
    cell: str | None = None
    spilled: bool = False  # placed on an idle node of a cell its class may borrow, not its home cell
    lora: LoraRequest | None = None  # the adapter the node applies
    slo_tpot_s: float = 0.0  # the TPOT target it is routed by: its class's, else the router's (GenerateRequest's)


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
    tenants: TenantLimiter | None = None,
    loras: LoraTable | None = None,
    lora_affinity: bool = True,
    aliases: Mapping[str, str] | None = None,
    token_ids: list[int] | PromptError | None = None,
    on_unserved: Callable[[str, str | None], None] | None = None,
) -> Placement | ErrorReply:
    """Validate, tokenize, choose a node and admit; ``model_names``: the served models, the default first;
    ``inflight``: request ids in flight (a reused one is refused); ``exclude``: node ids the policy must
    not choose (a resumed request's last node, when it is still registered); ``tenants``: the tenants'
    classes and rate limits (None: not checked, as for a resumed request, which was admitted already);
    ``loras``: the fleet's LoRA adapters (a ``model`` naming one runs on its parent, on nodes that serve
    adapters, those holding it preferred unless ``lora_affinity`` is False: the fleet simulator's ablation);
    ``aliases``: other names for served models or adapters, resolved first (controlplane/model_aliases.py);
    ``token_ids``: the prompt already tokenized by ``tokenize`` (or the PromptError it raised), off the event loop for a
    long one (controlplane/offload_tokenize.py); None: tokenized here; ``on_unserved(model, cell)``: told of a
    refusal for want of capacity.

    The traffic class (the tenant's, else the request's; controlplane/cells.py) picks the home cell, the
    engine priority, the SLOs the policy aims for and the per-node queue limit. When its home cell would
    queue it (the chosen node has a queue) or refuses it, an idle node (nothing queued) of a cell its class
    may spill into takes it instead, if there is one."""
    rid = msg.request_id

    def refuse(
        code: ErrorCode, message: str, retry_after_s: float | None = None, param: str | None = None
    ) -> ErrorReply:
        return ErrorReply(request_id=rid, code=code, message=message, retry_after_s=retry_after_s, param=param)

    def unserved(refusal: ErrorReply) -> ErrorReply:  # refused for want of capacity: demand its pool did not serve
        if on_unserved is not None:
            on_unserved(model, cell)
        return refusal

    if not rid:
        return refuse(ErrorCode.INVALID_REQUEST, "request_id must not be empty")
    if rid in inflight:
        return refuse(ErrorCode.INVALID_REQUEST, f"request id {rid!r} is already in flight")
    if not model_names:
        return refuse(ErrorCode.NO_NODE, "no node is serving", retry_after_s=1.0)
    named = resolve_model(aliases or {}, msg.model)
    lora_entry = loras.get(named) if loras is not None else None
    model = (named or model_names[0]) if lora_entry is None else (lora_entry.parent or model_names[0])
    if model not in model_names:
        alias = f" ({msg.model!r} is an alias of {named!r})" if named != msg.model else ""
        served = f"the model {model!r} is not served{alias} (served: {model_names})"
        return refuse(ErrorCode.UNKNOWN_MODEL, served, param="model")
    low, high = REQUEST_PRIORITY_RANGE
    if not low <= msg.priority <= high:
        message = f"priority must be in [{low}, {high}], got {msg.priority}"
        return refuse(ErrorCode.INVALID_REQUEST, message, param="priority")
    asked = msg.traffic_class if tenants is None else tenants.class_of(msg.tenant, msg.traffic_class)
    try:
        traffic_class = router.cells.resolve(asked)
    except ValueError as e:
        return refuse(ErrorCode.INVALID_REQUEST, str(e), param="traffic_class")
    try:
        if isinstance(token_ids, PromptError):
            raise token_ids
        token_ids = tokenize(tokenizer, msg) if token_ids is None else token_ids
        msg.sampling = bad_words.tokenized(tokenizer, msg.sampling)  # vLLM's bad_words as token sequences, once
        msg.sampling = predictions.tokenized(tokenizer, msg.sampling)  # a predicted output's tokens: drafts
        msg.sampling = thinking_budget.tokenized(tokenizer, msg.sampling)  # the thinking's delimiters, for a budget
        check_sampling_token_ids(msg.sampling, tokenizer.vocab_size)  # logit_bias, allowed_token_ids: in the vocabulary
    except PromptError as e:
        return refuse(ErrorCode.INVALID_REQUEST, str(e), param=e.param)
    if msg.sampling.structured_outputs is not None:
        try:
            check_grammar(msg.sampling.structured_outputs)  # compiles (no tokenizer): a bad schema is refused here
        except StructuredOutputError as e:
            return refuse(ErrorCode.INVALID_REQUEST, f"structured_outputs: {e}", param="structured_outputs")
    cell = traffic_class.cell if traffic_class is not None else router.cell_for(asked)
    snapshot: ClusterSnapshot = registry.snapshot(model=model, cell=cell)
    if lora_entry is not None:
        lora_nodes = tuple(v for v in snapshot.nodes if v.max_loras > 0)
        # a filter on a hello fact: the registry's change mark still holds for the subgroup, so the policy's and
        # admission's tables stay incremental (router/node_changes.py); a plain subset would rebuild them
        lora_changes = None if snapshot.changes is None else snapshot.changes.subgroup("max_loras>0")
        snapshot = ClusterSnapshot(snapshot.now_s, lora_nodes, lora_changes)
        if not snapshot.nodes:
            message = f"no live node serves LoRA adapters of {model!r} in cell {cell!r}"
            return unserved(refuse(ErrorCode.NO_NODE, message, retry_after_s=1.0))
    admission_snapshot = snapshot
    if exclude:
        snapshot = ClusterSnapshot(snapshot.now_s, tuple(v for v in snapshot.nodes if v.node_id not in exclude))
    if lora_entry is not None and lora_affinity:
        snapshot = prefer_resident(snapshot, lora_entry.lora.name)  # router/lora_affinity.py
    if msg.sampling.prediction_token_ids:  # OpenAI's predicted output: drafted from only where a node speculates
        snapshot = prefer_speculating(snapshot)  # router/prediction_affinity.py
    spill_to = traffic_class.spill_to if traffic_class is not None else []
    if not snapshot.nodes and not spill_to:
        return unserved(refuse(ErrorCode.NO_NODE, f"no live node serves {model!r} in cell {cell!r}", retry_after_s=1.0))
    num_prompt_tokens = len(token_ids)
    spill_views = [
        view
        for c in spill_to
        for view in registry.snapshot(model=model, cell=c).nodes
        if view.node_id not in exclude and (lora_entry is None or view.max_loras > 0)
    ]
    try:
        check_prompt_length(num_prompt_tokens, max(v.max_model_len for v in (*snapshot.nodes, *spill_views)))
    except PromptTooLongError as e:
        return refuse(ErrorCode.PROMPT_TOO_LONG, f"{e} on the longest context served", param=e.param)
    if tenants is not None:
        over = tenants.check(msg.tenant, num_prompt_tokens, snapshot.now_s)
        if over is not None:
            return refuse(ErrorCode.OVERLOADED, over[0], retry_after_s=over[1])
    nodes = snapshot.nodes or spill_views
    lora_id = None if lora_entry is None else lora_entry.lora.lora_id
    if tenants is not None:  # a new request (a resumed one keeps the salt it was given): its tenant's cache
        salt = msg.sampling.cache_salt
        if salt is not None and salt.startswith(RESERVED_SALT_PREFIX):
            return refuse(
                ErrorCode.INVALID_REQUEST, f"cache_salt: {RESERVED_SALT_PREFIX!r} is reserved", param="cache_salt"
            )
        private = tenants.cache_salt(msg.tenant, salt)
        if private != salt:  # the message itself: its GenerateRequest, and a resume, carry the tenant's salt
            msg.sampling = msgspec.structs.replace(msg.sampling, cache_salt=private)
    key = cache_key(lora_id, msg.sampling.cache_salt)  # the engine's: the adapter, salted (engine/prefix_key.py)
    route = RouteRequest(
        request_id=rid,
        model=model,
        num_prompt_tokens=num_prompt_tokens,
        max_tokens=msg.sampling.max_tokens,
        block_hashes=prompt_block_hashes(token_ids, nodes[0].block_size, key, nodes[0].prefix_hash_algo),
        traffic_class=traffic_class.name if traffic_class is not None else asked if cell is not None else DEFAULT_CLASS,
        slo_ttft_s=None if traffic_class is None else traffic_class.slo_ttft_s,
        slo_tpot_s=None if traffic_class is None else traffic_class.slo_tpot_s,
        lora_name=None if lora_entry is None else lora_entry.lora.name,
        goodput_first=None if traffic_class is None else traffic_class.goodput_first,
    )
    priority = engine_priority(0 if traffic_class is None else traffic_class.priority, msg.priority)
    lora = None if lora_entry is None else lora_entry.lora
    slo_tpot_s = router.slo_tpot_s if route.slo_tpot_s is None else route.slo_tpot_s
    limits = (None, None)  # the class's per-node queue limit, and its SLO when it sheds past it
    if traffic_class is not None:
        limits = (traffic_class.max_queue_per_node, traffic_class.slo_ttft_s if traffic_class.shed_past_slo else None)
    placed = _choose(route, snapshot, admission_snapshot, policy, admission, limits) if snapshot.nodes else None
    if spill_to and (not isinstance(placed, str) or _has_queue(snapshot, placed)):
        for spill_cell in spill_to:  # borrow an idle node: nothing queued there, so nobody waits behind it
            idle = tuple(v for v in spill_views if v.cell == spill_cell and queued_requests(v) == 0)
            # its own key in the policy's per-class tables: the idle subset would otherwise replace the home
            # cell's table at every spill (an O(N) rebuild each way)
            spill_route = dataclasses.replace(route, traffic_class=f"{route.traffic_class}>{spill_cell}")
            node_id = policy.choose(spill_route, ClusterSnapshot(snapshot.now_s, idle)) if idle else None
            if node_id is not None:
                if tenants is not None:
                    tenants.on_admitted(msg.tenant, num_prompt_tokens, snapshot.now_s)
                return Placement(
                    node_id, route, token_ids, priority, spill_cell, spilled=True, lora=lora, slo_tpot_s=slo_tpot_s
                )
    if isinstance(placed, str):
        if tenants is not None:
            tenants.on_admitted(msg.tenant, num_prompt_tokens, snapshot.now_s)
        return Placement(placed, route, token_ids, priority, cell, lora=lora, slo_tpot_s=slo_tpot_s)
    if placed is None:
        return unserved(refuse(ErrorCode.NO_NODE, f"no live node serves {model!r} in cell {cell!r}", retry_after_s=1.0))
    return unserved(msgspec.structs.replace(placed, request_id=rid))


def _choose(
    route: RouteRequest, snapshot: ClusterSnapshot, admission_snapshot: ClusterSnapshot, policy, admission, limits
) -> str | ErrorReply:
    """The policy's node that admission admits (the next-best one when its queue is full, MAX_CHOICES at
    most), or the refusal."""
    refusal = None
    for _ in range(MAX_CHOICES):
        node_id = policy.choose(route, snapshot)
        if node_id is None:
            return ErrorReply(code=ErrorCode.NO_NODE, message="no node can take this request now", retry_after_s=1.0)
        refusal = admission.check(admission_snapshot, node_id, *limits)
        if refusal is None:
            return node_id
        if getattr(refusal, "node_id", None) != node_id:  # the whole cluster is full: no other node helps
            break
        # that node's queue is full: the policy's next-best node, without it
        snapshot = ClusterSnapshot(snapshot.now_s, tuple(v for v in snapshot.nodes if v.node_id != node_id))
        if not snapshot.nodes:
            break
    return ErrorReply(
        code=ErrorCode.OVERLOADED,
        message=str(getattr(refusal, "message", refusal)),
        retry_after_s=getattr(refusal, "retry_after_s", 1.0),
    )


def _has_queue(snapshot: ClusterSnapshot, node_id: str) -> bool:
    return any(v.node_id == node_id and queued_requests(v) > 0 for v in snapshot.nodes)


def resumed_request(
    msg: ClientGenerate, model: str, prompt_token_ids: Sequence[int], output_token_ids: Sequence[int]
) -> ClientGenerate:
    """What to place when ``msg`` (served as ``model``, tokenized to ``prompt_token_ids``) resumes on another
    node after ``output_token_ids`` were streamed to its client: the prompt extended by them (re-prefilled
    there; a prefix cache holding the prompt helps), ``max_tokens`` reduced by their number (at least one
    must remain), ``min_tokens`` by as many, the same id, model, traffic class and other sampling parameters.
    Greedy decoding then continues exactly as it would have on the lost node, penalties included: the node is told
    how many of the prompt's last tokens are output (GenerateRequest.num_resumed_tokens). Prompt logprobs came with
    the first chunk: once output was streamed they are not asked again."""
    remaining = msg.sampling.max_tokens - len(output_token_ids)
    if remaining < 1:
        raise ValueError(f"request {msg.request_id!r} has no token left to generate")
    return ClientGenerate(
        request_id=msg.request_id,
        model=model,
        prompt_token_ids=[*prompt_token_ids, *output_token_ids],
        sampling=msgspec.structs.replace(
            msg.sampling,
            max_tokens=remaining,
            min_tokens=max(msg.sampling.min_tokens - len(output_token_ids), 0),
            # the first chunk carried its prompt's scores: not again for the extended prompt
            prompt_logprobs=None if output_token_ids else msg.sampling.prompt_logprobs,
        ),
        traffic_class=msg.traffic_class,
        tenant=msg.tenant,
    )


def tokenize(tokenizer: EngineTokenizer, msg: ClientGenerate, encode=None) -> list[int]:
    """The prompt's token ids from exactly one of prompt / messages / prompt_token_ids; PromptError saying
    what is wrong (none or several given, ids out of the vocabulary, empty) and naming the field. ``encode``: the
    tokenizer's encode to use (None: ``tokenizer.encode``)."""
    encode = encode or tokenizer.encode
    given = [x is not None for x in (msg.prompt, msg.messages, msg.prompt_token_ids)]
    if sum(given) != 1:
        raise PromptError("exactly one of prompt, messages, prompt_token_ids must be given", param=None)
    if msg.tools and msg.messages is None:
        raise PromptError("tools are given with messages only", "tools")
    if msg.chat is not None and msg.messages is None:
        raise PromptError("chat template options are given with messages only", "chat")
    if msg.prompt_token_ids is not None:
        token_ids, param = msg.prompt_token_ids, "prompt_token_ids"
    elif msg.messages is not None:  # the chat template, vLLM's options (backends/chat_render.py): a PromptError
        token_ids, param = encode(render_chat(tokenizer, msg.messages, msg.tools, msg.chat)), "messages"
    else:
        token_ids, param = encode(msg.prompt), "prompt"
    if msg.sampling.truncate_prompt_tokens is not None:  # vLLM's left truncation: the last k tokens
        token_ids = token_ids[-msg.sampling.truncate_prompt_tokens :]
    try:
        check_token_ids(token_ids, tokenizer.vocab_size)
    except PromptError as e:
        raise PromptError(str(e), param) from None
    return token_ids
