"""The Responses API's routes: ``POST /v1/responses`` (gateway/openai_responses.py), the stored responses (gateway/
response_store.py: ``GET``/``DELETE /v1/responses/{id}``, ``GET .../input_items``) and the background ones (gateway/
background_responses.py: a resumed stream, ``POST .../cancel``). A response naming a ``conversation`` continues it
and, once it ends, adds its input and output items to it (gateway/conversation_store.py). ``POST
/v1/responses/input_tokens`` counts a request's prompt tokens without running it. With ``--files-dir`` a background
response is recorded while it runs (gateway/background_journal.py), and one a stopped gateway left running is run
again when the gateway starts, under its id (``run_background``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import AsyncIterator

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response

from controlplane.frontend import FrontendError, invalid_param
from controlplane.gateway.api_keys import request_owner
from controlplane.gateway.background_journal import MAX_ATTEMPTS, BackgroundJournal, BackgroundRecord
from controlplane.gateway.background_responses import BackgroundJob, BackgroundResponses
from controlplane.gateway.conversation_store import ConversationFull, ConversationStore
from controlplane.gateway.errors import error_response, http_error_response
from controlplane.gateway.guarded import MAX_ECHOED_PATH_CHARS, guarded, json_response
from controlplane.gateway.openai_responses import ResponsesArgs, input_items, parse_responses
from controlplane.gateway.reply_stream import close_stream, named_events, respond
from controlplane.gateway.response_store import ResponseStore, input_items_page
from controlplane.gateway.responses_reply import ResponsesReply
from controlplane.gateway.sse import EventStreamResponse
from controlplane.gateway.structured_fields import check_structured
from controlplane.gateway.tokenize_routes import no_tokenizer
from transport.codec import clip
from transport.messages import ErrorCode, TokenChunk

log = logging.getLogger(__name__)

_FINISHED = ("completed", "incomplete")  # what a later request's previous_response_id may continue


class ResponsesRoutes:
    """The handlers, over the gateway's body reader, model naming and request start (gateway/app.py Gateway)."""

    def __init__(
        self,
        gateway,
        store: ResponseStore,
        max_background: int,
        max_background_per_owner: int,
        conversations: ConversationStore,
    ) -> None:
        self.gateway = gateway
        self.store = store
        self.conversations = conversations
        files_dir = gateway.config.files_dir
        self.journal = None if files_dir is None else BackgroundJournal(files_dir)  # running ones, on disk
        self.background = BackgroundResponses(
            store.put,
            max_background,
            max_ended_bytes=store.max_bytes,
            max_running_per_owner=max_background_per_owner,
            on_end=self._ended,
        )
        self.background.journal = self.journal  # its write errors on /metrics

    async def create(self, request: Request) -> Response:
        """OpenAI's ``POST /v1/responses``; a stored one is kept under its owner, a background one answered at once."""
        arrival_ns = time.monotonic_ns()
        gateway = self.gateway
        owner = request_owner(request)

        async def serve() -> Response:
            body = await gateway.read_body(request)
            parsed = self._parse(body, owner)
            args = parsed.generate
            if parsed.background:
                self._check_background(args.model)
            own_items = input_items(parsed.own_input)  # one id per item, wherever it is listed
            if args.sampling.structured_outputs is not None:
                await check_structured(args, gateway.grammar_limiter())
            on_done = self._on_done(owner, parsed, own_items)
            reply = ResponsesReply(gateway.model_name(args.model), parsed, on_done=on_done, names=gateway.token_text,
                                   reasoning_parser=gateway.config.reasoning_parser,
                                   obfuscation=gateway.config.stream_obfuscation)  # fmt: skip
            chunks = gateway.start(request, reply.id, args, arrival_ns)
            if not parsed.background:
                return await respond(request, chunks, reply, args.stream, named_events, reply.id)
            job = BackgroundJob(owner, reply, chunks, streamed=args.stream, input_items=own_items)
            try:
                self.background.submit(job)
            except FrontendError:
                await close_stream(chunks)
                raise
            if self.journal is not None:  # until it ends: a restart before then runs it again
                class_header, tenant = gateway.request_context(request)
                self.journal.save(
                    BackgroundRecord(
                        owner=owner,
                        response_id=reply.id,
                        created_at=reply.created_at,
                        body=body.decode("utf-8", "replace"),
                        traffic_class=class_header,
                        tenant=tenant,
                    )
                )
            headers = {"x-request-id": reply.id}
            if args.stream:
                return EventStreamResponse(self.background.events(job), on_close=_nothing, headers=headers)
            return json_response(reply.full_object(), headers=headers)

        return await guarded(request, serve)

    async def input_tokens(self, request: Request) -> Response:
        """OpenAI's ``POST /v1/responses/input_tokens`` (the SDK's ``client.responses.input_tokens.count``): the
        prompt tokens a ``POST /v1/responses`` of this body would have, ``{"object": "response.input_tokens",
        "input_tokens": N}``. The same body is read the same way (instructions, a previous response's or a
        conversation's items, tools, chat options, ``truncation: auto``), so N is that response's
        ``usage.input_tokens``; nothing is generated, stored or added to a conversation. 501 without a tokenizer."""
        gateway = self.gateway
        owner = request_owner(request)

        async def serve() -> Response:
            if gateway.tokenize_routes.tokenizer is None:
                return no_tokenizer()
            parsed = self._parse(await gateway.read_body(request), owner)
            args = parsed.generate
            count = gateway.tokenize_routes.count_chat(args.model, args.messages, args.tools, args.chat)
            kept = args.sampling.truncate_prompt_tokens  # truncation: auto keeps the prompt's last tokens
            if kept is not None:
                count = min(count, kept)
            return json_response({"object": "response.input_tokens", "input_tokens": count})

        return await guarded(request, serve)

    async def stored(self, request: Request) -> Response:
        """``GET`` a response's object (a background one's as it is now; with ``stream=true``, its events), or
        ``DELETE`` it (a running one is cancelled first); 404 when its owner has none of that id."""
        response_id = request.path_params["response_id"]
        owner = request_owner(request)
        if request.method == "DELETE":
            here = self.background.delete(owner, response_id)  # a running one cancelled, kept nowhere
            if self.store.delete(owner, response_id) or here:
                return json_response({"id": response_id, "object": "response.deleted", "deleted": True})
            return _no_stored_response(response_id)
        job = self.background.get(owner, response_id)
        query = request.query_params
        if query.get("stream", "false").lower() in ("true", "1"):
            return self._resumed_stream(job, response_id, query.get("starting_after"))
        if job is not None:
            return json_response(job.reply.full_object())
        stored = self.store.get(owner, response_id)
        return json_response(stored.object) if stored is not None else _no_stored_response(response_id)

    async def cancel(self, request: Request) -> Response:
        """``POST /v1/responses/{id}/cancel``: a queued or running background response, now cancelled; one already
        cancelled, as it is; another one, a 400 naming its status."""
        response_id = request.path_params["response_id"]
        owner = request_owner(request)
        cancelled = self.background.cancel(owner, response_id)
        if cancelled is not None:
            return json_response(cancelled)
        stored = self.store.get(owner, response_id)
        if stored is None:
            return _no_stored_response(response_id)
        status = stored.object.get("status")
        if status == "cancelled":
            return json_response(stored.object)
        if not stored.object.get("background"):
            message = "Only a response created with background: true can be cancelled"
        else:
            message = f"Cannot cancel a response that has ended: it is {status}"
        return error_response(FrontendError(ErrorCode.INVALID_REQUEST, message))

    async def input_items(self, request: Request) -> Response:
        """A stored response's input items as OpenAI's cursor page: ``order`` (desc, OpenAI's default, or asc),
        ``limit`` (1..100, default 20), ``after`` (the last item id of the page before)."""
        response_id = request.path_params["response_id"]
        owner = request_owner(request)
        job = self.background.get(owner, response_id)
        stored = self.store.get(owner, response_id)
        items = job.input_items if job is not None else stored.input_items if stored is not None else None
        if items is None:
            return _no_stored_response(response_id)
        try:
            return json_response(input_items_page(items, request.query_params))
        except FrontendError as err:
            return error_response(err)

    def _on_done(self, owner: str | None, parsed: ResponsesArgs, own_items: tuple[dict, ...]):
        """What a response does once it ends: kept in the store (a stored one not in the background: a background one
        is kept by its runner), its items added to its conversation; None: nothing."""
        keeps = parsed.store and not parsed.background
        if not keeps and parsed.conversation_id is None:
            return None

        def done(obj: dict, conversation) -> None:
            if keeps:
                self.store.put(owner, obj, conversation, own_items)
            if parsed.conversation_id is not None:
                self._record(owner, parsed.conversation_id, own_items + tuple(obj["output"]))

        return done

    async def run_background(self) -> None:
        """The background runner, until cancelled; with ``--files-dir``, first the responses a stopped gateway left
        running are run again (each queued at once, so a client reading it finds it)."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.background.run)
            if self.journal is not None:
                await self.background.started.wait()
                for record in self.journal.load():
                    try:
                        self._resume(record)
                    except Exception:  # one bad record must not stop the runner, nor the others
                        log.exception("gateway: background response %s could not be run again", record.response_id)
                        self.journal.forget(record.owner, record.response_id)

    def _resume(self, record: BackgroundRecord) -> None:
        """One recorded background response run again under its id, from the start (at most MAX_ATTEMPTS runs)."""
        assert self.journal is not None
        if record.attempts >= MAX_ATTEMPTS:
            self._give_up(record, f"the gateway stopped {record.attempts} times while it ran")
            return
        try:
            parsed = self._parse(record.body.encode(), record.owner)
        except FrontendError as err:
            self._give_up(record, f"its request could not be read again: {err.message}")
            return
        record = msgspec.structs.replace(record, attempts=record.attempts + 1)
        self.journal.save(record)
        own_items = input_items(parsed.own_input)
        args = parsed.generate
        gateway = self.gateway
        on_done = self._on_done(record.owner, parsed, own_items)
        reply = ResponsesReply(
            gateway.model_name(args.model),
            parsed,
            on_done=on_done,
            names=gateway.token_text,
            response_id=record.response_id,
            created_at=record.created_at,
            reasoning_parser=gateway.config.reasoning_parser,
            obfuscation=gateway.config.stream_obfuscation,
        )
        chunks = self._resumed_chunks(record, reply)
        self.background.submit(BackgroundJob(record.owner, reply, chunks, streamed=False, input_items=own_items), True)
        log.info("gateway: background response %s run again (run %d)", reply.id, record.attempts)

    async def _resumed_chunks(self, record: BackgroundRecord, reply: ResponsesReply) -> AsyncIterator[TokenChunk]:
        """A resumed response's generation, once some node serves (a restarted control plane's nodes join after
        it starts)."""
        gateway = self.gateway
        wait = getattr(gateway.frontend, "wait_for_models", None)
        if not gateway.frontend.model_names and wait is not None:
            await wait(gateway.config.models_wait_s)
        args = reply.parsed.generate
        reply.model = gateway.model_name(args.model)
        chunks = gateway.start_for(
            reply.id, args, time.monotonic_ns(), class_header=record.traffic_class, tenant=record.tenant
        )
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            await close_stream(chunks)

    def _give_up(self, record: BackgroundRecord, why: str) -> None:
        """A recorded response not run again: kept as failed, saying why."""
        assert self.journal is not None
        log.warning("gateway: background response %s not run again: %s", record.response_id, why)
        try:
            model = msgspec.json.decode(record.body.encode()).get("model")
        except (msgspec.DecodeError, AttributeError):
            model = None
        obj = {
            "id": record.response_id,
            "object": "response",
            "created_at": record.created_at,
            "status": "failed",
            "background": True,
            "model": model if isinstance(model, str) else self.gateway.model_name(None),
            "output": [],
            "error": {"code": "server_error", "message": f"The response was not run again after a restart: {why}"},
            "incomplete_details": None,
            "usage": None,
        }
        self.store.put(record.owner, obj, ())
        self.background.ended["failed"] += 1
        self.journal.forget(record.owner, record.response_id)

    def _ended(self, job: BackgroundJob) -> None:
        """A background response ended: its record goes."""
        if self.journal is not None:
            self.journal.forget(job.owner, job.reply.id)

    def _parse(self, body: bytes, owner: str | None) -> ResponsesArgs:
        """A body read as a Responses request, its previous response and conversation its owner's."""
        gateway = self.gateway
        parsed = parse_responses(
            body,
            default_max_tokens=gateway.config.chat_max_tokens,
            tool_call_parser=gateway.config.tool_call_parser,
            defaults=gateway.config.sampling_defaults,
            previous=lambda response_id: self._previous(owner, response_id),
            context_length=self._context_length,
            conversation_items=lambda conversation_id: self._conversation_items(owner, conversation_id),
        )
        return dataclasses.replace(parsed, generate=gateway.with_template_defaults(parsed.generate))

    def _previous(self, owner: str | None, response_id: str):
        """What ``previous_response_id`` continues: a finished response's conversation; a string, the status of one
        that did not finish; None, its owner has none of that id."""
        job = self.background.get(owner, response_id)
        stored = self.store.get(owner, response_id) if job is None or job.done else None
        if stored is None:
            return None if job is None else job.status
        status = stored.object.get("status")
        return stored.conversation if status in _FINISHED else status

    def _conversation_items(self, owner: str | None, conversation_id: str) -> tuple[dict, ...] | None:
        conversation = self.conversations.get(owner, conversation_id)
        return None if conversation is None else tuple(conversation.items)

    def _record(self, owner: str | None, conversation_id: str, items: tuple[dict, ...]) -> None:
        """A response's input and output items added to its conversation, once it ends; one the conversation cannot
        take (deleted meanwhile, or at its byte bound) is logged and counted: the response itself is answered."""
        try:
            if self.conversations.add_items(owner, conversation_id, items) is not None:
                return
            why = "it was deleted"
        except ConversationFull as full:
            why = str(full)
        self.conversations.num_unrecorded += 1
        log.warning("gateway: a response's items were not added to conversation %s: %s", conversation_id, why)

    def _context_length(self, model: str | None) -> int | None:
        """The longest context a node serving ``model`` takes (None: unknown, or no node yet)."""
        lengths = getattr(self.gateway.frontend, "model_max_len", None)
        return lengths(self.gateway.model_name(model) or None) if lengths is not None else None

    def _check_background(self, model: str | None) -> None:
        """A background response is answered before its first token: what would refuse it later is refused now."""
        if self.store.max_responses == 0:
            raise invalid_param("background", "needs the response store, which this gateway has turned off")
        if model is not None and model not in self.gateway.model_ids():
            raise FrontendError(ErrorCode.UNKNOWN_MODEL, f"The model '{model}' does not exist", param="model")

    def _resumed_stream(self, job: BackgroundJob | None, response_id: str, after: str | None) -> Response:
        if job is None or not job.streamed:
            message = "only a background response created with stream: true, while it is kept, streams its events"
            return error_response(invalid_param("stream", message))
        starting_after = None
        if after is not None:
            try:
                starting_after = int(after)
            except ValueError:
                starting_after = -2
            if starting_after < -1:
                shown = clip(after, MAX_ECHOED_PATH_CHARS)
                return error_response(invalid_param("starting_after", f"must be a sequence number, got '{shown}'"))
        events = self.background.events(job, starting_after)
        return EventStreamResponse(events, on_close=_nothing, headers={"x-request-id": response_id})


async def _nothing() -> None:
    """A subscriber's stream closes nothing upstream: the response runs on."""


def _no_stored_response(response_id: str) -> Response:
    shown = clip(response_id, MAX_ECHOED_PATH_CHARS)
    return http_error_response(404, f"No stored response has the id '{shown}'", code="not_found")
