"""The OpenAI reply objects of one request (chat or text completion, one or several choices), built from
its TokenChunks.

    Stream:      first_objects(), chunk_objects(c) for every chunk [+ usage_object()], then [DONE]
    Non-stream:  add(c) for every chunk, then full_object()

A request of ``n`` choices is ``n`` engine requests (controlplane/frontend.py ``choice_request_ids``), a batch of
prompts (a completion's list) ``n`` per prompt, choice ``i * n + j`` of prompt i; a chunk's ``request_id`` names its
choice, and the reply is done when every choice has finished. Chat streams open with one role delta per choice.
Usage counts each prompt once and the completion tokens of every choice, with
``prompt_tokens_details.cached_tokens`` (the prompt tokens the serving node's prefix cache held).
``continuous_usage`` (vLLM's ``stream_options.continuous_usage_stats``) puts the running usage in every
streamed chunk. Log-probabilities name tokens by their text and bytes (gateway/token_text.py); a
completion's ``text_offset`` is each token's offset in its choice's text. A chat with tools (``tools``, a
gateway/tool_calls.ToolPlan) answers the calls the model made as ``tool_calls``: streamed, each choice's text
goes through a ToolStream, and a chunk that carries log-probabilities but no text to send yet is sent with an
empty delta. A completion with ``echo`` starts each choice's text with the prompt (streamed: in its first chunk),
and its logprobs with the prompt tokens' (the first one's null, as OpenAI's); a request that named vLLM's
``prompt_logprobs`` gets them in vLLM's shape (a completion's per choice, a chat's once, at the top; not streamed
for a chat). A chat with vLLM's ``echo`` whose last message is the assistant's (a prefilled reply,
``continue_final_message``) starts each choice's content with that message (streamed: a content delta after the
role's), as vLLM's serving_chat does. vLLM's ``return_token_ids``: a chat reply's ``prompt_token_ids`` (streamed: in
its first chunk) and each choice's ``token_ids`` (streamed: each chunk's); a completion's per choice, both. Its
``return_tokens_as_token_ids``: logprobs name each token "token_id:<id>" (their offsets stay the text's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from controlplane.frontend import FrontendError
from controlplane.gateway.reasoning_parsers import ReasoningSplit, split_reasoning
from controlplane.gateway.request_timing import per_request_metrics
from controlplane.gateway.system_fingerprint import SystemFingerprints
from controlplane.gateway.token_text import TokenIdText, TokenText, clamp_logprob
from controlplane.gateway.tool_calls import ToolPlan, ToolStream, call_objects
from transport.messages import ErrorCode, RequestTiming, TokenChunk

Logprob = tuple[int, float, list[tuple[int, float]]]  # (token id, logprob, [(top token id, logprob)])
PromptLogprob = tuple[int, float | None, list[tuple[int, float]], int | None]  # (token id, logprob, top, rank)


@dataclass(slots=True)
class _Choice:
    index: int
    prompt_index: int = 0  # its prompt in a batch (index // n)
    text_parts: list[str] = field(default_factory=list)
    num_text_chars: int = 0
    num_output_tokens: int = 0  # as the node counted them; 0 until reported
    num_token_ids: int = 0  # token ids seen, the fallback count
    logprobs: list[Logprob] = field(default_factory=list)
    logprob_offsets: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    tool_stream: ToolStream | None = None
    prompt_logprobs: list[PromptLogprob] | None = None  # from the first chunk, when asked
    echoed: bool = False  # (streamed) its first chunk, with the prompt, is out
    prompt_token_ids: list[int] | None = None  # its prompt's tokens (vLLM's return_token_ids), from its first chunk
    token_ids: list[int] = field(default_factory=list)  # its output's tokens (kept with return_token_ids)
    prediction: tuple[int, int] = (0, 0)  # its predicted output's tokens accepted and rejected, as its last chunk said
    reasoning: ReasoningSplit | None = None  # its thinking apart from its answer, chunk by chunk (reasoning_parsers.py)
    split: tuple[str, str] = ("", "")  # the last chunk's (reasoning, content) text
    num_reasoning_tokens: int = 0  # its tokens while it was still thinking (usage's reasoning_tokens)
    node_id: str = ""  # the node its latest chunk came from (a resumed request's moves)
    fingerprint: str | None = None  # that node's system_fingerprint (system_fingerprint.py)
    timing: RequestTiming | None = None  # its last chunk's phases on that node (request_timing.py)

    @property
    def num_completion_tokens(self) -> int:
        return self.num_output_tokens or self.num_token_ids


def chat_reply_role(messages: list | None, add_generation_prompt: bool, response_role: str) -> str:
    """A chat reply's role, vLLM's rule (serving_chat ``get_chat_request_role``): the server's ``--response-role``
    when the prompt ends with a new message's header, else the role of the message it continues."""
    return response_role if add_generation_prompt or not messages else messages[-1].role


