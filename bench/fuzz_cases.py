"""Fuzz cases for `zoo bench fuzz`: random and mutated wire messages and HTTP requests, from one seeded RNG.

    WireCases(rng, port).next()  ─► (kind, frames)       port "clients" | "agents"
        valid base message (random fields, drawn from the struct's msgspec type; sampling sometimes constrained by a
        structured_outputs map, well formed or not: STRUCTURED_WIRE; a chat sometimes with tools: TOOLS_WIRE)
                                                                                   ─┬─ as is ("valid")
                                                                                   ├─ a field set to a nasty value
                                                                                   └─ its bytes mutated: flip,
        insert, delete, truncate, splice, nest (2,000+ deep), big int, huge length header, type byte,
        version, frames (missing, extra, empty)
    HttpCases(rng).next()        ─► HttpCase(kind, method, path, body, headers)  (or raw bytes for the socket)
        (a chat body goes to /v1/chat/completions or, one time in ten or so, to Anthropic's /v1/messages or its
        count_tokens; a Responses API body, one time in twelve or so, to /v1/responses, its tools its own:
        RESPONSES_TOOLS_HTTP; a completion's prompt, one time in sixteen or so, as an embeddings input; one time
        in fourteen, an OpenAI batch: a JSONL upload to /v1/files, or a batch created over an uploaded file)
        valid chat/completion body ─┬─ a field set to a nasty JSON value (2**64, 10**300, 2,000+ deep,
                                    │  20k-item lists, 100 KB strings, wrong types)
                                    ├─ structured outputs: response_format, structured_outputs, guided_*, valid
                                    │  or not (STRUCTURED_HTTP), one or two at once
                                    ├─ tool calling: tools, tool_choice, parallel_tool_calls, a conversation with
                                    │  calls and results, valid or not (TOOLS_HTTP)
                                    ├─ truncated, random bytes, invalid UTF-8, not an object
                                    └─ random path / method; raw bytes that are barely HTTP

Sans-IO and deterministic: the same seed gives the same cases. Valid requests ask for a handful of tokens,
so the fleet's real work stays small next to the rejections.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
import msgspec.inspect as mi

from engine.sampling_params import SamplingParams
from transport.chat_wire import ChatTemplateOptions
from transport.codec import encode
from transport.messages import (
    MESSAGE_TYPES,
    PROTOCOL_VERSION,
    ChatMessage,
    ClientGenerate,
    Envelope,
    MsgType,
    ToolSpec,
)

MAX_INT = 2**64 - 1
MIN_INT = -(2**63)
NASTY_WIRE_VALUES: list[Callable[[random.Random], object]] = [
    lambda r: MAX_INT,
    lambda r: MIN_INT,
    lambda r: 2**31,
    lambda r: -1,
    lambda r: 0,
    lambda r: float("nan"),
    lambda r: float("inf"),
    lambda r: -0.0,
    lambda r: None,
    lambda r: True,
    lambda r: "",
    lambda r: "x" * r.choice([1_000, 100_000]),
    lambda r: "\u0000\uffff",
    lambda r: b"\x00" * 10,
    lambda r: [MAX_INT] * r.randint(1, 1_000),
    lambda r: list(range(r.randint(0, 20_000))),
    lambda r: ["s"] * r.randint(0, 5_000),
    lambda r: {"k": [1, {"x": None}]},
    lambda r: [[[[[]]]]],
]
_pack = msgspec.msgpack.Encoder().encode


def random_value(t: mi.Type, rng: random.Random, depth: int = 0) -> object:
    """A value of msgspec type ``t`` (what the struct accepts; SamplingParams within or past its bounds)."""
    if isinstance(t, mi.StructType):
        if t.cls is SamplingParams:
            return random_sampling(rng)
        return t.cls(**{f.name: random_value(f.type, rng, depth + 1) for f in t.fields})
    if isinstance(t, mi.IntType):
        return rng.choice([0, 1, rng.randint(0, 300), rng.randint(MIN_INT, MAX_INT), MAX_INT, -1])
    if isinstance(t, mi.FloatType):
        return rng.choice([0.0, rng.random(), rng.uniform(-1e9, 1e9), float("inf"), float("nan")])
    if isinstance(t, mi.StrType):
        return rng.choice(["", "a", "fuzz-" + str(rng.randint(0, 99)), "é" * rng.randint(0, 50)])
    if isinstance(t, mi.BytesType):
        return rng.randbytes(rng.randint(0, 32))
    if isinstance(t, mi.BoolType):
        return rng.random() < 0.5
    if isinstance(t, mi.NoneType):
        return None
    if isinstance(t, mi.EnumType):
        return rng.choice(list(t.cls))
    if isinstance(t, mi.AnyType):
        return rng.choice([None, 1, "x", [1, 2], {"a": {"b": [None]}}])
    if isinstance(t, (mi.ListType, mi.VarTupleType)):
        items = [random_value(t.item_type, rng, depth + 1) for _ in range(rng.randint(0, 3 if depth < 3 else 0))]
        return tuple(items) if isinstance(t, mi.VarTupleType) else items
    if isinstance(t, mi.TupleType):
        return tuple(random_value(x, rng, depth + 1) for x in t.item_types)
    if isinstance(t, mi.DictType):
        n = rng.randint(0, 2 if depth < 3 else 0)
        return {random_value(t.key_type, rng, depth + 1): random_value(t.value_type, rng, depth + 1) for _ in range(n)}
    if isinstance(t, mi.UnionType):
        return random_value(rng.choice(t.types), rng, depth + 1)
    raise NotImplementedError(f"no random value for {t!r}")


def random_sampling(rng: random.Random) -> SamplingParams:
    """Mostly small and valid; sometimes a field past its bound (not validated: the receiver decides)."""
    fields = {"max_tokens": rng.randint(1, 4), "temperature": rng.choice([0.0, 0.7, 1.0])}
    if rng.random() < 0.3:
        name = rng.choice(
            ["max_tokens", "top_k", "top_p", "seed", "temperature", "stop", "stop_token_ids", "logprobs",
             "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "min_p", "min_tokens",
             "allowed_token_ids", "prompt_logprobs", "truncate_prompt_tokens", "include_stop_str_in_output",
             "skip_special_tokens", "bad_words", "bad_words_token_ids", "cache_salt"]
        )  # fmt: skip
        fields[name] = rng.choice(
            [MAX_INT, 2**31, -1, 0, 1e300, float("nan"), ("x",) * 40, ("y" * 2_000,), (MAX_INT,), tuple(range(300)),
             ((5, 1.0),), ((MAX_INT, 1.0),), ((1, float("inf")),), ((1, 2.0),) * 2, tuple((i, 1.0) for i in range(301)),
             ("",), (" ",), ((),), ((5, 7),), ((MAX_INT,),), ("zoo-tenant:x",)]
        )  # fmt: skip
    if rng.random() < 0.1:
        fields["structured_outputs"] = rng.choice(STRUCTURED_WIRE)(rng)
    if rng.random() < 0.05:
        fields["prompt_logprobs"] = rng.choice([0, 5])  # the fuzz fleet's fake runner refuses them
        if rng.random() < 0.1:  # each refused beside a constraint
            fields[rng.choice(["ignore_eos", "min_tokens", "allowed_token_ids"])] = rng.choice([True, 1, (5,)])
    return SamplingParams.unchecked(**fields)


# a deeply nested JSON text (not a JSON value: never closed), as a schema's text
_DEEP_SCHEMA = '{"a":' * 5000
# ``ClientGenerate.tools``: well formed, and not (a bad name, a name twice, past MAX_TOOLS, parameters that are not a
# schema object or nest 5,000 deep); the intake refuses the bad ones naming ``tools``
TOOLS_WIRE = [
    [ToolSpec("get_weather", "now", '{"type":"object","properties":{"city":{"type":"string"}}}'), ToolSpec("now")],
    [ToolSpec("a b")], [ToolSpec("f"), ToolSpec("f")], [ToolSpec(f"f{i}") for i in range(129)],
    [ToolSpec("f", parameters="[1]")], [ToolSpec("f", parameters="{bad")], [ToolSpec("f", parameters='{"a":' * 5000)],
]  # fmt: skip
# ``SamplingParams.structured_outputs`` as the wire carries it (a map; engine/structured_output.py bounds it):
# well formed, past a bound, two kinds or none, members of the wrong type, and specs that do not compile
STRUCTURED_WIRE: list[Callable[[random.Random], object]] = [
    lambda r: {"regex": r.choice(["[0-9]{1,3}", "(a|b)*c", "[a-z]{1000}{1000}", "(a*)*b"])},
    lambda r: {"choice": r.sample(["yes", "no", "maybe", "é", "\u0000"], r.randint(1, 3))},
    lambda r: {"json": r.choice(['{"type": "object"}', "true", "false", '{"enum": [1, 2]}'])},
    lambda r: {"json_object": True},
    lambda r: {"grammar": 'start: "a" | "b"'},
    lambda r: {"regex": "[a-"},
    lambda r: {"grammar": r.choice(["start: x", "%%%", "start: /[a-/"])},
    lambda r: {"json": r.choice([_DEEP_SCHEMA, "{bad", '{"type": "nonsense"}', "[1]", '"x"'])},
    lambda r: {"regex": "x" * 70 * 1024},
    lambda r: {"grammar": 'start: "a"\n' + "/" * (64 * 1024)},
    lambda r: {"choice": []},
    lambda r: {"choice": [str(i) for i in range(300)]},
    lambda r: {"choice": r.choice([[""], ["a" * 2_000], ["a"] * 256])},
    lambda r: {"regex": "a", "choice": ["b"]},
    lambda r: {"json": "true", "json_object": True, "grammar": 'start: "a"'},
    lambda r: {},
    lambda r: {"json_object": False},
    lambda r: {"regex": r.choice([5, None, b"a", ["a"], {"a": 1}])},
    lambda r: {"choice": r.choice(["yes", 5, [1, 2], [None], [["a"]]])},
    lambda r: {"json": {"type": "object"}},  # the schema itself, not its text
    lambda r: {"json_object": r.choice(["yes", 1, None])},
    lambda r: {"unknown": 1, "regex": "a"},
    lambda r: r.choice(["regex", 5, ["a"], True]),
]


# --------------------------------------------------------------------------- wire

CLIENT_TYPES = [MsgType.CLIENT_GENERATE, MsgType.CANCEL, MsgType.PING, MsgType.PROBE_SNAPSHOT]
AGENT_TYPES = [
    MsgType.NODE_HELLO, MsgType.HEARTBEAT, MsgType.LOAD_REPORT, MsgType.NODE_LEAVE, MsgType.TOKENS, MsgType.ERROR,
    MsgType.PONG, MsgType.NODE_TELEMETRY,
]  # fmt: skip
WIRE_MUTATIONS = [
    "valid", "field", "flip", "insert", "delete", "truncate", "splice", "nest", "big int", "huge length",
    "type byte", "version", "frames", "random bytes",
]  # fmt: skip


class WireCases:
    """Cases for one ROUTER port. ``node_ids`` a hello may not claim (the fuzzer never impersonates a node:
    that is authentication's job, tested elsewhere)."""

    def __init__(self, rng: random.Random, port: str, forbidden_node_ids: frozenset[str] = frozenset()) -> None:
        self.rng = rng
        self.port = port
        self.forbidden_node_ids = forbidden_node_ids
        own = CLIENT_TYPES if port == "clients" else AGENT_TYPES
        other = AGENT_TYPES if port == "clients" else CLIENT_TYPES
        self.types = own * 4 + other + [MsgType.WELCOME, MsgType.GENERATE, MsgType.KV_BLOCKS, MsgType.FLEET_STATS]
        self._infos = {t: mi.type_info(MESSAGE_TYPES[t]) for t in MsgType}
        self._counter = 0

    def base(self) -> tuple[MsgType, Envelope]:
        self._counter += 1
        msg_type = self.rng.choice(self.types)
        if msg_type is MsgType.CLIENT_GENERATE and self.rng.random() < 0.5:
            msg = self._client_generate()
        else:
            msg = random_value(self._infos[msg_type], self.rng)
        msg.v = PROTOCOL_VERSION
        if not msg.request_id:
            msg.request_id = f"fz-{self.port}-{self._counter}"
        node_id = getattr(msg, "node_id", None)
        if node_id in self.forbidden_node_ids:
            msg.node_id = f"not-{node_id}"
        return msg_type, msg

    def _client_generate(self) -> ClientGenerate:
        r = self.rng
        kind = r.choice(["prompt", "messages", "ids"])
        return ClientGenerate(
            request_id=f"fz-gen-{self._counter}",
            prompt="hello" if kind == "prompt" else None,
            messages=[ChatMessage("user", "hi")] if kind == "messages" else None,
            tools=r.choice(TOOLS_WIRE) if kind != "ids" and r.random() < 0.2 else None,
            prompt_token_ids=[r.randint(0, 258) for _ in range(r.randint(1, 8))] if kind == "ids" else None,
            sampling=random_sampling(r),
            priority=r.choice([0, 0, 0, 1, -1, 2**31 - 1, -(2**31), 2**31, 2**63 - 1]),
            trace_headers=r.choice([None, None, {"traceparent": f"00-{r.getrandbits(128):032x}-{1:016x}-01"},
                                    {"traceparent": "x" * r.choice([1, 55, 600])}, {"tracestate": "a=b"}]),
            chat=r.choice([None, None, None, *CHAT_OPTIONS_WIRE]) if kind != "ids" or r.random() < 0.1 else None,
        )  # fmt: skip

    def next(self) -> tuple[str, list[bytes]]:
        """(mutation kind, frames)."""
        r = self.rng
        kind = r.choice(WIRE_MUTATIONS)
        msg_type, msg = self.base()
        if kind == "field":
            return kind, [bytes((msg_type,)), self._nasty_field(msg)]
        try:
            frames = [bytes(f) for f in encode(msg)]
        except TypeError:  # EncodeError: a value msgpack cannot carry; send it as a nasty field instead
            return "field", [bytes((msg_type,)), self._nasty_field(msg)]
        if kind == "valid":
            return kind, frames
        payload = bytearray(frames[1])
        at = r.randint(0, len(payload))
        if kind == "flip" and payload:
            for _ in range(r.randint(1, 4)):
                payload[r.randrange(len(payload))] ^= r.randint(1, 255)
        elif kind == "insert":
            payload[at:at] = r.randbytes(r.randint(1, 16))
        elif kind == "delete":
            del payload[at : at + r.randint(1, 16)]
        elif kind == "truncate":
            del payload[at:]
        elif kind == "splice":
            other = bytes(encode(self.base()[1])[1]) if r.random() < 0.9 else b""
            payload = payload[:at] + other[r.randint(0, len(other)) :]
        elif kind == "nest":
            depth = r.choice([1_000, 2_000, 5_000, 50_000])
            payload[at:at] = (b"\x91" if r.random() < 0.5 else b"\x81\xa1k") * depth + b"\xc0"
        elif kind == "big int":
            payload[at:at] = r.choice([b"\xcf" + b"\xff" * 8, b"\xd3\x80" + b"\x00" * 7, b"\xcb\x7f\xf0" + b"\x00" * 6])
        elif kind == "huge length":  # a header that claims far more than the payload holds
            payload[at:at] = r.choice([b"\xdb\xff\xff\xff\xff", b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff"])
        elif kind == "version":
            body = msgspec.to_builtins(msg)
            body["v"] = r.choice([0, 2, -1, MAX_INT, "1", None])
            payload = bytearray(_pack(body))
        elif kind == "type byte":
            frames[0] = bytes((r.randint(0, 255),)) if r.random() < 0.9 else b""
        elif kind == "frames":
            choice = r.randint(0, 3)
            if choice == 0:
                return kind, frames[:1]
            if choice == 1:
                return kind, []
            if choice == 2:
                return kind, [frames[0], bytes(payload), *(r.randbytes(r.randint(0, 64)) for _ in range(3))]
            return kind, [b"", b""]
        elif kind == "random bytes":
            payload = bytearray(r.randbytes(r.randint(0, 256)))
        return kind, [frames[0], bytes(payload), *frames[2:]]

    def _nasty_field(self, msg: Envelope) -> bytes:
        """The message as a msgpack map with one field (or one sampling field) set to a nasty value."""
        r = self.rng
        body = msgspec.to_builtins(msg, builtin_types=(bytes,))
        target = body
        if "sampling" in body and isinstance(body["sampling"], dict) and r.random() < 0.5:
            target = body["sampling"]
            if isinstance(target.get("structured_outputs"), dict) and r.random() < 0.5:
                target = target["structured_outputs"]
        keys = list(target) or ["x"]
        target[r.choice([*keys, "unknown_field"])] = r.choice(NASTY_WIRE_VALUES)(r)
        try:
            return _pack(body)
        except (OverflowError, TypeError, ValueError):
            return _pack({"v": PROTOCOL_VERSION, "request_id": "fz-nasty"})


def valid_client_request(request_id: str) -> list[bytes]:
    """A request that must be served (the liveness check)."""
    msg = ClientGenerate(request_id=request_id, prompt="ping", sampling=SamplingParams(max_tokens=2))
    return [bytes(f) for f in encode(msg)]


# --------------------------------------------------------------------------- HTTP


@dataclass(slots=True)
class HttpCase:
    kind: str
    method: str = "POST"
    path: str = "/v1/chat/completions"
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "application/json"})
    raw: bytes | None = None  # sent as is on a TCP connection instead of through the HTTP client


TRACEPARENTS: list[Callable[[random.Random], str]] = [
    lambda r: f"00-{r.getrandbits(128):032x}-{r.getrandbits(64):016x}-{r.choice(['00', '01'])}",
    lambda r: f"00-{0:032x}-{r.getrandbits(64):016x}-01",
    lambda r: f"ff-{r.getrandbits(128):032x}-{r.getrandbits(64):016x}-01",
    lambda r: f"00-{r.getrandbits(128):032x}-{r.getrandbits(64):016x}-01-extra",
    lambda r: "00-" + "g" * 32 + "-" + "1" * 16 + "-01",
    lambda r: "x" * r.choice([0, 54, 56, 600, 8_000]),
]
TRACESTATES: list[Callable[[random.Random], str]] = [
    lambda r: "vendor=abc,other=1",
    lambda r: ",".join(f"k{i}=v" for i in range(r.choice([33, 200]))),
    lambda r: "=" * r.randint(1, 100),
    lambda r: "a" * r.choice([512, 513, 9_000]),
]
NASTY_JSON: list[Callable[[random.Random], str]] = [
    lambda r: str(2**64),
    lambda r: str(2**64 - 1),
    lambda r: str(2**31),
    lambda r: "1" + "0" * 300,
    lambda r: "-" + str(2**63 + 1),
    lambda r: "1e400",
    lambda r: "-1",
    lambda r: "NaN",
    lambda r: "null",
    lambda r: "true",
    lambda r: '"x"',
    lambda r: '"' + "x" * r.choice([1_025, 100_000]) + '"',
    lambda r: "[" * (d := r.choice([2_000, 10_000, 100_000])) + "]" * d,
    lambda r: '{"a":' * (d := r.choice([2_000, 10_000])) + "1" + "}" * d,
    lambda r: json.dumps(["s"] * r.choice([17, 200, 20_000])),
    lambda r: json.dumps([2**64] * r.randint(1, 50)),
    lambda r: json.dumps(list(range(r.choice([257, 20_000])))),
    lambda r: "{}",
    lambda r: "[]",
]
# ``ClientGenerate.chat`` (backends/chat_render.py): a prefill, both flags (refused), reserved and nested variables
_DEEP_VALUE: dict = {}
for _ in range(400):  # deep, yet within what msgpack encodes under the default recursion limit
    _DEEP_VALUE = {"a": _DEEP_VALUE}
CHAT_OPTIONS_WIRE = [
    ChatTemplateOptions(add_generation_prompt=False, continue_final_message=True),
    ChatTemplateOptions(continue_final_message=True),
    ChatTemplateOptions(template_kwargs={"messages": [], "x": 1}),
    ChatTemplateOptions(template_kwargs={"enable_thinking": True, "deep": _DEEP_VALUE}),
]
HTTP_FIELDS = [
    "model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "stop",
    "stop_token_ids", "ignore_eos", "seed", "n", "stream", "stream_options", "logprobs", "top_logprobs", "tools",
    "response_format", "logit_bias", "best_of", "echo", "suffix", "user", "unknown_field", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "min_p", "min_tokens", "allowed_token_ids", "structured_outputs",
    "guided_json", "guided_regex", "guided_choice", "guided_grammar", "tool_choice", "parallel_tool_calls",
    "prompt_logprobs", "truncate_prompt_tokens", "include_stop_str_in_output", "skip_special_tokens", "priority",
    "service_tier", "cache_salt", "bad_words", "continue_final_message", "add_generation_prompt",
    "chat_template_kwargs",
    "system", "stop_sequences",  # Anthropic's (/v1/messages)
    "input", "instructions", "max_output_tokens", "previous_response_id", "store", "text", "include", "background",
    "metadata",  # OpenAI's Responses API (/v1/responses)
    "encoding_format", "dimensions",  # OpenAI's embeddings API (/v1/embeddings)
]  # fmt: skip
HTTP_MUTATIONS = ["valid", "field", "field", "field", "structured", "tools", "truncate", "random bytes", "bad utf-8",
                  "not an object", "path", "method", "raw", "batch"]  # fmt: skip
BATCH_ENDPOINTS = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"]
WINDOWS = ["24h"] * 5 + ["1h"]
MULTIPART = "multipart/form-data; boundary=zz"


def _json_schema_format(schema: str) -> str:
    return '{"type": "json_schema", "json_schema": {"name": "fz", "schema": ' + schema + ', "strict": true}}'


# (field, its JSON text): OpenAI's response_format, vLLM's structured_outputs and its older guided_* fields, well
# formed or not (a kind with no value, several kinds, past a bound, a spec that does not compile, wrong types)
STRUCTURED_HTTP: list[Callable[[random.Random], tuple[str, str]]] = [
    lambda r: ("response_format", r.choice(['{"type": "text"}', '{"type": "json_object"}'])),
    lambda r: ("response_format", _json_schema_format(r.choice(['{"type": "object"}', "true", '{"enum": ["a"]}']))),
    lambda r: ("response_format", _json_schema_format(r.choice(['"{bad"', "5", "[]", "null", _DEEP_SCHEMA + "1"
                                                                + "}" * 5000, '{"type": "nonsense"}']))),
    lambda r: ("response_format", r.choice(['{"type": "json_schema"}', '{"type": "json_schema", "json_schema": {}}',
                                            '{"type": "yaml"}', '{"type": 5}', "{}", '"json_object"', "[]"])),
    lambda r: ("structured_outputs", json.dumps(r.choice([
        {"json": {"type": "object"}}, {"json": '{"type": "object"}'}, {"json": True}, {"regex": "[0-9]{3}"},
        {"choice": ["yes", "no"]}, {"grammar": 'start: "a" | "b"'}, {"json_object": True},
    ]))),
    lambda r: ("structured_outputs", json.dumps(r.choice([
        {"regex": "[a-"}, {"grammar": "start: x"}, {"json": "{bad"}, {"json": 5}, {"choice": []}, {"choice": [""]},
        {"choice": [str(i) for i in range(300)]}, {"regex": "x" * 70 * 1024}, {"regex": "a", "choice": ["b"]}, {},
        {"json_object": False}, {"regex": 5}, {"choice": "yes"}, {"unknown": 1}, "regex", [], None,
    ]))),
    lambda r: ("structured_outputs", '{"json": ' + _DEEP_SCHEMA + "1" + "}" * 5000 + "}"),
    lambda r: ("guided_json", r.choice(['{"type": "object"}', json.dumps('{"type": "object"}'), "true", '"{bad"',
                                        json.dumps(_DEEP_SCHEMA), "5", "[]"])),
    lambda r: ("guided_regex", json.dumps(r.choice(["[0-9]{3}", "[a-", "", "x" * 70 * 1024, 5]))),
    lambda r: ("guided_choice", json.dumps(r.choice([["yes", "no"], [], ["a"] * 300, "yes", [1], [""]]))),
    lambda r: ("guided_grammar", json.dumps(r.choice(['start: "a"', "start: x", "", 5]))),
    lambda r: (r.choice(["ignore_eos", "min_tokens", "allowed_token_ids"]), r.choice(["true", "1", "[5]"])),
]  # fmt: skip
_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 8}},
            "required": ["city"],
        },
    },
}
_CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
# (field, its JSON text) of a chat's tool calling, well formed or not (wrong types and shapes, past a bound, a name
# no tool has, a clash with structured outputs, parameters nested 5,000 deep, a conversation with calls and results)
TOOLS_HTTP: list[Callable[[random.Random], tuple[str, str]]] = [
    lambda r: ("tools", json.dumps([_TOOL, {"type": "function", "function": {"name": "now"}}])),
    lambda r: ("tool_choice", json.dumps(r.choice(["none", "auto", "required", "sometimes", 5, {"type": "function",
        "function": {"name": r.choice(["get_weather", "now", "nope"])}}, {"type": "function"}, {}]))),
    lambda r: ("tools", json.dumps(r.choice([[], [{}], [{"type": "function"}], [{"type": "retrieval", "function": {
        "name": "x"}}], [{"type": "function", "function": {"name": "a b"}}], [_TOOL, _TOOL], "tools", [_TOOL] * 129,
        [{"type": "function", "function": {"name": "f", "parameters": r.choice([[1], "x", 5, {"type": "nonsense"}])}}],
        [{"type": "function", "function": {"name": "f" * 65}}]]))),
    lambda r: ("tools", '[{"type": "function", "function": {"name": "deep", "parameters": ' + _DEEP_SCHEMA + "1"
               + "}" * 5000 + "}}]"),
    lambda r: ("parallel_tool_calls", r.choice(["false", "true", "1", '"no"'])),
    lambda r: ("messages", json.dumps([{"role": "user", "content": "Oslo?"}, {"role": "assistant", "content": None,
        "tool_calls": r.choice([[_CALL], [{**_CALL, "type": "x"}], [{"id": "c"}], [_CALL] * 50, "x"])}, {"role": "tool",
        "tool_call_id": r.choice(["call_1", None, 5]), "content": "3 C"}])),
    lambda r: ("response_format", '{"type": "json_object"}'),
]  # fmt: skip
_FLAT_TOOL = {"type": "function", "name": "get_weather", "parameters": _TOOL["function"]["parameters"]}
# (field, its JSON text) of a Responses API request's tools and conversation items, well formed or not
RESPONSES_TOOLS_HTTP: list[Callable[[random.Random], tuple[str, str]]] = [
    lambda r: ("tools", json.dumps(r.choice([[_FLAT_TOOL], [_FLAT_TOOL, _FLAT_TOOL], [{"type": "web_search"}], [{}],
        [{"type": "function"}], [{**_FLAT_TOOL, "name": "a b"}], [_FLAT_TOOL] * 129, "tools"]))),
    lambda r: ("tool_choice", json.dumps(r.choice(["none", "auto", "required", "x", 5, {"type": "function",
        "name": r.choice(["get_weather", "nope"])}, {"type": "function"}, {"type": "web_search"}, {}]))),
    lambda r: ("input", json.dumps(r.choice([[{"role": "user", "content": "Oslo?"}, {"type": "function_call",
        "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Oslo"}'}, {"type": "function_call_output",
        "call_id": "c1", "output": "3 C"}], [{"type": "function_call"}], [{"type": "function_call_output"}],
        [{"type": "reasoning"}], [{"role": "user", "content": [{"type": "input_image"}]}], [{"role": "x"}], [],
        [{"role": "user", "content": [{"type": "input_text", "text": "hi"}] * 5000}]]))),
    lambda r: ("text", json.dumps(r.choice([{"format": {"type": "json_object"}}, {"format": {"type": "json_schema",
        "name": "t", "schema": {"type": "object"}}}, {"format": {"type": "json_schema"}}, {"format": {"type": "x"}},
        {"format": 5}, "json"]))),
    lambda r: ("previous_response_id", json.dumps(r.choice(["resp_nope", "", "x" * 10_000, 5]))),
]  # fmt: skip
RAW_REQUESTS = [
    b"GET /health HTTP/1.1\r\nHost: fuzz\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: fuzz\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n"
    b'{"prompt":"hi"}\n',
]


