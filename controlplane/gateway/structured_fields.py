"""The request fields that ask for structured outputs, read into one engine/structured_output.StructuredOutput.

Three spellings (vLLM's OpenAI server, vllm/entrypoints/openai/protocol.py, takes the first two since
vllm-project/vllm#22772, August 2025):

    response_format     OpenAI's: {"type": "text"} (no constraint), {"type": "json_object"}, or
                        {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}
    structured_outputs  vLLM's: {"json": schema, "regex": "...", "choice": [...], "grammar": "...",
                        "json_object": true}, exactly one
    guided_json, guided_regex, guided_choice, guided_grammar
                        vLLM's older names, still sent by many clients; vLLM v0.12.0 removed them and ignores
                        them silently (the output comes back unconstrained, with a 200): here they are honoured

At most one field may ask. A schema is kept as the client's JSON text (``msgspec.Raw``): it is never decoded into
Python objects here, so no depth or size of schema costs the gateway more than a copy; it is also accepted as a
string holding that text, as vLLM accepts it. ``structured_of`` returns the constraint and the field the client
used, so that an error about it (the compile check, ``check_structured``) names that field.
"""

from __future__ import annotations

import anyio
import msgspec

from backends.grammar import check as check_grammar
from controlplane.frontend import FrontendError, invalid_param
from engine.sampling_params import show_value
from engine.structured_output import StructuredOutput, StructuredOutputError
from transport.messages import ErrorCode

GUIDED_FIELDS = ("guided_json", "guided_regex", "guided_choice", "guided_grammar")
NOT_GIVEN = msgspec.Raw()  # a schema field absent (msgspec takes Raw whole, so ``null`` arrives as b"null": not given)


class JsonSchemaFormat(msgspec.Struct, kw_only=True):
    name: str | None = None
    schema: msgspec.Raw = NOT_GIVEN  # not given: any JSON object
    strict: bool | None = None  # accepted: the output follows the schema either way
    description: str | None = None


class ResponseFormat(msgspec.Struct, kw_only=True):
    type: str
    json_schema: JsonSchemaFormat | None = None


class StructuredOutputsIn(msgspec.Struct, kw_only=True):
    json: msgspec.Raw = NOT_GIVEN
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool | None = None  # compact JSON (engine/structured_output.py)


class StructuredRequest(msgspec.Struct, kw_only=True):
    """The fields a request body may carry (mixed into the completion and chat request structs)."""

    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputsIn | None = None
    guided_json: msgspec.Raw = NOT_GIVEN
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None


def structured_of(req: StructuredRequest) -> tuple[StructuredOutput | None, str | None]:
    """(the constraint, the field that asked for it), or (None, None). Raises FrontendError naming the field."""
    asked: list[tuple[str, dict]] = []
    if req.response_format is not None:
        fields = _response_format(req.response_format)
        if fields is not None:
            asked.append(("response_format", fields))
    if req.structured_outputs is not None:
        so = req.structured_outputs
        fields = {"regex": so.regex, "grammar": so.grammar, "json_object": bool(so.json_object)}
        fields["disable_any_whitespace"] = bool(so.disable_any_whitespace)
        if _given(so.json):
            fields["json"] = schema_text(so.json, "structured_outputs")
        if so.choice is not None:
            fields["choice"] = tuple(so.choice)
        asked.append(("structured_outputs", fields))
    for name, key in zip(GUIDED_FIELDS, ("json", "regex", "choice", "grammar"), strict=True):
        value = getattr(req, name)
        if value is None or (name == "guided_json" and not _given(value)):
            continue
        if name == "guided_json":
            value = schema_text(value, name)
        elif name == "guided_choice":
            value = tuple(value)
        asked.append((name, {key: value}))
    if not asked:
        return None, None
    if len(asked) > 1:
        names = [name for name, _ in asked]
        raise invalid_param(names[1], f"only one of {', '.join(names)} may ask for structured outputs")
    param, fields = asked[0]
    try:
        spec = StructuredOutput(**fields)
        spec.check()
    except StructuredOutputError as error:
        raise invalid_param(param, str(error)) from None
    return spec, param


def _response_format(fmt: ResponseFormat) -> dict | None:
    if fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"json_object": True}
    if fmt.type == "json_schema":
        if fmt.json_schema is None or not _given(fmt.json_schema.schema):
            return {"json_object": True}
        return {"json": schema_text(fmt.json_schema.schema, "response_format")}
    message = f"type must be 'text', 'json_object' or 'json_schema', got {show_value(fmt.type)}"
    raise invalid_param("response_format", message)


def _given(raw: msgspec.Raw) -> bool:
    return bool(raw) and bytes(raw) != b"null"


def schema_text(raw: msgspec.Raw, param: str) -> str:
    """A schema's JSON text: the client's bytes as they came, or the text of a JSON string holding it."""
    data = bytes(raw)
    if data[:1] == b'"':
        try:
            return msgspec.json.decode(data, type=str)
        except msgspec.DecodeError:
            raise invalid_param(param, "the schema string is not valid JSON") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid_param(param, "the schema is not valid UTF-8") from None


GRAMMAR_THREADS = 2  # constraints compiled at once, in worker threads (this project's hosts: 2 cores)


async def check_structured(args, limiter: anyio.CapacityLimiter | None = None) -> None:
    """Compile the request's constraint (``args``: gateway/openai_schema.py's GenerateArgs) in a worker thread (a
    64 KiB schema takes tens of milliseconds, which the event loop serving every other request should not wait for);
    a refusal names the field the client used. The intake's own check (controlplane/request_intake.py) then finds
    it among those that compiled (backends/grammar.py). ``limiter``: the gateway's, ``GRAMMAR_THREADS`` at once
    (llguidance compiles off the GIL: 16 distinct 34 kB schemas at once in anyio's default pool of 40 threads stalled
    the loop 44 ms, two at a time 4 ms; scripts/grammar_loop_lag.py, bench/results/2026-12-06-grammar-loop-lag.json)."""
    try:
        await anyio.to_thread.run_sync(check_grammar, args.sampling.structured_outputs, limiter=limiter)
    except StructuredOutputError as error:
        param = args.structured_param
        raise FrontendError(ErrorCode.INVALID_REQUEST, f"{param}: {error}", param=param) from None
