"""A Responses API reply (``POST /v1/responses``, gateway/openai_responses.py parses the request): the Response
object and the stream's named events, built from a generation's TokenChunks.

    object    {id: resp_…, object: response, created_at, status: queued | in_progress | completed | incomplete |
              failed | cancelled, error, incomplete_details, output: [a reasoning item {content: [reasoning_text]}
              (with the gateway's reasoning parser: gateway/reasoning_parsers.py), a message item {content:
              [output_text with its logprobs]} and function_call items {call_id, name, arguments}], usage:
              {input_tokens, input_tokens_details.cached_tokens, output_tokens, output_tokens_details.reasoning_tokens
              (the tokens before the end of thinking), total_tokens}, and the request's settings echoed}
    stream    named events, each with its ``sequence_number``: response.created, response.in_progress,
              response.output_item.added, response.content_part.added, response.reasoning_text.delta / .done
              (a reasoning item's), response.output_text.delta (with the tokens' logprobs when asked; a reasoning
              token's are not given) / .done, response.content_part.done,
              response.function_call_arguments.delta / .done, response.output_item.done, response.completed (or
              response.incomplete); a failure after the first event is an ``error`` event and response.failed
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from controlplane.frontend import FrontendError
from controlplane.gateway.errors import ERROR_KINDS
from controlplane.gateway.openai_responses import Conversation, ResponsesArgs, item_id
from controlplane.gateway.reasoning_parsers import ReasoningSplit, reasoning_parser_for
from controlplane.gateway.stream_obfuscation import obfuscated_json, obfuscates
from controlplane.gateway.token_text import TokenText, clamp_logprob
from controlplane.gateway.tool_calls import ToolStream
from transport.chat_wire import ChatMessage, ToolCall
from transport.messages import ErrorCode, TokenChunk


class ResponsesReply:
    """One response, built from its TokenChunks: ``add`` each (it returns the SSE events they make), then
    ``full_object()``; streamed, ``start_events(first)`` before, ``failure_events(err)`` on a failure.
    ``on_done(object, conversation)`` is called once the response is complete (the store keeps it)."""

    def __init__(
        self,
        model: str,
        parsed: ResponsesArgs,
        on_done: Callable[[dict, Conversation], None] | None = None,
        names: TokenText | None = None,
        response_id: str | None = None,
        created_at: int | None = None,
        reasoning_parser: str | None = None,
        obfuscation: bool = False,
    ) -> None:
        """obfuscation: the server's default for a stream's delta events' padding (gateway/stream_obfuscation.py),
        which the request's ``stream_options.include_obfuscation`` overrides."""
        self.id = response_id or item_id("resp")  # given: a background response run again after a restart
        self.obfuscate = obfuscates(parsed.generate, obfuscation)
        self.model = model
        self.parsed = parsed
        self.created_at = int(time.time()) if created_at is None else created_at
        plan = parsed.generate.tool_plan
        self._stream = ToolStream(plan) if plan is not None and plan.parses else None
        self._on_done = on_done
        self.items: list[dict] = []  # the output items, in order
        self._open: dict | None = None  # the item being streamed now
        self._sequence = 0
        self.num_prompt_tokens = self.num_cached_tokens = self.num_output_tokens = 0
        self.finish_reason: str | None = None
        self.status: str | None = None  # set: what the object says instead (queued, cancelled, failed)
        self.error: dict | None = None  # a failed response's {code, message}
        self._names = names or TokenText(None)  # how logprobs name tokens (the gateway's tokenizer)
        self._logprobs: list[dict] = []  # the tokens' logprobs not yet given to a text delta
        parser = reasoning_parser_for(reasoning_parser, parsed.generate.template_kwargs)
        self._reasoning = ReasoningSplit() if parser is not None else None  # the gateway's reasoning parser's split
        self.num_reasoning_tokens = 0

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def add(self, chunk: TokenChunk) -> list[bytes]:
        self.num_prompt_tokens = max(self.num_prompt_tokens, chunk.num_prompt_tokens)
        self.num_cached_tokens = max(self.num_cached_tokens, chunk.num_cached_tokens)
        self.num_output_tokens = max(self.num_output_tokens, chunk.num_output_tokens)
        if chunk.finished and chunk.finish_reason == "abort":
            raise FrontendError(ErrorCode.CANCELLED, "The request was aborted by the serving node")
        self._logprobs += [self._logprob(*entry) for entry in chunk.logprobs or ()]
        text, deltas = chunk.text, []
        if self._reasoning is not None:
            thought, text = self._reasoning.feed(text, last=chunk.finished)
            deltas = [{"reasoning": thought}] if thought else []
            if self._reasoning.thinking:
                self.num_reasoning_tokens += len(chunk.token_ids)
        if self._stream is None:
            deltas += [{"content": text}] if text else []
        else:
            deltas += self._stream.feed(text) + (self._stream.finish() if chunk.finished else [])
        events = [event for delta in deltas for event in self._delta_events(delta)]
        if chunk.finished:
            self.finish_reason = chunk.finish_reason or "stop"
            events += self._close_item()
            done = self.full_object()
            if self._on_done is not None:
                self._on_done(done, self.conversation_after())
            kind = "response.completed" if done["status"] == "completed" else "response.incomplete"
            events.append(self._event(kind, response=done))
        return events

    def conversation_after(self) -> Conversation:
        """The conversation a later request continues: the input, then the output as the assistant's message."""
        return (*self.parsed.conversation, self._output_message())

    def current_status(self) -> str:
        """queued, in_progress, completed, incomplete, failed or cancelled (what ``full_object`` says)."""
        if self.status is not None:
            return self.status
        if not self.finished:
            return "in_progress"
        return "incomplete" if self.finish_reason == "length" else "completed"

    def full_object(self) -> dict:
        status = self.current_status()
        obj = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": self.error,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "model": self.model,
            "output": self.items if self.finished else [],
            **self.parsed.settings,
            "usage": self._usage() if self.finished else None,
        }
        return obj

    def start_events(self, first: TokenChunk) -> list[bytes]:
        return [self.created_event(), self.in_progress_event()]

    def created_event(self) -> bytes:
        return self._event("response.created", response=self.full_object())

    def in_progress_event(self) -> bytes:
        return self._event("response.in_progress", response=self.full_object())

    chunk_events = add

    def failure_events(self, err: FrontendError) -> list[bytes]:
        """The events of a failure; the object is failed from now on."""
        kind = ERROR_KINDS[err.code]
        code = kind.code or kind.type
        self.status, self.error = "failed", {"code": code, "message": err.message}
        return [
            self._event("error", code=code, message=err.message, param=err.param),
            self._event("response.failed", response=self.full_object()),
        ]

    def _delta_events(self, delta: dict) -> list[bytes]:
        events: list[bytes] = []
        if delta.get("reasoning"):
            self._logprobs = []  # a reasoning token's logprobs are not given (the message's are its own)
            if self._open is None or self._open["type"] != "reasoning":
                events += self._close_item()
                events += self._open_item({"type": "reasoning", "id": item_id("rs"), "summary": [], "content": [],
                                           "encrypted_content": None, "status": "in_progress"})  # fmt: skip
                events.append(self._event("response.content_part.added", **self._at(), content_index=0,
                                          part=_reasoning_part("")))  # fmt: skip
                self._open["text"] = ""
            self._open["text"] += delta["reasoning"]
            events.append(self._event("response.reasoning_text.delta", **self._at(), content_index=0,
                                      delta=delta["reasoning"]))  # fmt: skip
        if delta.get("content"):
            if self._open is None or self._open["type"] != "message":
                events += self._close_item()
                message = {"type": "message", "id": item_id("msg"), "status": "in_progress", "role": "assistant"}
                events += self._open_item({**message, "content": []})
                events.append(self._event("response.content_part.added", **self._at(), content_index=0,
                                          part=_text_part("")))  # fmt: skip
                self._open.update(text="", logprobs=[])
            logprobs, self._logprobs = self._logprobs, []
            self._open["text"] += delta["content"]
            self._open["logprobs"] += logprobs
            events.append(self._event("response.output_text.delta", **self._at(), content_index=0,
                                      delta=delta["content"], logprobs=logprobs))  # fmt: skip
        for call in delta.get("tool_calls") or ():
            self._logprobs = []  # a call's tokens: its arguments carry no logprobs
            function = call["function"]
            if "id" in call:  # a new call
                events += self._close_item()
                item = {"type": "function_call", "id": item_id("fc"), "call_id": call["id"],
                        "name": function["name"], "arguments": "", "status": "in_progress"}  # fmt: skip
                events += self._open_item(item)
            if function.get("arguments"):
                self._open["arguments"] += function["arguments"]
                events.append(self._event("response.function_call_arguments.delta", **self._at(),
                                          delta=function["arguments"]))  # fmt: skip
        return events

    def _open_item(self, item: dict) -> list[bytes]:
        self._open = item
        return [self._event("response.output_item.added", output_index=len(self.items), item=dict(item))]

    def _close_item(self) -> list[bytes]:
        item, self._open = self._open, None
        if item is None:
            return []
        events = []
        if item["type"] == "message":
            text, logprobs = item.pop("text"), item.pop("logprobs")
            item["content"] = [_text_part(text, logprobs)]
            at = {"item_id": item["id"], "output_index": len(self.items), "content_index": 0}
            events.append(self._event("response.output_text.done", **at, text=text, logprobs=logprobs))
            events.append(self._event("response.content_part.done", **at, part=_text_part(text, logprobs)))
        elif item["type"] == "reasoning":
            text = item.pop("text")
            item["content"] = [_reasoning_part(text)]
            at = {"item_id": item["id"], "output_index": len(self.items), "content_index": 0}
            events.append(self._event("response.reasoning_text.done", **at, text=text))
            events.append(self._event("response.content_part.done", **at, part=_reasoning_part(text)))
        else:
            at = {"item_id": item["id"], "output_index": len(self.items)}
            events.append(self._event("response.function_call_arguments.done", **at, name=item["name"],
                                      arguments=item["arguments"]))  # fmt: skip
        item["status"] = "completed"
        self.items.append(item)
        events.append(self._event("response.output_item.done", output_index=len(self.items) - 1, item=item))
        return events

    def _at(self) -> dict:
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self.items)}

    def _output_message(self) -> ChatMessage:
        """The output as the assistant's message of the conversation a later request continues."""
        text = "".join(p["text"] for item in self.items if item["type"] == "message" for p in item["content"])
        calls = tuple(
            ToolCall(item["call_id"], item["name"], item["arguments"])
            for item in self.items
            if item["type"] == "function_call"
        )
        return ChatMessage("assistant", text, tool_calls=calls)

    def _logprob(self, token: int, logprob: float, top: list[tuple[int, float]]) -> dict:
        """A token's logprob as the Responses API shows it (the chat API's shape)."""
        lookup = self._names.lookup
        text, raw = lookup(token)
        tops = [{"token": lookup(t)[0], "logprob": clamp_logprob(lp), "bytes": lookup(t)[1]} for t, lp in top]
        return {"token": text, "logprob": clamp_logprob(logprob), "bytes": raw, "top_logprobs": tops}

    def _usage(self) -> dict:
        cached = min(self.num_cached_tokens, self.num_prompt_tokens)
        return {
            "input_tokens": self.num_prompt_tokens,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": self.num_output_tokens,
            "output_tokens_details": {"reasoning_tokens": self.num_reasoning_tokens},
            "total_tokens": self.num_prompt_tokens + self.num_output_tokens,
        }

    def _event(self, kind: str, **fields) -> bytes:
        payload = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        padded = self.obfuscate and kind.endswith(".delta")  # what carries the tokens (stream_obfuscation.py)
        data = obfuscated_json(payload) if padded else msgspec.json.encode(payload)
        return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


def _text_part(text: str, logprobs: list[dict] | None = None) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def _reasoning_part(text: str) -> dict:
    return {"type": "reasoning_text", "text": text}
