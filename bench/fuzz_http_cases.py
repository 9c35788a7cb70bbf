"""HTTP fuzz cases for `zoo bench fuzz` (bench/fuzz_cases.py has the wire's), from one seeded RNG.

    HttpCases(rng).next()        ─► HttpCase(kind, method, path, body, headers)  (or raw bytes for the socket)
        (a chat body goes to /v1/chat/completions or, one time in ten or so, to Anthropic's /v1/messages or its
        count_tokens; a Responses API body (background or with logprobs one time in ten), one time in twelve or so,
        to /v1/responses (or its input_tokens count), its tools its own:
        RESPONSES_TOOLS_HTTP; a completion's prompt, one time in sixteen or so, as an embeddings (or /pooling) input,
        and one time in thirty or so as the texts of a score or rerank request (SCORE_PATHS); any of those one time
        in fifteen or so to SageMaker's /invocations instead; one time in fifteen, an OpenAI batch: a JSONL upload to
        /v1/files, or a batch created over an uploaded file, or an Anthropic message batch, or OpenAI's Uploads
        (created, a part, completed, cancelled: one time in seven or so); one
        time in fifteen, a Conversations API request: a conversation made, its items added or its metadata
        replaced, valid or not, or read or deleted (or, one time in three, a stored chat completion's request:
        a chat with ``store``, the list and its filters, one read, re-labelled, deleted or its messages paged); a
        Responses API body names a conversation one time in ten, made or not)
        valid chat/completion body ─┬─ a field set to a nasty JSON value (2**64, 10**300, 2,000+ deep,
                                    │  20k-item lists, 100 KB strings, wrong types)
                                    ├─ structured outputs: response_format, structured_outputs, guided_*, valid
                                    │  or not (STRUCTURED_HTTP), one or two at once
                                    ├─ tool calling: tools, tool_choice, parallel_tool_calls, a conversation with
                                    │  calls and results, valid or not (TOOLS_HTTP)
                                    ├─ truncated, random bytes, invalid UTF-8, not an object
                                    └─ random path / method; raw bytes that are barely HTTP

Sans-IO and deterministic: the same seed gives the same cases.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.fuzz_cases import COLD_MODEL, DEEP_SCHEMA


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
# a scraper's Accept header on /metrics (observe/exposition_names.py): Prometheus' own, OpenMetrics with versions and
# escapings valid or not (version=abc made prometheus_client raise), text, garbage
OM_VERSIONS = ["1.0.0", "0.0.1", "2.0.0", "abc", "", "1." * 50, "9" * 40]
OM_ESCAPINGS = [
    "",
    ";escaping=underscores",
    ";escaping=dots",
    ";escaping=values",
    ";escaping=allow-utf-8",
    ";escaping=",
]
ACCEPTS: list[Callable[[random.Random], str]] = [
    lambda r: "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    lambda r: "application/openmetrics-text;version=" + r.choice(OM_VERSIONS) + r.choice(OM_ESCAPINGS),
    lambda r: "text/plain;version=" + r.choice(["0.0.4", "1.0.0", "abc", ""]) + r.choice(["", ";escaping=underscores"]),
    lambda r: ";".join(r.choice(["application/openmetrics-text", "version", "=", "escaping", ",", "q=0.5", "x"])
                       for _ in range(r.randint(0, 30))),
    lambda r: "a" * r.choice([0, 100, 8_000]),
]  # fmt: skip
TRACESTATES: list[Callable[[random.Random], str]] = [
    lambda r: "vendor=abc,other=1",
    lambda r: ",".join(f"k{i}=v" for i in range(r.choice([33, 200]))),
    lambda r: "=" * r.randint(1, 100),
    lambda r: "a" * r.choice([512, 513, 9_000]),
]
REQUEST_IDS: list[Callable[[random.Random], str]] = [  # a caller's X-Request-Id (gateway/request_ids.py)
    lambda r: f"req-{r.getrandbits(64):x}",
    lambda r: "a" * r.choice([0, 128, 129, 9_000]),
    lambda r: r.choice(["has space", "semi;colon", "../../etc", "a/b:c=d+e@f", "\t", "%00"]),
    lambda r: "x-1",  # the same id again and again: each engine request apart
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
    lambda r: r.choice(
        [
            '{"include_obfuscation": true, "include_usage": true}',
            '{"include_obfuscation": "yes"}',
            '{"include_obfuscation": false, "continuous_usage_stats": true, "include_usage": true}',
        ]
    ),
]
HTTP_FIELDS = [
    "model", "messages", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "stop",
    "stop_token_ids", "ignore_eos", "seed", "n", "stream", "stream_options", "logprobs", "top_logprobs", "tools",
    "response_format", "logit_bias", "best_of", "echo", "suffix", "user", "unknown_field", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "min_p", "min_tokens", "allowed_token_ids", "structured_outputs",
    "guided_json", "guided_regex", "guided_choice", "guided_grammar", "tool_choice", "parallel_tool_calls",
    "prompt_logprobs", "truncate_prompt_tokens", "include_stop_str_in_output", "skip_special_tokens", "priority",
    "service_tier", "cache_salt", "bad_words", "continue_final_message", "add_generation_prompt",
    "chat_template_kwargs", "return_token_ids", "return_tokens_as_token_ids", "prediction",
    "include_reasoning", "reasoning_effort", "reasoning",  # reasoning models (gateway/reasoning_parsers.py)
    "thinking_token_budget",  # vLLM's (engine/thinking_budget.py)
    "use_beam_search", "length_penalty",  # vLLM's beam search (gateway/beam_search.py)
    "system", "stop_sequences", "thinking",  # Anthropic's (/v1/messages)
    "input", "instructions", "max_output_tokens", "previous_response_id", "store", "text", "include", "background",
    "metadata", "top_logprobs",  # OpenAI's Responses API (/v1/responses)
    "encoding_format", "dimensions",  # OpenAI's embeddings API (/v1/embeddings)
    "text_1", "text_2", "query", "documents", "top_n", "return_documents", "use_activation",  # vLLM's score, rerank
]  # fmt: skip
PROFILED_NODE = "fuzz-node"  # the fuzzed fleet's agent (bench/fuzz.py's NODE_ID), started with --profiler-config
HTTP_MUTATIONS = ["valid", "field", "field", "field", "structured", "tools", "truncate", "random bytes", "bad utf-8",
                  "not an object", "path", "method", "raw", "batch", "conversation", "operator"]  # fmt: skip
BATCH_ENDPOINTS = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/score",
                   "/v1/rerank"]  # fmt: skip
SCORE_PATHS = ["/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank"]
INVOCATION_PATHS = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", *SCORE_PATHS}  # /invocations' own
WINDOWS = ["24h"] * 5 + ["1h"]
MULTIPART = "multipart/form-data; boundary=zz"


def _json_schema_format(schema: str) -> str:
    return '{"type": "json_schema", "json_schema": {"name": "fz", "schema": ' + schema + ', "strict": true}}'


# (field, its JSON text): OpenAI's response_format, vLLM's structured_outputs and its older guided_* fields, well
# formed or not (a kind with no value, several kinds, past a bound, a spec that does not compile, wrong types)
STRUCTURED_HTTP: list[Callable[[random.Random], tuple[str, str]]] = [
    lambda r: ("response_format", r.choice(['{"type": "text"}', '{"type": "json_object"}'])),
    lambda r: ("response_format", _json_schema_format(r.choice(['{"type": "object"}', "true", '{"enum": ["a"]}']))),
    lambda r: ("response_format", _json_schema_format(r.choice(['"{bad"', "5", "[]", "null", DEEP_SCHEMA + "1"
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
    lambda r: ("structured_outputs", '{"json": ' + DEEP_SCHEMA + "1" + "}" * 5000 + "}"),
    lambda r: ("guided_json", r.choice(['{"type": "object"}', json.dumps('{"type": "object"}'), "true", '"{bad"',
                                        json.dumps(DEEP_SCHEMA), "5", "[]"])),
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
    lambda r: ("tools", '[{"type": "function", "function": {"name": "deep", "parameters": ' + DEEP_SCHEMA + "1"
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
        self.conversation_ids: list[str] = []  # conversations the gateway made (the campaign adds them)
        self.chat_ids: list[str] = []  # stored chat completions the gateway answered (the campaign adds them)
        self.upload_ids: list[str] = []  # uploads the gateway made (the campaign adds them)
        self.part_ids: list[str] = []  # parts it took

    def _conversation(self) -> str:
        r = self.rng
        if self.conversation_ids and r.random() < 0.8:
            return r.choice(self.conversation_ids[-8:])
        return r.choice(["conv_nope", "", "c" * r.randint(1, 5_000), "%2e%2e", "conv_%00"])

    def conversation_case(self) -> HttpCase:
        """OpenAI's Conversations API: a conversation created with items and metadata, items added, its metadata
        replaced (each valid or not), or a conversation, its items or one item read or deleted, known or not."""
        r = self.rng
        known = self._conversation()
        items = r.choice([
            [{"role": "user", "content": "hi"}],
            [{"role": "assistant", "content": [{"type": "output_text", "text": "yo"}]}, {"type": "function_call",
             "call_id": "c1", "name": "f", "arguments": "{}"}, {"type": "function_call_output", "call_id": "c1",
             "output": "1"}],
            [{"role": "user", "content": "x"}] * 21, [], [{"type": "reasoning"}], [{"role": "robot"}], "items",
            [{"role": "user", "content": "y" * 100_000}], [{"role": "user", "content": [{"type": "input_image"}]}],
        ])  # fmt: skip
        metadata = r.choice([{"k": "v"}, {f"k{i}": "v" for i in range(17)}, {"k" * 65: "v"}, {"k": "v" * 513},
                             {"k": 1}, None, [], "m"])  # fmt: skip
        choice = r.random()
        if choice < 0.4:
            body = {"items": items, "metadata": metadata} if r.random() < 0.5 else {"metadata": metadata}
            return HttpCase("conversation", path="/v1/conversations", body=json.dumps(body).encode())
        if choice < 0.7:
            body = json.dumps({"items": items}).encode()
            return HttpCase("conversation", path=f"/v1/conversations/{known}/items", body=body)
        if choice < 0.85:
            body = json.dumps({"metadata": metadata} if r.random() < 0.8 else {}).encode()
            return HttpCase("conversation", path=f"/v1/conversations/{known}", body=body)
        path = f"/v1/conversations/{known}" + r.choice(["", "/items", "/items/msg_nope", "/items/" + "i" * 3_000])
        path += r.choice(["", "?limit=0", "?limit=100&order=asc", "?after=msg_nope", "?order=" + "x" * 3_000])
        return HttpCase("conversation", method=r.choice(["GET", "GET", "DELETE"]), path=path, headers={})

    def stored_chat_case(self) -> HttpCase:
        """OpenAI's stored chat completions: a chat with ``store`` and metadata (valid or not), the list with its
        filters and cursor (valid or not), or one completion read, re-labelled, deleted or its messages paged,
        known or not."""
        r = self.rng
        metadata = r.choice([{"k": "v"}, {f"k{i}": "v" for i in range(17)}, {"k" * 65: "v"}, {"k": "v" * 513},
                             {"k": 1}, None, [], "m"])  # fmt: skip
        known = (
            r.choice(self.chat_ids[-8:])
            if self.chat_ids and r.random() < 0.8
            else r.choice(["chatcmpl-nope", "c" * r.randint(1, 5_000), "%2e%2e", "chatcmpl-%00"])
        )
        choice = r.random()
        if choice < 0.35:
            body = {**self.valid_body(True), "store": r.choice([True, True, False, "yes"]), "metadata": metadata}
            return HttpCase("conversation", path="/v1/chat/completions", body=json.dumps(body).encode())
        if choice < 0.55:
            query = r.choice(["", "?limit=0", "?limit=100&order=desc", "?after=chatcmpl-nope", "?model=smol",
                              "?metadata[k]=v", "?metadata%5Bk%5D=v&limit=1", "?order=" + "x" * 3_000,
                              f"?after={known}"])  # fmt: skip
            return HttpCase("conversation", method="GET", path="/v1/chat/completions" + query, headers={})
        if choice < 0.7:
            body = json.dumps({"metadata": metadata} if r.random() < 0.8 else {}).encode()
            return HttpCase("conversation", path=f"/v1/chat/completions/{known}", body=body)
        path = f"/v1/chat/completions/{known}" + r.choice(["", "/messages", "/messages?limit=1&order=desc"])
        return HttpCase("conversation", method=r.choice(["GET", "GET", "DELETE"]), path=path, headers={})

    def batch_case(self) -> HttpCase:
        """An upload of a JSONL file of batch requests (lines valid, mutated or broken; the multipart itself
        sometimes broken), or a batch created over an accepted file or a made-up one, its fields sometimes nasty."""
        r = self.rng
        if r.random() < 0.15:
            return self._upload_parts_case()
        if r.random() < 0.2:
            return self._message_batch_case()
        if r.random() < 0.5:
            return self._upload_case()
        known = r.choice(self.file_ids) if self.file_ids and r.random() < 0.8 else "file-nope"
        endpoint = r.choice([*BATCH_ENDPOINTS, "/v1/messages"])
        text = json.dumps({"input_file_id": known, "endpoint": endpoint, "completion_window": r.choice(WINDOWS)})
        if r.random() < 0.3:
            name = r.choice(["metadata", "input_file_id", "endpoint", "completion_window", "extra"])
            text = text[:-1] + f', "{name}": {r.choice(NASTY_JSON)(r)}}}'
        return HttpCase("batch", path="/v1/batches", body=text.encode())

    def _upload_parts_case(self) -> HttpCase:
        """OpenAI's Uploads: one created (fields valid or nasty), a part sent (multipart valid or broken, to a known
        upload or not), one completed (part ids known, made up, repeated; md5 or not) or cancelled."""
        r = self.rng
        known = (
            r.choice(self.upload_ids[-8:])
            if self.upload_ids and r.random() < 0.8
            else r.choice(["upload_nope", "u" * r.randint(1, 3000), "%2e%2e"])
        )
        choice = r.random()
        if choice < 0.3:
            body = {
                "bytes": r.choice([0, 5, 64, 2**31, -1]),
                "filename": r.choice(["f.jsonl", "", "\x00", "x" * 300]),
                "mime_type": r.choice(["text/jsonl", "jsonl", ""]),
                "purpose": r.choice(["batch", "user_data", "x"]),
            }
            text = json.dumps(body)
            if r.random() < 0.3:
                text = text[:-1] + f', "{r.choice(["bytes", "expires_after", "purpose"])}": {r.choice(NASTY_JSON)(r)}}}'
            return HttpCase("batch", path="/v1/uploads", body=text.encode())
        if choice < 0.6:
            data = r.choice([b"abcde", b"", b"x" * 70, b"\xff" * 3])
            form = (
                b'--zz\r\nContent-Disposition: form-data; name="data"; filename="b"\r\n\r\n' + data + b"\r\n--zz--\r\n"
            )
            if r.random() < 0.2:
                form = form[: r.randint(0, len(form))]
            return HttpCase("batch", path=f"/v1/uploads/{known}/parts", body=form, headers={"content-type": MULTIPART})
        if choice < 0.85:
            parts = r.sample(self.part_ids[-6:], min(len(self.part_ids[-6:]), r.randint(0, 3))) if self.part_ids else []
            body = {"part_ids": r.choice([parts, parts + parts[:1], ["part_nope"], "p"])}
            if r.random() < 0.3:
                body["md5"] = r.choice(["0" * 32, "x", None])
            return HttpCase("batch", path=f"/v1/uploads/{known}/complete", body=json.dumps(body).encode())
        return HttpCase("batch", path=f"/v1/uploads/{known}/cancel", body=b"")

    def _message_batch_case(self) -> HttpCase:
        """Anthropic's Message Batches: a batch of message requests (valid, mutated or broken; ids sometimes bad or
        repeated), or a made-up batch read, cancelled, deleted or its results asked for."""
        r = self.rng
        if r.random() < 0.3:
            made_up = r.choice(["msgbatch_nope", "msgbatch_" + "0" * 32, "batch_x", "%2e%2e", "m" * r.randint(1, 3000)])
            method, tail = r.choice([("GET", ""), ("DELETE", ""), ("POST", "/cancel"), ("GET", "/results")])
            return HttpCase("batch", method=method, path=f"/v1/messages/batches/{made_up}{tail}")
        requests = []
        for i in range(r.randint(0, 3)):
            custom_id = r.choice([f"m{i}", f"m{i}", "m", "bad id", "x" * 65])
            params = {
                "max_tokens": r.randint(0, 8),
                "messages": [{"role": "user", "content": "hi"}],
            }
            requests.append({"custom_id": custom_id, "params": params})
        text = json.dumps({"requests": requests})
        if r.random() < 0.3:
            text = text[:-1] + f', "{r.choice(["requests", "extra"])}": {r.choice(NASTY_JSON)(r)}}}'
        elif r.random() < 0.2:
            text = text[: r.randint(0, len(text))]
        return HttpCase("batch", path="/v1/messages/batches", body=text.encode())

    def _upload_case(self) -> HttpCase:
        r = self.rng
        endpoint = r.choice(BATCH_ENDPOINTS)
        if endpoint == "/v1/embeddings":
            body = {"input": "hi"}
        elif endpoint in ("/v1/score", "/v1/rerank"):
            body = self.score_body(endpoint, ["hi", "yo"])
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
        if r.random() < 0.1:  # a pool at zero nodes: held, then 503 (bench/fuzz.py)
            body["model"] = COLD_MODEL
        if r.random() < 0.1:  # vLLM's token-id options, with logprobs named by id now and then
            body["return_token_ids"] = True
            if r.random() < 0.5:
                body.update({"return_tokens_as_token_ids": True, "logprobs": True if chat else 2})
        return body

    def score_body(self, path: str, texts: list) -> dict:
        """A score or rerank body over ``texts`` (a prompt's: strings or token ids, which these refuse)."""
        r = self.rng
        if "rerank" in path:
            return {"query": texts[0], "documents": texts, "top_n": r.choice([0, 1, 5])}
        return {"text_1": texts[0] if r.random() < 0.7 else texts, "text_2": texts}

    def responses_body(self) -> dict:
        r = self.rng
        body: dict = {"input": r.choice(["hi", [{"role": "user", "content": "hi"}]]), "max_output_tokens": 3}
        if r.random() < 0.2:
            body["stream"] = True
        if r.random() < 0.1:  # a background one: answered at once, run by the gateway
            body["background"] = True
        if r.random() < 0.1:
            body.update(include=["message.output_text.logprobs"], top_logprobs=r.choice([0, 2, 20]))
        if r.random() < 0.1:  # a conversation continued (its items first, this response's added), or not one
            known = self._conversation()
            body["conversation"] = r.choice([known, {"id": known}, {}, 5, [known]])
        return body

    def operator_case(self) -> HttpCase:
        """vLLM's operator routes the fuzzed control plane serves: /start_profile and /stop_profile (every node, or
        the body's ``nodes``: the fleet's node, one it does not have, a wrong type, a deep or huge or broken body),
        /reset_prefix_cache, and vLLM's sleep mode (/sleep with a level and mode, good or not, /wake_up with tags,
        /is_sleeping: the liveness check wakes the node first)."""
        r = self.rng
        path = r.choice(["/start_profile", "/stop_profile", "/start_profile", "/stop_profile", "/reset_prefix_cache",
                         "/sleep", "/wake_up", "/wake_up", "/is_sleeping"])  # fmt: skip
        if path == "/sleep":
            level = r.choice(["1", "2", "0", "3", "-1", "one", "", "1" * 400, "2.0", "²", "\uff11", "1e9", " 2 "])
            path += f"?level={level}&mode={r.choice(['abort', 'wait', 'keep', '', 'x' * 300])}"
        elif path == "/wake_up" and r.random() < 0.5:
            tags = [r.choice(["weights", "kv_cache", "gpu", ""]) for _ in range(r.randint(1, 3))]
            path += "?" + "&".join(f"tags={tag}" for tag in tags)
        if path == "/is_sleeping":
            return HttpCase("operator", method="GET", path=path, body=b"")
        body = r.choice([
            b"", b"{}", json.dumps({"nodes": [PROFILED_NODE]}).encode(), b'{"nodes": "all"}', b'{"nodes": [1, null]}',
            json.dumps({"nodes": ["n" * r.randint(0, 20_000)] * r.randint(1, 50)}).encode(), b'{"nodes": []}',
            b'{"nodes": ' + b"[" * 5_000 + b"]" * 5_000 + b"}", r.randbytes(r.randint(0, 256)), b'{"nodes": ["',
            json.dumps({"nodes": [PROFILED_NODE], "stages": [0], "x": DEEP_SCHEMA}).encode(),
            b'{"gpu_type": "cpu"}', b'{"gpu_type": 5}', json.dumps({"cell": "c" * r.randint(0, 20_000)}).encode(),
            json.dumps({"nodes": [PROFILED_NODE], "gpu_type": "H100", "cell": None}).encode(),
        ])  # fmt: skip
        return HttpCase("operator", method="POST", path=path, body=body)

    def next(self) -> HttpCase:
        r = self.rng
        kind = r.choice(HTTP_MUTATIONS)
        if kind == "batch":
            return self.batch_case()
        if kind == "operator":
            return self.operator_case()
        if kind == "conversation":
            return self.stored_chat_case() if self.rng.random() < 0.3 else self.conversation_case()
        chat = r.random() < 0.5
        path = "/v1/chat/completions" if chat else "/v1/completions"
        if chat and r.random() < 0.3:  # Anthropic's: a chat body is one of its bodies too (of count_tokens' too)
            path = "/v1/messages" if r.random() < 0.8 else "/v1/messages/count_tokens"
        responses = chat and r.random() < 0.17
        if responses:  # or its count of input tokens (the same body)
            path = "/v1/responses" if r.random() < 0.9 else "/v1/responses/input_tokens"
        body = self.responses_body() if responses else self.valid_body(chat)
        if not chat and r.random() < 0.12:  # the prompt as an embeddings input (one, or a batch)
            path = "/v1/embeddings" if r.random() < 0.8 else "/pooling"  # or vLLM's pooling route, the same body
            body = {"input": body["prompt"], "encoding_format": r.choice(["float", "base64"])}
        elif not chat and r.random() < 0.07:  # or as the texts of a score or rerank request
            path = r.choice(SCORE_PATHS)
            prompt = body["prompt"]
            body = self.score_body(path, prompt if isinstance(prompt, list) and prompt else [prompt])
        if path in ("/v1/chat/completions", "/v1/completions") and r.random() < 0.05:  # vLLM's render: ids, no tokens
            path += "/render"
        if path == "/v1/completions" and r.random() < 0.1:  # vLLM's tokens API: a token prompt, sampling_params
            path = "/inference/v1/generate"
            sampling = {k: v for k, v in body.items() if k not in ("model", "prompt", "stream", "stream_options")}
            body = {"token_ids": [r.randint(-2, 70_000) for _ in range(r.randint(0, 40))], "sampling_params": sampling,
                    "stream": body.get("stream", False), "request_id": "r" * r.randint(0, 300)}  # fmt: skip
        if path in INVOCATION_PATHS and r.random() < 0.07:  # SageMaker's path: the same body, routed by its shape
            path = "/invocations"
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
            path = r.choice(["/health", "/metrics", "/load", "/v1/models", "/v1/models/" + "m" * r.randint(0, 5_000),
                             "/tokenizer_info", "/nope", "/v1/" + "x" * r.randint(0, 20_000),
                             "/v1/completions/..%2f..%2fetc",
                             "/v1/responses/resp_" + "r" * r.randint(0, 5_000),
                             "/v1/responses/resp_" + "r" * r.randint(0, 50) + "/cancel",
                             "/v1/responses/resp_r?stream=true&starting_after=" + r.choice(["0", "-1", "x" * 3000]),
                             "/v1/responses/x/input_items?limit=" + r.choice(["0", "5", "x" * 3000, "-"]),
                             "/v1/files?" + r.choice(["limit=0", "order=up", "after=x", "purpose=batch"]),
                             "/v1/files/" + r.choice([*self.file_ids[-3:], "file-" + "f" * r.randint(0, 5_000)]),
                             "/v1/files/" + r.choice([*self.file_ids[-3:], "nope"]) + "/content",
                             "/v1/batches?limit=" + r.choice(["0", "5", "101", "x" * 3000]),
                             "/v1/batches/batch_" + "b" * r.randint(0, 5_000)])  # fmt: skip
            headers = {"accept": r.choice(ACCEPTS)(r)} if path == "/metrics" and r.random() < 0.7 else {}
            return HttpCase(kind, method=method, path=path, headers=headers)
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
            if r.random() < 0.5:
                headers["x-request-id"] = r.choice(REQUEST_IDS)(r)
            return HttpCase(kind, path=path, body=text.encode(), headers=headers)
        return HttpCase(kind, path=path, body=text.encode())