class HttpCases:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.file_ids: list[str] = []  # files the gateway accepted (the campaign adds them): batches name them

    def batch_case(self) -> HttpCase:
        """An upload of a JSONL file of batch requests (lines valid, mutated or broken; the multipart itself
        sometimes broken), or a batch created over an accepted file or a made-up one, its fields sometimes nasty."""
        r = self.rng
        if r.random() < 0.5:
            return self._upload_case()
        known = r.choice(self.file_ids) if self.file_ids and r.random() < 0.8 else "file-nope"
        endpoint = r.choice([*BATCH_ENDPOINTS, "/v1/messages"])
        text = json.dumps({"input_file_id": known, "endpoint": endpoint, "completion_window": r.choice(WINDOWS)})
        if r.random() < 0.3:
            name = r.choice(["metadata", "input_file_id", "endpoint", "completion_window", "extra"])
            text = text[:-1] + f', "{name}": {r.choice(NASTY_JSON)(r)}}}'
        return HttpCase("batch", path="/v1/batches", body=text.encode())

    def _upload_case(self) -> HttpCase:
        r = self.rng
        endpoint = r.choice(BATCH_ENDPOINTS)
        if endpoint == "/v1/embeddings":
            body = {"input": "hi"}
        elif endpoint == "/v1/responses":
            body = self.responses_body()
        else:
            body = self.valid_body(endpoint == "/v1/chat/completions")
        lines = []
        for i in range(r.randint(1, 3)):
            custom_id = f"c{i}" if r.random() < 0.9 else "c"
            line = json.dumps({"custom_id": custom_id, "method": "POST", "url": endpoint, "body": body})
            choice = r.random()
            if choice < 0.15:
                line = line[: r.randint(0, len(line))]
            elif choice < 0.3:
                line = line[:-2] + f', "{r.choice(HTTP_FIELDS)}": {r.choice(NASTY_JSON)(r)}}}}}'
            lines.append(line.encode())
        purpose = r.choice([b"batch", b"batch", b"batch", b"user_data", b"fine-tune", b"", b"\xff"])
        form = b"".join([
            b'--zz\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n', purpose, b"\r\n--zz\r\n",
            b'Content-Disposition: form-data; name="file"; filename="f.jsonl"\r\n\r\n', b"\n".join(lines),
            b"\r\n--zz--\r\n",
        ])  # fmt: skip
        if r.random() < 0.15:
            form = form[: r.randint(0, len(form))]
        content_type = r.choice([MULTIPART] * 5 + ["multipart/form-data", "application/json"])
        return HttpCase("batch", path="/v1/files", body=form, headers={"content-type": content_type})

    def valid_body(self, chat: bool) -> dict:
        r = self.rng
        body: dict = {"max_tokens": r.randint(1, 4), "temperature": r.choice([0, 0.7])}
        if chat:
            body["messages"] = [{"role": "user", "content": "hi"}]
        else:
            body["prompt"] = r.choice(["hi", [104, 105], ["hi", "yo"], [[104], [105, 106]]])  # one, or a batch
        if r.random() < 0.2:
            body["stream"] = True
        return body

    def responses_body(self) -> dict:
        r = self.rng
        body: dict = {"input": r.choice(["hi", [{"role": "user", "content": "hi"}]]), "max_output_tokens": 3}
        if r.random() < 0.2:
            body["stream"] = True
        return body

    def next(self) -> HttpCase:
        r = self.rng
        kind = r.choice(HTTP_MUTATIONS)
        if kind == "batch":
            return self.batch_case()
        chat = r.random() < 0.5
        path = "/v1/chat/completions" if chat else "/v1/completions"
        if chat and r.random() < 0.3:  # Anthropic's: a chat body is one of its bodies too (of count_tokens' too)
            path = "/v1/messages" if r.random() < 0.8 else "/v1/messages/count_tokens"
        responses = chat and r.random() < 0.17
        if responses:
            path = "/v1/responses"
        body = self.responses_body() if responses else self.valid_body(chat)
        if not chat and r.random() < 0.12:  # the prompt as an embeddings input (one, or a batch)
            path, body = "/v1/embeddings", {"input": body["prompt"], "encoding_format": r.choice(["float", "base64"])}
        text = json.dumps(body)
        if kind == "field":
            name = r.choice(HTTP_FIELDS)
            text = text[:-1] + f', "{name}": {r.choice(NASTY_JSON)(r)}}}'
        elif kind == "tools":  # one to three fields (tools with a choice, a clash, a conversation)
            for _ in range(r.randint(1, 3)):
                name, value = r.choice(RESPONSES_TOOLS_HTTP if responses else TOOLS_HTTP)(r)
                text = text[:-1] + f', "{name}": {value}}}'
        elif kind == "structured":
            for _ in range(1 if r.random() < 0.7 else 2):  # two: several kinds, or a constraint and a clash
                name, value = r.choice(STRUCTURED_HTTP)(r)
                text = text[:-1] + f', "{name}": {value}}}'
        elif kind == "truncate":
            text = text[: r.randint(0, len(text) - 1)]
        elif kind == "random bytes":
            return HttpCase(kind, path=path, body=r.randbytes(r.randint(0, 512)))
        elif kind == "bad utf-8":
            return HttpCase(kind, path=path, body=text.encode()[:-2] + b'\xff\xfe"}')
        elif kind == "not an object":
            text = r.choice(["[]", "1", '"x"', "null", "[" + text + "]"])
        elif kind == "path":
            method = r.choice(["GET", "HEAD", "DELETE"])
            path = r.choice(["/health", "/metrics", "/v1/models", "/v1/models/" + "m" * r.randint(0, 5_000), "/nope",
                             "/v1/" + "x" * r.randint(0, 20_000), "/v1/completions/..%2f..%2fetc",
                             "/v1/responses/resp_" + "r" * r.randint(0, 5_000),
                             "/v1/responses/x/input_items?limit=" + r.choice(["0", "5", "x" * 3000, "-"]),
                             "/v1/files?" + r.choice(["limit=0", "order=up", "after=x", "purpose=batch"]),
                             "/v1/files/" + r.choice([*self.file_ids[-3:], "file-" + "f" * r.randint(0, 5_000)]),
                             "/v1/files/" + r.choice([*self.file_ids[-3:], "nope"]) + "/content",
                             "/v1/batches?limit=" + r.choice(["0", "5", "101", "x" * 3000]),
                             "/v1/batches/batch_" + "b" * r.randint(0, 5_000)])  # fmt: skip
            return HttpCase(kind, method=method, path=path, headers={})
        elif kind == "method":
            return HttpCase(kind, method=r.choice(["GET", "PUT", "DELETE", "OPTIONS", "PATCH"]), path=path,
                            body=text.encode())  # fmt: skip
        elif kind == "raw":
            raw = bytearray(r.choice(RAW_REQUESTS))
            for _ in range(r.randint(1, 3)):
                at = r.randrange(len(raw) or 1)
                choice = r.randint(0, 3)
                if choice == 0 and raw:
                    raw[at] = r.randint(0, 255)
                elif choice == 1:
                    raw[at:at] = r.randbytes(r.randint(1, 32))
                elif choice == 2:
                    raw[at:at] = b"X-Long: " + b"a" * 20_000 + b"\r\n"
                else:
                    del raw[at:]
            return HttpCase(kind, raw=bytes(raw))
        if r.random() < 0.05:
            headers = {"content-type": r.choice(["text/plain", "application/x-www-form-urlencoded", "", "json"])}
            return HttpCase(kind, path=path, body=text.encode(), headers=headers)
        if r.random() < 0.2:  # a caller's trace context (transport/trace_context.py): valid, or not
            headers = {"content-type": "application/json", "traceparent": r.choice(TRACEPARENTS)(r)}
            if r.random() < 0.5:
                headers["tracestate"] = r.choice(TRACESTATES)(r)
            return HttpCase(kind, path=path, body=text.encode(), headers=headers)
        return HttpCase(kind, path=path, body=text.encode())
