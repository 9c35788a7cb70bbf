"""Wire fuzz cases for `zoo bench fuzz`: random and mutated wire messages, from one seeded RNG.

    WireCases(rng, port).next()  ─► (kind, frames)       port "clients" | "agents"
        valid base message (random fields, drawn from the struct's msgspec type; sampling sometimes constrained by a
        structured_outputs map, well formed or not: STRUCTURED_WIRE; a chat sometimes with tools: TOOLS_WIRE)
                                                                                   ─┬─ as is ("valid")
                                                                                   ├─ a field set to a nasty value
                                                                                   └─ its bytes mutated: flip,
        insert, delete, truncate, splice, nest (2,000+ deep), big int, huge length header, type byte,
        version, frames (missing, extra, empty)
    (HTTP cases: bench/fuzz_http_cases.py.)

Sans-IO and deterministic: the same seed gives the same cases. Valid requests ask for a handful of tokens,
so the fleet's real work stays small next to the rejections.
"""

from __future__ import annotations

import random
from collections.abc import Callable

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
    SleepControl,
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
             "skip_special_tokens", "bad_words", "bad_words_token_ids", "cache_salt", "thinking_token_budget",
             "think_start_token_ids", "think_end_token_ids"]
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


# a model the fuzzed fleet's capacity plan declares at zero nodes (bench/fuzz.py): a request for it waits for a node
# (controlplane/cold_start.py) for half a second, then is refused
COLD_MODEL = "fuzz-cold-pool"
# a deeply nested JSON text (not a JSON value: never closed), as a schema's text
DEEP_SCHEMA = '{"a":' * 5000
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
    lambda r: {"json": r.choice([DEEP_SCHEMA, "{bad", '{"type": "nonsense"}', "[1]", '"x"'])},
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

# --------------------------------------------------------------------------- wire

CLIENT_TYPES = [MsgType.CLIENT_GENERATE, MsgType.CANCEL, MsgType.PING, MsgType.PROBE_SNAPSHOT]
AGENT_TYPES = [
    MsgType.NODE_HELLO, MsgType.HEARTBEAT, MsgType.LOAD_REPORT, MsgType.NODE_LEAVE, MsgType.TOKENS, MsgType.ERROR,
    MsgType.PONG, MsgType.NODE_TELEMETRY, MsgType.TOKEN_CHUNKS,
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
            model=COLD_MODEL if r.random() < 0.1 else "",  # held for a node that never comes, then refused
            prompt="hello" if kind == "prompt" else None,
            messages=[ChatMessage("user", "hi")] if kind == "messages" else None,
            tools=r.choice(TOOLS_WIRE) if kind != "ids" and r.random() < 0.2 else None,
            prompt_token_ids=[r.randint(0, 258) for _ in range(r.randint(1, 8))] if kind == "ids" else None,
            sampling=random_sampling(r),
            priority=r.choice([0, 0, 0, 1, -1, 2**31 - 1, -(2**31), 2**31, 2**63 - 1]),
            trace_headers=r.choice([None, None, {"traceparent": f"00-{r.getrandbits(128):032x}-{1:016x}-01"},
                                    {"traceparent": "x" * r.choice([1, 55, 600])}, {"tracestate": "a=b"}]),
            chat=r.choice([None, None, None, *CHAT_OPTIONS_WIRE]) if kind != "ids" or r.random() < 0.1 else None,
            return_prompt_token_ids=r.random() < 0.2,
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


def wake_node(request_id: str, node_id: str) -> list[bytes]:
    """The liveness check's first ask: wake the node (a fuzzed SleepControl may have put it to sleep)."""
    return [bytes(f) for f in encode(SleepControl(request_id=request_id, action="wake_up", node_id=node_id))]


def valid_client_request(request_id: str) -> list[bytes]:
    """A request that must be served (the liveness check)."""
    msg = ClientGenerate(request_id=request_id, prompt="ping", sampling=SamplingParams(max_tokens=2))
    return [bytes(f) for f in encode(msg)]
