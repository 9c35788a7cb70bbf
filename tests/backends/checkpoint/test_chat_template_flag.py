"""``--chat-template`` (vLLM's flag): read_chat_template's rule (a file, else an inline template, else a refused
path), Tokenizer.with_chat_template (the model's own left as it was), `zoo controlplane --chat-template` rendering
the fleet's chats with it, `zoo generate` refusing it for a tokenizer without templates, and a request's own
``chat_template`` refused by name."""

from __future__ import annotations

import pytest

from backends.checkpoint.chat_template import read_chat_template
from zoo.cli import build_parser, main
from zoo.serve import controlplane_from_args

INLINE = "{% for m in messages %}<<{{ m['role'] }}|{{ m['content'] }}>>{% endfor %}{% if add_generation_prompt %}>>{% endif %}"  # noqa: E501
USER = [{"role": "user", "content": "Hi"}]


def test_a_file_an_inline_template_and_refusals(tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text(INLINE + "\n")
    assert read_chat_template(str(path)) == INLINE + "\n"
    assert read_chat_template(INLINE) == INLINE  # no such file, and Jinja characters: the template itself
    with pytest.raises(ValueError, match="looks like a file path, but it did not open"):
        read_chat_template(str(tmp_path / "missing.jinja"))
    with pytest.raises(ValueError, match="looks like a file path"):
        read_chat_template(str(tmp_path))  # a directory
    with pytest.raises(ValueError, match="--chat-template: the chat template does not parse"):
        read_chat_template("{% for m in messages %}")
    with pytest.raises(ValueError, match="empty"):
        read_chat_template("")
    assert read_chat_template("a\x00{") == "a\x00{"  # a NUL cannot be a path: taken as written


def test_a_tokenizer_with_another_template_leaves_the_models_alone(smollm_tokenizer):
    own = smollm_tokenizer.apply_chat_template(USER)
    other = smollm_tokenizer.with_chat_template(INLINE)
    assert other.apply_chat_template(USER) == "<<user|Hi>>>>" and other.chat_template == INLINE
    assert smollm_tokenizer.apply_chat_template(USER) == own != "<<user|Hi>>>>"
    assert other.encode("Hi") == smollm_tokenizer.encode("Hi") and other.vocab_size == smollm_tokenizer.vocab_size


def test_zoo_controlplane_renders_chats_with_it(smollm_checkpoint, monkeypatch, capsys):
    monkeypatch.setattr("backends.checkpoint.load_checkpoint", lambda path=None: smollm_checkpoint)  # loaded once
    monkeypatch.setattr("zoo.serve.configure_logging_from_args", lambda *a: None)  # the process keeps its logging
    cp = controlplane_from_args(build_parser().parse_args(["controlplane", "--chat-template", INLINE]))
    assert cp.tokenizer.apply_chat_template(USER) == "<<user|Hi>>>>"
    assert smollm_checkpoint.tokenizer.chat_template != INLINE  # the session's checkpoint is as it was
    assert main(["controlplane", "--fake-tokenizer", "--chat-template", INLINE]) == 2
    assert "the fake and sim tokenizers have no chat template" in capsys.readouterr().err
    assert main(["controlplane", "--chat-template", "no/such/template.jinja"]) == 2  # before the model loads
    assert "looks like a file path" in capsys.readouterr().err


def test_zoo_generate_refuses_it_for_a_tokenizer_without_templates(monkeypatch, capsys):
    from backends.fake import build_trivial_engine

    monkeypatch.setattr("backends.builder.build_engine", lambda config, progress=True: build_trivial_engine())
    assert main(["generate", "Hi", "--chat", "--chat-template", INLINE, "--quiet", "--max-tokens", "1"]) == 2
    assert "has no chat template to replace" in capsys.readouterr().err
