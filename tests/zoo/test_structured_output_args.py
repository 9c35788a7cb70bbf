"""`zoo generate`'s structured-output flags: each makes its StructuredOutput (a file's text for ``@PATH``), checked and
compiled before any model loads; a bad one is a SamplingParamsError naming ``structured_outputs`` and the flag."""

from __future__ import annotations

import pytest

from engine.sampling_params import SamplingParamsError
from engine.structured_output import StructuredOutput
from zoo.cli import _sampling_from_args, build_parser
from zoo.structured_output_args import MAX_FILE_BYTES, structured_output_from_args


def _spec(*flags: str) -> StructuredOutput | None:
    return structured_output_from_args(build_parser().parse_args(["generate", "hi", *flags]))


def _refusal(*flags: str) -> SamplingParamsError:
    with pytest.raises(SamplingParamsError) as e:
        _spec(*flags)
    assert e.value.field == "structured_outputs"
    return e.value


def test_each_flag_makes_its_constraint():
    assert _spec() is None
    assert _spec("--json-schema", '{"type": "object"}') == StructuredOutput(json='{"type": "object"}')
    assert _spec("--json-schema", "true") == StructuredOutput(json="true")
    assert _spec("--json-object") == StructuredOutput(json_object=True)
    assert _spec("--regex", "[0-9]{3}") == StructuredOutput(regex="[0-9]{3}")
    assert _spec("--choice", "yes", "--choice", "no") == StructuredOutput(choice=("yes", "no"))
    assert _spec("--grammar", 'start: "a" | "b"') == StructuredOutput(grammar='start: "a" | "b"')
    args = build_parser().parse_args(["generate", "hi", "--choice", "yes", "--temperature", "0"])
    assert _sampling_from_args(args).structured_outputs == StructuredOutput(choice=("yes",))


@pytest.mark.parametrize(
    ("flags", "said"),
    [(("--json-schema", "{bad"), "not JSON"), (("--json-schema", '"x"'), "got str"),
     (("--json-schema", "[" * 100_000 + "]" * 100_000), "not JSON"),
     (("--json-schema", '{"a":' * 5000), "not JSON"), (("--json-schema", ""), "not JSON"),
     (("--json-schema", '{"type": "nonsense"}'), "does not compile"), (("--regex", "[a-"), "does not compile"),
     (("--regex", ""), "1 to"), (("--regex", "x" * 70 * 1024), "1 to"), (("--grammar", "start: x"), "does not compile"),
     (("--choice", "a", "--choice", ""), "1 to"), (("--choice", "a" * 1025), "1 to")],
)  # fmt: skip
def test_a_bad_value_names_its_flag(flags, said):
    error = _refusal(*flags)
    assert str(error).startswith(f"structured_outputs: {flags[0]}: ") and said in str(error)


def test_too_many_choices_name_the_bound():
    assert "1 to 256" in str(_refusal(*[arg for i in range(300) for arg in ("--choice", str(i))]))


def test_at_path_reads_a_file_of_at_most_64_kib(tmp_path):
    schema, grammar = tmp_path / "schema.json", tmp_path / "g.lark"
    schema.write_text('{"type": "object", "properties": {"n": {"type": "integer"}}}')
    grammar.write_text('start: "yes" | "no"\n')
    assert _spec("--json-schema", f"@{schema}") == StructuredOutput(json=schema.read_text())
    assert _spec("--grammar", f"@{grammar}") == StructuredOutput(grammar=grammar.read_text())
    grammar.write_text('start: "a"\n'.ljust(MAX_FILE_BYTES))  # exactly the bound: read
    assert _spec("--grammar", f"@{grammar}") == StructuredOutput(grammar=grammar.read_text())
    grammar.write_text('start: "a"\n'.ljust(MAX_FILE_BYTES + 1))
    assert "larger than 64 KiB" in str(_refusal("--grammar", f"@{grammar}"))
    (tmp_path / "bytes.json").write_bytes(b'{"\xff": 1}')
    assert "not UTF-8" in str(_refusal("--json-schema", f"@{tmp_path / 'bytes.json'}"))
    for missing in (tmp_path / "none.json", tmp_path):  # absent; a directory
        assert "cannot read" in str(_refusal("--json-schema", f"@{missing}"))


@pytest.mark.parametrize(
    ("flags", "field"),
    [(("--choice", "a", "--min-tokens", "1"), "min_tokens"), (("--regex", "a", "--allowed-token-id", "2"),
     "allowed_token_ids")],
)  # fmt: skip
def test_a_clashing_sampling_flag_is_named(flags, field):
    with pytest.raises(SamplingParamsError) as e:
        _sampling_from_args(build_parser().parse_args(["generate", "hi", *flags]))
    assert e.value.field == field


def test_two_kinds_at_once_are_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "hi", "--regex", "a", "--json-object"])
    assert "not allowed with argument --regex" in capsys.readouterr().err