class OpenAIReply:
    """choice_ids: each choice's engine request id, in choice order (one choice: chunks of any id are its)."""

    def __init__(
        self,
        *,
        chat: bool,
        request_id: str,
        model: str,
        created: int,
        include_usage: bool,
        continuous_usage: bool = False,
        choice_ids: list[str] | None = None,
        token_text: TokenText | None = None,
        tools: ToolPlan | None = None,
        echo: str | list[str] | None = None,
        prompt_logprobs_field: bool = False,
        choices_per_prompt: int = 1,
        service_tier: str | None = None,
        chat_echo: str = "",
        return_token_ids: bool = False,
        tokens_as_ids: bool = False,
        predicted: bool = False,
        on_done: Callable[[dict], None] | None = None,
        reasoning: bool = False,
        include_reasoning: bool = True,
        fingerprints: SystemFingerprints | None = None,
        per_request_metrics: bool = False,
        role: str = "assistant",
        obfuscate: bool = False,
    ) -> None:
        """echo: a completion's prompt text (a batch's: one per prompt), put before each choice's text (None: no echo);
        prompt_logprobs_field: answer vLLM's ``prompt_logprobs``; choices_per_prompt: ``n`` of a batch of prompts;
        chat_echo: a chat's text before each choice's content (vLLM's chat ``echo``: the final assistant message);
        return_token_ids: vLLM's (``prompt_token_ids`` and each choice's ``token_ids``); tokens_as_ids: vLLM's
        ``return_tokens_as_token_ids`` (logprobs name each token "token_id:<id>"); predicted: the request gave a
        ``prediction`` (usage then counts its accepted and rejected tokens, as OpenAI's does); on_done: called once
        with the whole reply's object when every choice has ended, whole or streamed (a stored chat completion);
        reasoning: a chat's reply is split into reasoning and content (gateway/reasoning_parsers.py), the reasoning
        sent unless ``include_reasoning`` is false; fingerprints: each object's ``system_fingerprint``, that of the
        node its choices ran on (None: no field); per_request_metrics: vLLM's ``metrics`` (request_timing.py); role: a
        chat reply's (``chat_reply_role``); obfuscate: a stream's events padded (gateway/stream_obfuscation.py)."""
        self.role = role
        self.obfuscate = obfuscate
        self.fingerprints = fingerprints
        self.per_request_metrics = per_request_metrics and len(choice_ids or [request_id]) == 1
        self.reasoning, self.include_reasoning = chat and reasoning, include_reasoning
        self.predicted = predicted
        self._on_done = on_done
        self.chat = chat
        self.tools = tools if chat and tools is not None and tools.parses else None
        self.base = {
            "id": request_id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": model,
        }
        if service_tier is not None:  # the tier it was served at (OpenAI's field), when it asked for one
            self.base["service_tier"] = service_tier
        self.include_usage = include_usage
        self.continuous_usage = continuous_usage and include_usage
        ids = choice_ids or [request_id]
        self.choices = [
            _Choice(i, i // choices_per_prompt, tool_stream=ToolStream(self.tools) if self.tools else None)
            for i in range(len(ids))
        ]
        self._by_id = dict(zip(ids, self.choices, strict=True))
        self.token_text = token_text or TokenText(None)
        self.names = TokenIdText() if tokens_as_ids else self.token_text  # how logprobs name tokens
        self.return_token_ids = return_token_ids
        self._prompt_tokens: dict[int, int] = {}  # per prompt of a batch: its tokens, and those its node had cached
        self._cached_tokens: dict[int, int] = {}
        self.echo = None if chat or echo is None else [echo] if isinstance(echo, str) else echo
        self.chat_echo = chat_echo if chat else ""
        self.prompt_logprobs_field = prompt_logprobs_field

    @property
    def finished(self) -> bool:
        return all(c.finish_reason is not None for c in self.choices)

    def _choice(self, chunk: TokenChunk) -> _Choice:
        if len(self.choices) == 1:
            return self.choices[0]
        choice = self._by_id.get(chunk.request_id)
        if choice is None:
            raise FrontendError(ErrorCode.INTERNAL, f"a chunk of an unknown choice ({chunk.request_id!r})")
        return choice

    def add(self, chunk: TokenChunk) -> _Choice:
        """Account for one TokenChunk (its choice's); raises FrontendError when the node aborted the request."""
        choice = self._choice(chunk)
        self._count_prompt(choice.prompt_index, chunk)
        choice.num_output_tokens = max(choice.num_output_tokens, chunk.num_output_tokens)
        choice.num_token_ids += len(chunk.token_ids)
        self._note_node(choice, chunk)
        if chunk.timing is not None:
            choice.timing = chunk.timing
        if self.predicted:
            choice.prediction = (chunk.num_prediction_accepted_tokens, chunk.num_prediction_rejected_tokens)
        if chunk.prompt_logprobs is not None:
            choice.prompt_logprobs = chunk.prompt_logprobs
        if chunk.prompt_token_ids is not None and choice.prompt_token_ids is None:
            choice.prompt_token_ids = chunk.prompt_token_ids
        if self.return_token_ids:
            choice.token_ids.extend(chunk.token_ids)
        if chunk.logprobs:
            offset = choice.num_text_chars
            for token_id, *_ in chunk.logprobs:
                choice.logprob_offsets.append(offset)
                offset += len(self.token_text.lookup(token_id)[0])
            choice.logprobs.extend(chunk.logprobs)
        if self.reasoning:
            if choice.reasoning is None:
                choice.reasoning = ReasoningSplit()
            thought, answer = choice.reasoning.feed(chunk.text, last=chunk.finished)
            if choice.reasoning.thinking:
                choice.num_reasoning_tokens += len(chunk.token_ids)
            choice.split = (thought, answer)
        choice.text_parts.append(chunk.text)
        choice.num_text_chars += len(chunk.text)
        if chunk.finished:
            reason = chunk.finish_reason or "stop"
            if reason == "abort":
                raise FrontendError(ErrorCode.CANCELLED, "The request was aborted by the serving node")
            choice.finish_reason = reason
            if self._on_done is not None and self.finished:
                on_done, self._on_done = self._on_done, None
                on_done(self.full_object())
        return choice

    def _note_node(self, choice: _Choice, chunk: TokenChunk) -> None:
        if chunk.node_id != choice.node_id and chunk.node_id:
            choice.node_id = chunk.node_id
            if self.fingerprints is not None:
                choice.fingerprint = self.fingerprints.of_node(chunk.node_id)

    @property
    def num_prompt_tokens(self) -> int:
        return sum(self._prompt_tokens.values())

    def _count_prompt(self, prompt_index: int, chunk: TokenChunk) -> None:
        tokens = self._prompt_tokens[prompt_index] = max(
            self._prompt_tokens.get(prompt_index, 0), chunk.num_prompt_tokens
        )
        cached = max(self._cached_tokens.get(prompt_index, 0), chunk.num_cached_tokens)
        self._cached_tokens[prompt_index] = min(cached, tokens)

    def usage(self) -> dict:
        num_completion = sum(c.num_completion_tokens for c in self.choices)
        details = {"reasoning_tokens": sum(c.num_reasoning_tokens for c in self.choices)} if self.reasoning else {}
        if self.predicted:
            details.update(self._prediction_details())
        return {
            "prompt_tokens": self.num_prompt_tokens,
            "completion_tokens": num_completion,
            "total_tokens": self.num_prompt_tokens + num_completion,
            "prompt_tokens_details": {"cached_tokens": sum(self._cached_tokens.values())},
            **({"completion_tokens_details": details} if details else {}),
        }

    def _prediction_details(self) -> dict:
        """OpenAI's Predicted Outputs usage: the prediction's tokens the output repeated (as accepted drafts: a node
        that does not speculate accepts none) and the rest."""
        return {
            "accepted_prediction_tokens": sum(c.prediction[0] for c in self.choices),
            "rejected_prediction_tokens": sum(c.prediction[1] for c in self.choices),
        }

    def first_objects(self, first: TokenChunk | None = None) -> list[dict]:
        """A chat stream's opening role deltas (their usage, if continuous, has the prompt of ``first``)."""
        if first is not None:
            self._count_prompt(self._choice(first).prompt_index, first)
            self._note_node(self._choice(first), first)
        if not self.chat:
            return []
        roles = [self._chunk_object(c, {"role": self.role, "content": ""}, None, None) for c in self.choices]
        if self.return_token_ids and first is not None:  # vLLM's: the prompt's tokens in the first chunk ever
            roles[0]["prompt_token_ids"] = first.prompt_token_ids
        echoes = [self._chunk_object(c, {"content": self.chat_echo}, None, None) for c in self.choices]
        return roles + echoes if self.chat_echo else roles

    def chunk_objects(self, chunk: TokenChunk) -> list[dict]:
        choice = self._choice(chunk)
        num_logprobs = len(choice.logprobs)
        was_finished = choice.finish_reason is not None
        self.add(chunk)
        objects = []
        logprobs = self._logprobs_object(choice, num_logprobs) if chunk.logprobs else None
        finishing = choice.finish_reason is not None and not was_finished
        if not self.chat:
            return self._completion_chunk_objects(choice, chunk, logprobs, finishing)
        text, thoughts = chunk.text, []
        if self.reasoning:
            thought, text = choice.split  # add()'s split of this chunk
            if thought and self.include_reasoning:
                thoughts = [{"reasoning": thought, "reasoning_content": thought}]
        if choice.tool_stream is None:
            deltas = [{"content": text}] if text or (chunk.logprobs and not thoughts) else []
        else:
            deltas = choice.tool_stream.feed(text) + (choice.tool_stream.finish() if finishing else [])
        deltas = thoughts + deltas
        if not deltas and (logprobs is not None or (self.return_token_ids and chunk.token_ids and not finishing)):
            deltas = [{}]  # what it carries besides text (log-probabilities, tokens) goes out now
        token_ids = chunk.token_ids
        for delta in deltas:
            objects.append(self._chunk_object(choice, delta, chunk.text, logprobs, token_ids=token_ids))
            logprobs, token_ids = None, []
        if finishing:
            reason = choice.finish_reason
            if choice.tool_stream is not None:
                reason = self.tools.finish_reason(reason, choice.tool_stream.called)
            objects.append(self._chunk_object(choice, {}, "", None, reason, token_ids=token_ids))
        return objects

    def usage_object(self) -> dict:
        return self._whole({**self.base, "choices": [], "usage": self.usage()})

    def _whole(self, obj: dict) -> dict:
        """``obj`` (the whole reply, or a stream's usage chunk) with the reply's fingerprint and metrics."""
        if self.fingerprints is not None:
            fingerprints = {c.fingerprint for c in self.choices}
            obj["system_fingerprint"] = fingerprints.pop() if len(fingerprints) == 1 else None
        if self.per_request_metrics:
            obj["metrics"] = per_request_metrics(self.choices[0].timing)
        return obj

    def full_object(self) -> dict:
        choices = []
        for c in self.choices:
            text, thought = "".join(c.text_parts), None
            logprobs = self._logprobs_object(c, 0) if c.logprobs else None
            if self.echo is not None:
                text = self.echo[c.prompt_index] + text
                logprobs = self._with_prompt(c, logprobs)
            reason = c.finish_reason
            if self.chat:
                if self.reasoning:  # the answer is the content; tool calls are read from it alone
                    thought, answer = split_reasoning(text)
                    text = answer or ""
                content = self.chat_echo + text
                message = {"role": self.role, "content": content if content or not self.reasoning else None}
                if self.tools is not None:
                    content, calls = self.tools.extract(text)
                    echoed = self.chat_echo + (content or "") if self.chat_echo else content  # None: all calls
                    message = {"role": self.role, "content": echoed}
                    if calls:
                        message["tool_calls"] = call_objects(calls)
                    reason = self.tools.finish_reason(reason, bool(calls))
                if self.reasoning and self.include_reasoning:  # vLLM's field, and its earlier name
                    message.update(reasoning=thought, reasoning_content=thought)
                choice = {"index": c.index, "message": message}
            else:
                choice = {"text": text, "index": c.index}
            choice.update(logprobs=logprobs, finish_reason=reason)
            if self.prompt_logprobs_field and not self.chat:
                choice["prompt_logprobs"] = self._vllm_prompt_logprobs(c)
            if self.return_token_ids:  # vLLM's: a completion's echo has the prompt's tokens first, as its text
                echoed = (c.prompt_token_ids or []) if self.echo is not None else []
                choice["token_ids"] = [*echoed, *c.token_ids]
                if not self.chat:
                    choice["prompt_token_ids"] = c.prompt_token_ids
            choices.append(choice)
        obj = "chat.completion" if self.chat else "text_completion"
        full = {**self.base, "object": obj, "choices": choices, "usage": self.usage()}
        if self.prompt_logprobs_field and self.chat:
            full["prompt_logprobs"] = self._vllm_prompt_logprobs(self.choices[0])
        if self.return_token_ids and self.chat:
            full["prompt_token_ids"] = self.choices[0].prompt_token_ids
        return self._whole(full)

    def _completion_chunk_objects(
        self, choice: _Choice, chunk: TokenChunk, logprobs: dict | None, finishing: bool
    ) -> list[dict]:
        text = chunk.text
        first = not choice.echoed
        choice.echoed = True
        if first and self.echo is not None:
            text = self.echo[choice.prompt_index] + text
            logprobs = self._with_prompt(choice, logprobs)
        objects = []
        token_ids = chunk.token_ids
        if first and self.echo is not None and choice.prompt_token_ids:
            token_ids = [*choice.prompt_token_ids, *token_ids]
        tokens_only = self.return_token_ids and bool(token_ids) and not finishing  # no text, tokens all the same
        if text or logprobs or tokens_only or (first and (self.prompt_logprobs_field or self.return_token_ids)):
            objects.append(self._chunk_object(choice, {}, text, logprobs, token_ids=token_ids))
            token_ids = []
            if first and self.prompt_logprobs_field:
                objects[-1]["choices"][0]["prompt_logprobs"] = self._vllm_prompt_logprobs(choice)
            if first and self.return_token_ids:
                objects[-1]["choices"][0]["prompt_token_ids"] = choice.prompt_token_ids
        if finishing:
            objects.append(self._chunk_object(choice, {}, "", None, choice.finish_reason, token_ids=token_ids))
        return objects

    def _with_prompt(self, c: _Choice, logprobs: dict | None) -> dict | None:
        """A completion's logprobs object with the prompt tokens' first (echo); as it is when the output's were not
        asked for (vLLM's prompt_logprobs alone does not make logprobs) or the prompt's did not come."""
        if c.prompt_logprobs is None or logprobs is None:
            return logprobs
        lookup, offset = self.names.lookup, 0
        tokens, token_logprobs, tops, offsets = [], [], [], []
        for token, logprob, top, _ in c.prompt_logprobs:
            tokens.append(lookup(token)[0])
            token_logprobs.append(None if logprob is None else clamp_logprob(logprob))
            tops.append(None if logprob is None else {lookup(t)[0]: clamp_logprob(lp) for t, lp in top})
            offsets.append(offset)
            offset += len(self.token_text.lookup(token)[0])  # offsets in the text, whatever names the tokens
        prompt = {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": tops, "text_offset": offsets}
        return {key: prompt[key] + logprobs[key] for key in prompt}

    def _vllm_prompt_logprobs(self, c: _Choice) -> list[dict | None] | None:
        """vLLM's ``prompt_logprobs``: per prompt position (the first None) {token id: {logprob, rank, decoded_token}}
        for the prompt token and its top alternatives."""
        if c.prompt_logprobs is None:
            return None
        lookup = self.token_text.lookup
        out: list[dict | None] = []
        for token, logprob, top, rank in c.prompt_logprobs:
            if logprob is None:
                out.append(None)
                continue
            entry = {str(t): {"logprob": clamp_logprob(lp), "rank": i, "decoded_token": lookup(t)[0]}
                     for i, (t, lp) in enumerate(top, 1)}  # fmt: skip
            entry[str(token)] = {"logprob": clamp_logprob(logprob), "rank": rank, "decoded_token": lookup(token)[0]}
            out.append(entry)
        return out

    def _chunk_object(
        self,
        c: _Choice,
        delta: dict,
        text: str | None,
        logprobs: dict | None,
        finish: str | None = None,
        *,
        token_ids: list[int] | None = None,
    ) -> dict:
        if self.chat:
            choice = {"index": c.index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        else:
            choice = {"text": text or "", "index": c.index, "logprobs": logprobs, "finish_reason": finish}
        if self.return_token_ids:  # vLLM's: each streamed choice names the tokens it carries
            choice["token_ids"] = token_ids or []
        obj = {**self.base, "choices": [choice]}
        if self.fingerprints is not None:
            obj["system_fingerprint"] = c.fingerprint
        if self.continuous_usage:
            obj["usage"] = self.usage()
        elif self.include_usage:
            obj["usage"] = None
        return obj

    def _logprobs_object(self, c: _Choice, start: int) -> dict:
        entries, offsets = c.logprobs[start:], c.logprob_offsets[start:]
        lookup = self.names.lookup
        if self.chat:
            content = []
            for token, logprob, top in entries:
                text, raw = lookup(token)
                tops = [{"token": lookup(t)[0], "logprob": clamp_logprob(lp), "bytes": lookup(t)[1]} for t, lp in top]
                content.append({"token": text, "logprob": clamp_logprob(logprob), "bytes": raw, "top_logprobs": tops})
            return {"content": content}
        return {
            "tokens": [lookup(token)[0] for token, _, _ in entries],
            "token_logprobs": [clamp_logprob(logprob) for _, logprob, _ in entries],
            "top_logprobs": [{lookup(t)[0]: clamp_logprob(lp) for t, lp in top} for _, _, top in entries],
            "text_offset": [o + len(self.echo[c.prompt_index]) for o in offsets]
            if self.echo
            else offsets,  # after echo
        }
