"""The OpenAI-compatible HTTP gateway: a Starlette app in front of a Frontend (the control plane).

    POST /v1/completions          stream=false → one JSON object; stream=true → SSE, then [DONE]
    POST /v1/chat/completions     (same); with ``store: true`` the ended completion is kept (chat_completion_store.py)
    GET  /v1/chat/completions     the stored ones; GET/POST/DELETE .../{id}, GET .../{id}/messages
                                  (chat_completion_routes.py)
    POST /v1/messages             Anthropic's Messages API over the same engine requests (anthropic_messages.py;
                                  its errors in Anthropic's shape, its stream in Anthropic's events)
    POST /v1/messages/count_tokens  its prompt's tokens, as /tokenize counts them
    /v1/messages/batches          Anthropic's Message Batches API (message_batch_routes.py), run as OpenAI's batches
    POST /v1/embeddings           a prompt's embedding per input (openai_embeddings.py; engine/embeddings.py)
    POST /v1/responses            OpenAI's Responses API over the same engine requests (openai_responses.py; its
                                  stream in the Responses API's named events; responses_routes.py)
    GET, DELETE /v1/responses/{id}  a stored response (response_store.py: bounded, per owner); GET
                                  /v1/responses/{id}/input_items its request's input items (a cursor page)
    POST /v1/responses/{id}/cancel  a background response stopped (background_responses.py: ``background: true``
                                  answered at once, run by serve_gateway or the app's lifespan)
    POST /v1/responses/input_tokens  OpenAI's count of a Responses request's prompt tokens (responses_routes.py)
    /v1/conversations             OpenAI's Conversations API (conversation_routes.py): conversations and their items
                                  (conversation_store.py), which a response naming one continues and adds to
    /v1/files, /v1/batches        OpenAI's Files and Batch APIs (batch_routes.py): a JSONL file of requests run in
                                  the background, each through its own route above (batch_runner.py, run by
                                  serve_gateway or the app's lifespan); results as output and error files
    /v1/uploads                   OpenAI's Uploads API: a file in parts, completed into the files (upload_routes.py)
    GET  /v1/models               the frontend's model_names as OpenAI's list (before any node has joined it
                                  waits for one, at most ``models_wait_s``), then the aliases of served models
                                  (controlplane/model_aliases.py: ``parent`` names the model; replies name it too)
    GET  /v1/models/{model}       one of them, or 404 model_not_found (both in Anthropic's shape for a request with
                                  ``anthropic-version``: anthropic_models.py)
    POST /tokenize, /detokenize   as vLLM serves them (gateway/tokenize_routes.py)
    POST /invocations             SageMaker's path: the route the body's shape names, as vLLM picks it
                                  (gateway/invocations.py); GET/POST /ping is /health
    (LoRA adapters are listed too, and POST /v1/load_lora_adapter + /v1/unload_lora_adapter exist when the
    frontend allows run-time updates: lora_routes.py)
    POST /score, /v1/score        vLLM's score API: text pairs' cosine similarities (gateway/score_rerank.py)
    POST /pooling                 vLLM's pooling API: the embeddings' vectors in its shape (openai_embeddings.py)
    POST /rerank, /v1/rerank, /v2/rerank  vLLM's rerank API (Jina's, Cohere's shape): documents by relevance
    GET  /health                  frontend.health(): 200 when status is "ok", else 503 (GET or POST /ping too,
                                  SageMaker's path, as vLLM serves it)
    GET  /version                 {"version": this package's}
    GET  /load                    vLLM's {"server_load": N}: generation requests being answered, background
                                  responses running (gateway/server_load.py)
    POST /reset_prefix_cache      vLLM's: every node forgets its prefix cache (controlplane/prefix_reset.py)
    POST /start_profile, /stop_profile  vLLM's, with --profiler-config: each node's profiler (profile_routes.py)
    GET /tokenizer_info           vLLM's, with --enable-tokenizer-info-endpoint (tokenizer_info.py)
    POST /sleep, /wake_up, GET /is_sleeping  vLLM's, with --enable-sleep-mode: nodes' sleep mode (sleep_routes.py)
    POST /inference/v1/generate   vLLM's tokens in, tokens out; /v1/(chat/)completions/render (tokens_api.py)
    GET  /metrics                 the metrics_app given to create_app, if any
    GET  /metrics/targets         the sd_app given (Prometheus HTTP service discovery of the agents), if any
    (every GET route answers HEAD too; every route answers OPTIONS: gateway/http_methods.py; a browser's CORS
    preflight and headers, for ``cors_allowed_origins``: Starlette's CORSMiddleware, outside the key check)
    (a frontend that traces, ``request_spans``, gives every request but ``untraced_paths`` an HTTP server span,
    outermost: gateway/http_span.py; the request's ``llm_request`` span is its child)
    (while the frontend drains, ``draining``, a new request is answered 503 before any route but the probes':
    gateway/shutdown_gate.py; ``app.state.http_in_flight`` counts those being answered)
    (each request but ``access_log_exclude``'s gets an access log line once answered, outermost: access_log.py)

Clocks start when a generation request arrives here (``arrival_ns``, before its body is read): the node's
TTFT and E2E count from then (agent/request_age.py), so they agree with a client's within one network hop.
``n`` choices are n engine requests (Frontend.generate ``num_choices``), merged into one reply; a completion's batch
of prompts is n per prompt (``prompts``).

A generation request: read the body (capped) → parse it (any bad input: 400) → a structured-output constraint
compiled in a worker thread (one that does not: 400 naming the field) → frontend.generate →
wait for the first chunk, so a refusal still gets its own status (404, 429 + Retry-After, 503 …) →
reply (gateway/reply_stream.py). After the first SSE event a failure is sent as an error event. A client that
disconnects at any point closes the frontend's iterator, which cancels the request upstream.

Every error reply has OpenAI's JSON error body: the gateway's refusals, the router's 404/405, a body
not read within ``request_read_timeout_s`` (408, and the connection is closed), an unexpected exception
(500). Serving it with ``http_server.serve_gateway`` adds the same for the HTTP server's own errors.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from contextlib import asynccontextmanager

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from controlplane.frontend import Frontend, FrontendError, choice_request_ids, invalid_param
from controlplane.gateway.access_log import AccessLog
from controlplane.gateway.anthropic_messages import MessagesReply, parse_count_tokens, parse_messages
from controlplane.gateway.anthropic_messages import error_body as anthropic_error_body
from controlplane.gateway.anthropic_models import VERSION_HEADER, anthropic_model, anthropic_models_page
from controlplane.gateway.api_keys import ApiKeyConfig, ApiKeyMiddleware, ApiKeyRing, request_owner, request_tenant
from controlplane.gateway.batch_journal import BatchJournal
from controlplane.gateway.batch_routes import BatchRoutes
from controlplane.gateway.batch_runner import BatchRunner
from controlplane.gateway.batch_span import BatchSpans
from controlplane.gateway.beam_search import check_beam_request
from controlplane.gateway.beam_search_route import beam_search_reply
from controlplane.gateway.chat_completion_journal import ChatCompletionJournal
from controlplane.gateway.chat_completion_routes import ChatCompletionRoutes
from controlplane.gateway.chat_completion_store import ChatCompletionStore
from controlplane.gateway.conversation_journal import ConversationJournal
from controlplane.gateway.conversation_routes import ConversationRoutes
from controlplane.gateway.conversation_store import ConversationStore
from controlplane.gateway.embedding_routes import EmbeddingRoutes
from controlplane.gateway.errors import error_response, http_error_response
from controlplane.gateway.file_store import FileStore
from controlplane.gateway.gateway_config import GatewayConfig
from controlplane.gateway.guarded import MAX_ECHOED_PATH_CHARS, guarded, json_response
from controlplane.gateway.http_methods import OptionsMiddleware
from controlplane.gateway.http_span import HttpSpans
from controlplane.gateway.idle_sleep_middleware import IdleSleepMiddleware
from controlplane.gateway.invocations import invocations
from controlplane.gateway.lora_routes import lora_model_objects, lora_routes
from controlplane.gateway.message_batch_routes import MessageBatchRoutes
from controlplane.gateway.openai_reply import OpenAIReply, chat_reply_role
from controlplane.gateway.openai_schema import GenerateArgs, parse_chat, parse_completion, with_template_defaults
from controlplane.gateway.operator_routes import operator_routes
from controlplane.gateway.rate_limit_headers import HEADER_NAMES as RATE_LIMIT_HEADERS
from controlplane.gateway.rate_limit_headers import RateLimitHeaders
from controlplane.gateway.reasoning_parsers import reasoning_parser_for
from controlplane.gateway.reply_stream import named_events, openai_events, respond, until_disconnect
from controlplane.gateway.request_body import answered, read_body
from controlplane.gateway.request_ids import request_ids
from controlplane.gateway.response_journal import ResponseJournal
from controlplane.gateway.response_store import ResponseStore
from controlplane.gateway.responses_routes import ResponsesRoutes
from controlplane.gateway.server_load import ServerLoad, ServerLoadMiddleware
from controlplane.gateway.shutdown_gate import HttpInFlight, ShutdownGate
from controlplane.gateway.stream_obfuscation import obfuscates
from controlplane.gateway.structured_fields import GRAMMAR_THREADS, check_structured
from controlplane.gateway.system_fingerprint import SystemFingerprints
from controlplane.gateway.token_text import TokenText
from controlplane.gateway.tokenize_routes import TokenizeRoutes, no_tokenizer
from controlplane.gateway.tokens_api import tokens_routes
from controlplane.gateway.upload_routes import UploadRoutes
from controlplane.model_aliases import aliases_of, resolve_model, served_aliases
from transport.codec import clip
from transport.messages import ErrorCode
from transport.package_version import package_version
from transport.trace_context import trace_headers

log = logging.getLogger(__name__)

CLASS_HEADER = "x-zoo-class"  # a request's traffic class (controlplane/cells.py), like the body's traffic_class
MAX_CLASS_CHARS = 64
# what a page's script may read of a reply
CORS_EXPOSED_HEADERS = ("x-request-id", "retry-after", "retry-after-ms", *RATE_LIMIT_HEADERS)


def create_app(
    frontend: Frontend,
    *,
    metrics_app: ASGIApp | None = None,
    config: GatewayConfig | None = None,
    api_keys: ApiKeyConfig | ApiKeyRing | None = None,
    sd_app: ASGIApp | None = None,
) -> Starlette:
    """The gateway's ASGI app; serve it with e.g. ``uvicorn.Server(uvicorn.Config(app, ...))``.

    api_keys: require ``Authorization: Bearer`` with one of these keys (gateway/api_keys.py); None: open.
    sd_app: served at /metrics/targets (Prometheus HTTP service discovery, observe/prometheus_sd.py), if given."""
    config = config or GatewayConfig()
    gateway = Gateway(frontend, config)
    handlers = {HTTPException: _handle_http_exception, Exception: _handle_unexpected}
    batched = [  # the routes a batch's requests may name (gateway/batches.py)
        Route("/v1/completions", gateway.handle_completions, methods=["POST"]),
        Route("/v1/chat/completions", gateway.handle_chat_completions, methods=["POST"]),
        Route("/v1/embeddings", gateway.embeddings.handle_embeddings, methods=["POST"]),
        Route("/v1/responses", gateway.responses.create, methods=["POST"]),
        Route("/v1/score", gateway.embeddings.handle_score, methods=["POST"]),  # vLLM's run_batch takes these two too
        Route("/v1/rerank", gateway.embeddings.handle_rerank, methods=["POST"]),
        Route("/v1/messages", gateway.handle_messages, methods=["POST"]),  # Anthropic's message batches run here
    ]
    files = FileStore(config.files_max, config.files_store_bytes, config.files_dir)
    journal = None if config.files_dir is None else BatchJournal(config.files_dir)
    runner = BatchRunner(Starlette(routes=batched, exception_handlers=handlers), files, config.batches, journal)
    runner.draining = lambda: bool(getattr(frontend, "draining", False))  # held while the control plane drains
    request_spans = getattr(frontend, "request_spans", None)  # a control plane that traces: batches get spans too
    if request_spans is not None:
        runner.spans = BatchSpans(request_spans.export, request_spans.sample_ratio)
    batch_routes = BatchRoutes(
        files,
        runner,
        max_body_bytes=config.max_body_bytes,
        upload_max_bytes=config.files_upload_max_bytes,
        read_timeout_s=config.request_read_timeout_s,
        upload_concurrency=config.files_upload_concurrency,
    )
    routes = [
        *batched,
        Route("/v1/messages/count_tokens", gateway.handle_count_tokens, methods=["POST"]),
        Route("/score", gateway.embeddings.handle_score, methods=["POST"]),
        Route("/pooling", gateway.embeddings.handle_pooling, methods=["POST"]),  # vLLM's pooling API
        *(Route(path, gateway.embeddings.handle_rerank, methods=["POST"]) for path in ("/rerank", "/v2/rerank")),
        Route("/v1/responses/input_tokens", gateway.responses.input_tokens, methods=["POST"]),
        Route("/v1/responses/{response_id}", gateway.responses.stored, methods=["GET", "DELETE"]),
        Route("/v1/responses/{response_id}/input_items", gateway.responses.input_items, methods=["GET"]),
        Route("/v1/responses/{response_id}/cancel", gateway.responses.cancel, methods=["POST"]),
        Route("/v1/models", gateway.handle_models, methods=["GET"]),
        Route("/v1/models/{model:path}", gateway.handle_model, methods=["GET"]),
        Route("/tokenize", gateway.handle_tokenize, methods=["POST"]),
        Route("/detokenize", gateway.handle_detokenize, methods=["POST"]),
        Route("/health", gateway.handle_health, methods=["GET"]),
        Route("/ping", gateway.handle_health, methods=["GET", "POST"]),
        Route("/version", gateway.handle_version, methods=["GET"]),
        Route("/load", gateway.handle_load, methods=["GET"]),  # vLLM's (gateway/server_load.py)
        Route("/reset_prefix_cache", gateway.handle_reset_prefix_cache, methods=["POST"]),  # vLLM's, for benchmarks
        Route("/invocations", invocations({r.path: r.endpoint for r in batched}, gateway.read_body), methods=["POST"]),
    ]
    routes += batch_routes.routes() + MessageBatchRoutes(batch_routes).routes()
    uploads = UploadRoutes(batch_routes, config.uploads_pending_bytes, config.files_dir)  # OpenAI's Uploads
    routes += uploads.routes()
    routes += gateway.conversations.routes() + gateway.chat_completions.routes()
    routes += lora_routes(frontend)
    routes += operator_routes(frontend, config)  # vLLM's profile, sleep and tokenizer info routes, when turned on
    routes[:0] = tokens_routes(gateway)  # vLLM's tokens API (tokens_api.py); first: .../completions/render is no id
    if metrics_app is not None:
        routes.append(Route("/metrics", _ExactPathApp(metrics_app), methods=["GET"]))
    if sd_app is not None:
        routes.append(Route("/metrics/targets", _ExactPathApp(sd_app), methods=["GET"]))
    app = Starlette(routes=routes, exception_handlers=handlers, lifespan=_lifespan)  # it runs app.state.runs
    app.state.batches, app.state.batch_routes, app.state.uploads = runner, batch_routes, uploads.uploads
    app.state.runs = (runner.run, gateway.responses.run_background)  # batches, background responses
    app.state.responses = gateway.responses  # its store and background runner (observe/responses_metrics.py)
    app.state.chat_completions = gateway.chat_completions.store  # the stored chat completions (the same)
    app.state.api_keys = ApiKeyRing.of(api_keys)  # None: an open gateway
    if getattr(frontend, "idle_sleep", None) is not None:  # vLLM's --sleep-idle-ttl (idle_sleep_middleware.py);
        app.add_middleware(IdleSleepMiddleware, idle=frontend.idle_sleep)  # innermost: a refused key wakes nothing
    if api_keys is not None:  # checked before any route, so an unknown path without a key is a 401 too
        app.add_middleware(RateLimitHeaders, frontend=frontend)  # inside the key check: it reads the key's tenant
        app.add_middleware(ApiKeyMiddleware, config=app.state.api_keys)  # a SIGHUP may replace its keys
    app.add_middleware(ServerLoadMiddleware, load=gateway.load)  # GET /load's count (gateway/server_load.py)
    app.state.http_in_flight = HttpInFlight()  # outside the key check: a draining gateway refuses every new request
    app.add_middleware(
        ShutdownGate, frontend=frontend, in_flight=app.state.http_in_flight, open_paths=config.open_while_draining
    )
    app.add_middleware(OptionsMiddleware, routes=routes)  # before the key check: a preflight carries no key
    if config.cors_allowed_origins:  # outermost: a browser's preflight is answered here, every reply gets its headers
        app.add_middleware(
            CORSMiddleware, allow_origins=list(config.cors_allowed_origins),
            allow_methods=list(config.cors_allowed_methods), allow_headers=list(config.cors_allowed_headers),
            allow_credentials=config.cors_allow_credentials, expose_headers=list(CORS_EXPOSED_HEADERS),
        )  # fmt: skip
    if request_spans is not None:  # outermost: the span covers what every other layer does, a 401 or a preflight too
        app.add_middleware(
            HttpSpans,
            export=request_spans.export,
            sample_ratio=request_spans.sample_ratio,
            untraced_paths=config.untraced_paths,
        )
    if config.access_log:  # outermost of all: the line times what every layer did, a 401, a 503 or a span's export
        app.add_middleware(AccessLog, exclude=config.access_log_exclude)
    return app


class Gateway:
    """The route handlers; holds no per-request state."""

    def __init__(self, frontend: Frontend, config: GatewayConfig) -> None:
        self.frontend = frontend
        self.config = config
        self.created_s = int(time.time())
        self.fingerprints = SystemFingerprints(config.fingerprint, getattr(frontend, "node_hello", None))
        self.token_text = TokenText(getattr(frontend, "tokenizer", None))  # logprobs' token text and bytes
        self._grammar_limiter: anyio.CapacityLimiter | None = None  # check_structured's threads (made in the loop)
        self.tokenize_routes = TokenizeRoutes(frontend, config.tool_call_parser, config.default_chat_template_kwargs)
        self.embeddings = EmbeddingRoutes(self)  # /v1/embeddings, vLLM's score and rerank
        responses_journal = None if config.files_dir is None else ResponseJournal(config.files_dir)  # on disk too
        store = ResponseStore(
            config.responses_store_max,
            config.responses_store_bytes,
            responses_journal,
            max_share=config.responses_owner_share,
        )
        store.load()  # those a gateway before this one kept
        background_max = (config.responses_background_max, config.responses_background_max_per_owner)
        journal = None if config.files_dir is None else ConversationJournal(config.files_dir)  # kept on disk too
        bounds = (config.conversations_max, config.conversations_bytes)
        conversations = ConversationStore(*bounds, journal, max_share=config.conversations_owner_share)
        conversations.load()  # those a gateway before this one kept
        self.conversations = ConversationRoutes(self.read_body, conversations)  # /v1/conversations
        self.responses = ResponsesRoutes(self, store, *background_max, conversations)  # /v1/responses
        self.load = ServerLoad(lambda: self.responses.background.num_running)  # GET /load
        chat_journal = None if config.files_dir is None else ChatCompletionJournal(config.files_dir)
        chat_bounds = (config.chat_completions_store_max, config.chat_completions_store_bytes)
        chat_store = ChatCompletionStore(*chat_bounds, chat_journal, max_share=config.chat_completions_owner_share)
        chat_store.load()  # those a gateway before this one kept
        self.chat_completions = ChatCompletionRoutes(self.read_body, chat_store)  # stored ones: GET, list, update

    async def handle_completions(self, request: Request) -> Response:
        return await self._handle_generate(request, chat=False)

    async def handle_chat_completions(self, request: Request) -> Response:
        return await self._handle_generate(request, chat=True)

    async def handle_messages(self, request: Request) -> Response:
        """Anthropic's ``POST /v1/messages`` (gateway/anthropic_messages.py)."""
        arrival_ns = time.monotonic_ns()

        async def serve() -> Response:
            body = await self.read_body(request)
            reasoning = self.config.reasoning_parser is not None  # a thinking budget enforced (else only taken)
            args = self.with_template_defaults(
                parse_messages(body, self.config.tool_call_parser, self.config.sampling_defaults, reasoning)
            )
            if args.sampling.structured_outputs is not None:
                await check_structured(args, self.grammar_limiter())
            parser = reasoning_parser_for(self.config.reasoning_parser, args.template_kwargs)
            reply = MessagesReply(self.model_name(args.model), args.tool_plan, reasoning=parser is not None)
            chunks = self.start(request, reply.id, args, arrival_ns)
            return await respond(
                request, chunks, reply, args.stream, named_events, reply.id, ("x-request-id", "request-id")
            )

        return await guarded(request, serve, anthropic_error_body)

    async def handle_count_tokens(self, request: Request) -> Response:
        """Anthropic's ``POST /v1/messages/count_tokens``: ``{"input_tokens": N}`` (501 without a tokenizer)."""

        async def serve() -> Response:
            if self.tokenize_routes.tokenizer is None:
                return no_tokenizer()
            body = await self.read_body(request)
            model, messages, tools, chat = parse_count_tokens(body, self.config.tool_call_parser)
            chat = with_template_defaults(chat, self.config.default_chat_template_kwargs)
            return json_response({"input_tokens": self.tokenize_routes.count_chat(model, messages, tools, chat)})

        return await guarded(request, serve, anthropic_error_body)

    def start(self, request: Request, request_id: str, args: GenerateArgs, arrival_ns: int, **more):
        """frontend.generate for a parsed request (``more``: the prompt fields and choices a completion adds)."""
        class_header, tenant = self.request_context(request)
        traced = trace_headers(request.headers)  # the caller's W3C trace context: the parent of the request's span
        return self.start_for(
            request_id, args, arrival_ns, class_header=class_header, tenant=tenant, traced=traced, **more
        )

    @staticmethod
    def request_context(request: Request) -> tuple[str | None, str | None]:
        """What ``start`` reads of a request beside its body: its x-zoo-class header, its API key's tenant."""
        return request.headers.get(CLASS_HEADER), request_tenant(request)

    def start_for(
        self,
        request_id: str,
        args: GenerateArgs,
        arrival_ns: int,
        *,
        class_header: str | None,
        tenant: str | None,
        traced: dict[str, str] | None = None,
        **more,
    ):
        """``start`` with what it reads of a request given (a background response run again after a restart)."""
        # the class: the x-zoo-class header, else the body's traffic_class (a tenant's own class wins upstream)
        traffic_class = class_header or args.traffic_class or "default"
        return self.frontend.generate(
            request_id,
            model=args.model,
            messages=args.messages,
            sampling=args.sampling,
            arrival_ns=arrival_ns,
            traffic_class=clip(traffic_class, MAX_CLASS_CHARS),
            **({"tenant": tenant} if tenant else {}),
            **({"tools": args.tools} if args.tools else {}),
            **({"chat": args.chat} if args.chat else {}),  # vLLM's chat options (backends/chat_render.py)
            **({"trace_headers": traced} if traced else {}),
            **({"priority": args.priority} if args.priority else {}),  # vLLM's: lower runs earlier
            **({"return_prompt_token_ids": True} if args.return_token_ids else {}),  # vLLM's return_token_ids
            **more,
        )

    async def handle_models(self, request: Request) -> Response:
        names = self.frontend.model_names
        wait_for_models = getattr(self.frontend, "wait_for_models", None)
        if not names and wait_for_models is not None:
            names = await until_disconnect(request, wait_for_models(self.config.models_wait_s))
        if VERSION_HEADER in request.headers:  # the anthropic SDK: Anthropic's page (gateway/anthropic_models.py)

            async def serve() -> Response:
                return json_response(anthropic_models_page(self._model_objects(names), request.query_params))

            return await guarded(request, serve, anthropic_error_body)
        return json_response({"object": "list", "data": self._model_objects(names)})

    async def handle_tokenize(self, request: Request) -> Response:
        return await self._handle_body(request, self.tokenize_routes.tokenize)

    async def handle_detokenize(self, request: Request) -> Response:
        return await self._handle_body(request, self.tokenize_routes.detokenize)

    async def _handle_body(self, request: Request, reply) -> Response:
        async def serve() -> Response:
            return reply(await self.read_body(request))

        return await answered(serve)

    async def handle_model(self, request: Request) -> Response:
        name = request.path_params["model"]
        found = next((obj for obj in self._model_objects(self.frontend.model_names) if obj["id"] == name), None)
        if VERSION_HEADER in request.headers:  # the anthropic SDK: Anthropic's ModelInfo, its error shape
            if found is None:
                return json_response(anthropic_error_body(_unknown_model(name)), status=404)
            return json_response(anthropic_model(found))
        return error_response(_unknown_model(name)) if found is None else json_response(found)

    async def handle_health(self, request: Request) -> Response:
        try:
            health = self.frontend.health()
        except Exception:
            log.exception("gateway: frontend.health() failed")
            health = {"status": "error"}
        return json_response(health, status=200 if health.get("status") == "ok" else 503)

    async def handle_version(self, request: Request) -> Response:
        return json_response({"version": package_version()})

    async def handle_load(self, request: Request) -> Response:
        return json_response({"server_load": self.load.value})

    async def handle_reset_prefix_cache(self, request: Request) -> Response:
        """vLLM's POST /reset_prefix_cache for the fleet (controlplane/prefix_reset.py): 200, as vLLM's, with each
        node's answer ({"ok", "num_blocks"}; null: none came) and ``reset``: whether every node forgot its cache."""
        reset = getattr(self.frontend, "reset_prefix_cache", None)
        if reset is None:
            return http_error_response(404, "This server keeps no prefix cache it can reset", code="not_found")
        nodes = await until_disconnect(request, reset())
        all_reset = all(answer is not None and answer["ok"] for answer in nodes.values())
        return json_response({"reset": all_reset, "nodes": nodes})

    def model_name(self, asked: str | None) -> str:
        """The model a reply names: the one asked for (an alias: the model it stands for, as vLLM's several
        --served-model-names and OpenAI's aliases answer), else the fleet's default ("" before any node joined)."""
        return resolve_model(self.model_aliases, asked) or (self.frontend.model_names or [""])[0]

    @property
    def model_aliases(self) -> Mapping[str, str]:
        """Other names clients may give as ``model`` (controlplane/model_aliases.py; {}: a frontend without)."""
        return aliases_of(self.frontend)

    def model_ids(self) -> set[str]:
        """The names a request's ``model`` may give now: what /v1/models lists."""
        return {obj["id"] for obj in self._model_objects(self.frontend.model_names)}

    def _model_objects(self, names: list[str]) -> list[dict]:
        """/v1/models' list: the served models, the LoRA adapters, then each alias of one of them, as its
        target's object under the alias's id with ``parent`` naming the target."""
        data = [self._model_object(name) for name in names]
        data += lora_model_objects(self.frontend, self.created_s, self.config.owned_by)
        by_id = {obj["id"]: obj for obj in data}
        return data + [{**by_id[t], "id": a, "parent": t} for a, t in served_aliases(self.model_aliases, by_id)]

    def _model_object(self, name: str) -> dict:
        """OpenAI's model object with vLLM's ModelCard fields: ``root``, ``parent`` (None: a base model) and
        ``max_model_len`` (the longest context a node serving it takes; clients size requests by it)."""
        max_len = getattr(self.frontend, "model_max_len", None)
        max_len = max_len(name) if max_len is not None else getattr(self.frontend, "max_model_len", None)
        return {"id": name, "object": "model", "created": self.created_s, "owned_by": self.config.owned_by,
                "root": name, "parent": None, "max_model_len": max_len}  # fmt: skip

    async def _handle_generate(self, request: Request, *, chat: bool) -> Response:
        arrival_ns = time.monotonic_ns()  # the request's clocks start here (its headers are in)

        async def serve() -> Response:
            body = await self.read_body(request)
            if chat:
                args = parse_chat(
                    body,
                    default_max_tokens=self.config.chat_max_tokens,
                    tool_call_parser=self.config.tool_call_parser,
                    defaults=self.config.sampling_defaults,
                )
                args = self.with_template_defaults(args)
            else:
                defaults, max_tokens = self.config.sampling_defaults, self.config.default_completion_max_tokens
                args = parse_completion(body, default_max_tokens=max_tokens, defaults=defaults)
            if args.sampling.thinking_token_budget is not None and self.config.reasoning_parser is None:
                message = "needs a reasoning model: this server was started without --reasoning-parser"
                raise invalid_param("thinking_token_budget", message)
            if args.sampling.structured_outputs is not None:
                await check_structured(args, self.grammar_limiter())
            return await self._generate(request, args, chat=chat, arrival_ns=arrival_ns)

        return await guarded(request, serve)

    def with_template_defaults(self, args: GenerateArgs) -> GenerateArgs:
        """A chat's args with the server's default template variables under its own (openai_schema.py)."""
        defaults = self.config.default_chat_template_kwargs
        return dataclasses.replace(args, chat=with_template_defaults(args.chat, defaults)) if defaults else args

    def grammar_limiter(self) -> anyio.CapacityLimiter:
        """The worker threads that compile requests' constraints: ``GRAMMAR_THREADS`` at once (structured_fields.py)."""
        if self._grammar_limiter is None:
            self._grammar_limiter = anyio.CapacityLimiter(GRAMMAR_THREADS)
        return self._grammar_limiter

    async def read_body(self, request: Request) -> bytes:
        return await read_body(request, self.config.max_body_bytes, self.config.request_read_timeout_s)

    async def _generate(self, request: Request, args: GenerateArgs, *, chat: bool, arrival_ns: int, answer=None):
        """``answer(reply, ids)``: another API's (reply, events) around the OpenAI reply (gateway/tokens_api.py)."""
        ids = request_ids(request, "chatcmpl" if chat else "cmpl")  # a caller's X-Request-Id, as vLLM takes it
        role = chat_reply_role(
            args.messages, args.chat is None or args.chat.add_generation_prompt, self.config.response_role
        )
        if args.beam is not None:  # vLLM's use_beam_search: its steps through the fleet (gateway/beam_search_route.py)
            check_beam_request(args, args.beam)
            return await beam_search_reply(self, request, args, args.beam, ids, arrival_ns, chat=chat, role=role)
        model = self.model_name(args.model)
        reply = OpenAIReply(
            chat=chat,
            request_id=ids.reply,
            model=model,
            created=int(time.time()),
            include_usage=args.include_usage or (args.stream and self.config.force_include_usage),
            continuous_usage=args.continuous_usage,
            choice_ids=choice_request_ids(ids.engine, args.n * len(args.prompts or [None])),
            choices_per_prompt=args.n,
            token_text=self.token_text,
            tools=args.tool_plan,
            echo=self._echo_text(args) if args.echo else None,
            prompt_logprobs_field=args.prompt_logprobs_field,
            service_tier=args.service_tier,
            chat_echo=args.chat_echo,
            return_token_ids=args.return_token_ids,
            tokens_as_ids=args.tokens_as_ids,
            predicted=args.sampling.prediction is not None,
            reasoning=chat and reasoning_parser_for(self.config.reasoning_parser, args.template_kwargs) is not None,
            include_reasoning=args.include_reasoning,
            fingerprints=self.fingerprints,
            role=role,
            per_request_metrics=self.config.per_request_metrics,
            obfuscate=obfuscates(args, self.config.stream_obfuscation),
            on_done=self.chat_completions.keep(request_owner(request), args.stored_messages, args.metadata)
            if chat and args.store
            else None,
        )
        more = {"num_choices": args.n} if args.n > 1 else {}  # a frontend without choices still serves n = 1
        if args.prompts is not None:  # a batch: n engine requests per prompt (a frontend without batches: n = 1)
            more.update(prompts=args.prompts, num_choices=args.n)
        more.update(prompt=args.prompt, prompt_token_ids=args.prompt_token_ids)
        chunks = self.start(request, ids.engine, args, arrival_ns, **more)
        reply, events = (reply, openai_events) if answer is None else answer(reply, ids)
        return await respond(request, chunks, reply, args.stream, events, ids.header)

    def _echo_text(self, args: GenerateArgs) -> list[str]:
        """The prompts a completion's ``echo`` repeats (one, or a batch's): texts, or token ids decoded (without a
        tokenizer: nothing, as the token ids have no text here)."""
        tokenizer = self.token_text.tokenizer
        prompts = args.prompts if args.prompts is not None else [args.prompt or args.prompt_token_ids]
        return [
            p if isinstance(p, str) else tokenizer.decode(p, skip_special_tokens=False) if tokenizer is not None else ""
            for p in prompts
        ]


@asynccontextmanager
async def _lifespan(app: Starlette):
    """Starlette's lifespan: the app's ``runs`` (batches, background responses) run while it is served (by a server
    that runs the lifespan; http_server.serve_gateway runs them in its own task group instead)."""
    async with anyio.create_task_group() as tg:
        for run in app.state.runs:
            tg.start_soon(run)
        yield
        tg.cancel_scope.cancel()


class _ExactPathApp:
    """An ASGI app for Route, which serves it at exactly its path (Mount would redirect /metrics → /metrics/)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


async def _handle_http_exception(request: Request, exc: HTTPException) -> Response:
    path = clip(request.url.path, MAX_ECHOED_PATH_CHARS)
    return http_error_response(exc.status_code, f"{exc.detail}: {request.method} {path}", headers=exc.headers)


async def _handle_unexpected(request: Request, exc: Exception) -> Response:
    """An exception no handler caught (Starlette logs it and re-raises after this reply)."""
    return http_error_response(500, "Internal server error", code="internal_error")


def _unknown_model(name: str) -> FrontendError:
    return FrontendError(ErrorCode.UNKNOWN_MODEL, f"The model '{name}' does not exist", param="model")
