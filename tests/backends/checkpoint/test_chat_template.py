from __future__ import annotations

import pytest

from backends.checkpoint.chat_template import ChatTemplate

USER = [{"role": "user", "content": "héllo"}]


def test_raise_exception_becomes_value_error() -> None:
    template = ChatTemplate(
        "{% if messages[0]['role'] != 'system' %}{{ raise_exception('first message must be system') }}{% endif %}"
    )
    with pytest.raises(ValueError, match="first message must be system"):
        template.render(USER)


def test_transformers_extras_render() -> None:
    template = ChatTemplate(
        "{{ bos_token }}{% for m in messages %}{% generation %}{{ m | tojson }}{% endgeneration %}"
        "{% if loop.index > 5 %}{% break %}{% endif %}{% endfor %}{{ strftime_now('%Y')[:2] }}"
    )
    rendered = template.render(USER, special_tokens={"bos_token": "<s>"})
    assert rendered.startswith('<s>{"role": "user", "content": "héllo"}')
    assert rendered.endswith("20")


def test_trim_and_lstrip_blocks() -> None:
    template = ChatTemplate("{% for m in messages %}\n  {% if m %}{{ m['content'] }}{% endif %}\n{% endfor %}")
    assert template.render(USER) == "héllo"


def test_sandbox_blocks_mutation() -> None:
    with pytest.raises(ValueError, match="rejected"):
        ChatTemplate("{{ messages.append(1) }}").render(USER)


def test_syntax_error_is_value_error() -> None:
    with pytest.raises(ValueError, match="does not parse"):
        ChatTemplate("{% for m in messages %}")


def test_template_without_generation_prompt_flag() -> None:
    template = ChatTemplate("{% if add_generation_prompt %}GEN{% endif %}")
    assert template.render(USER, add_generation_prompt=True) == "GEN"
    assert template.render(USER, add_generation_prompt=False) == ""
