"""`zoo generate`'s structured-output flags and the StructuredOutput they make (engine/structured_output.py).

    --json-schema TEXT|@PATH   the output is JSON that a JSON schema (an object or a boolean) accepts
    --json-object              the output is a JSON object
    --regex TEXT               the output matches a regex (Rust's syntax, as llguidance reads it)
    --choice TEXT              the output is exactly one of these (repeatable)
    --grammar TEXT|@PATH       the output follows a Lark grammar

At most one of them (argparse refuses two). ``@PATH`` reads the text from a file of at most 64 KiB. The constraint is
checked and compiled (backends/grammar.py, no tokenizer needed) before the model loads: a bad one is a
SamplingParamsError naming ``structured_outputs`` and the flag (`zoo generate` exits 2), not a refusal after the load.
"""

from __future__ import annotations

import argparse

import msgspec

from engine.sampling_params import SamplingParamsError
from engine.structured_output import MAX_SPEC_CHARS, StructuredOutput, StructuredOutputError

MAX_FILE_BYTES = MAX_SPEC_CHARS  # a file's text is at most this many characters too
_json_decode = msgspec.json.decode


def add_structured_output_args(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("structured outputs (at most one)").add_mutually_exclusive_group()
    group.add_argument("--json-schema", metavar="TEXT|@PATH", help="JSON that this JSON schema accepts")
    group.add_argument("--json-object", action="store_true", help="a JSON object")
    group.add_argument("--regex", metavar="TEXT", help="text that matches this regex")
    group.add_argument("--choice", action="append", metavar="TEXT", help="exactly one of these (repeatable)")
    group.add_argument("--grammar", metavar="TEXT|@PATH", help="text that follows this Lark grammar")


def structured_output_from_args(args: argparse.Namespace) -> StructuredOutput | None:
    """The flags' constraint, checked and compiled; None without one. Raises SamplingParamsError naming the flag."""
    if args.json_schema is not None:
        flag, spec = (
            "--json-schema",
            StructuredOutput(json=_json_schema(_text_or_file("--json-schema", args.json_schema))),
        )
    elif args.json_object:
        flag, spec = "--json-object", StructuredOutput(json_object=True)
    elif args.regex is not None:
        flag, spec = "--regex", StructuredOutput(regex=args.regex)
    elif args.choice:
        flag, spec = "--choice", StructuredOutput(choice=tuple(args.choice))
    elif args.grammar is not None:
        flag, spec = "--grammar", StructuredOutput(grammar=_text_or_file("--grammar", args.grammar))
    else:
        return None
    from backends.grammar import check

    try:
        spec.check()  # shapes and sizes, as SamplingParams checks them, but naming the flag
        check(spec)  # compiles
    except StructuredOutputError as error:
        raise _error(flag, str(error)) from None
    return spec


def _text_or_file(flag: str, value: str) -> str:
    """``value``, or the text of the file it names as ``@PATH`` (UTF-8, at most MAX_FILE_BYTES)."""
    if not value.startswith("@"):
        return value
    path = value[1:]
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise _error(flag, f"{path!r} is larger than {MAX_FILE_BYTES // 1024} KiB")
        return data.decode("utf-8")
    except OSError as error:
        raise _error(flag, f"cannot read {path!r}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise _error(flag, f"{path!r} is not UTF-8 text") from None


def _json_schema(text: str) -> str:
    """``text`` when it is a JSON object or boolean (a schema's two forms)."""
    try:
        schema = _json_decode(text)
    except (msgspec.DecodeError, RecursionError) as error:
        raise _error("--json-schema", f"not JSON: {error}") from None
    if not isinstance(schema, (dict, bool)):
        raise _error("--json-schema", f"a schema is a JSON object or boolean, got {type(schema).__name__}")
    return text


def _error(flag: str, message: str) -> SamplingParamsError:
    return SamplingParamsError("structured_outputs", f"{flag}: {message}")
