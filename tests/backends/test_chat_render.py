"""A chat's prompt text (backends/chat_render.py): vLLM's add_generation_prompt / continue_final_message /
chat_template_kwargs over SmolLM2's own chat template (the real tokenizer) and small templates made here."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.chat_render import continued, render_chat
from backends.checkpoint.chat_template import ChatTemplate
from backends.fake.byte_tokenizer import ByteTokenizer
from engine.prompt import PromptError
from transport.chat_wire import ChatMessage, ChatTemplateOptions, ToolCall

ASK = [ChatMessage("user", "Name a colour.")]
PREFILL = ChatTemplateOptions(add_generation_prompt=False, continue_final_message=True)


class Templated:
    """A tokenizer whose chat template is ``source`` (the checkpoint's ChatTemplate, as a real one renders)."""

    def __init__(self, source: str) -> None:
        self.template = ChatTemplate(source)

    def apply_chat_template(self, messages, add_generation_prompt=True, tools=None, template_kwargs=None):
        return self.template.render(
            messages, add_generation_prompt=add_generation_prompt, tools=tools, variables=template_kwargs
        )


THINKING = Templated(
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% if enable_thinking %}<think>{% endif %}{% endif %}"
)


@pytest.fixture(scope="module")
def smollm(smollm2_checkpoint):
    return smollm2_checkpoint.tokenizer


def test_a_new_reply_by_default_as_before(smollm):
    text = render_chat(smollm, ASK)
    assert text == smollm.apply_chat_template([{"role": "user", "content": "Name a colour."}])
    assert text.endswith("<|im_start|>assistant\n")


def test_continue_final_message_ends_inside_the_prefilled_reply(smollm):
    text = render_chat(smollm, [*ASK, ChatMessage("assistant", "My favourite is")], options=PREFILL)
    new_reply = render_chat(smollm, ASK)
    assert text == new_reply + "My favourite is"  # SmolLM2's template: the header, then the text, left open
    assert "<|im_end|>" not in text[len(new_reply) :]
    closed = render_chat(smollm, [*ASK, ChatMessage("assistant", "My favourite is")], options=ChatTemplateOptions())
    assert closed.startswith(text) and closed[len(text) :].startswith("<|im_end|>")  # without it: a closed turn


def test_an_empty_assistant_message_continued_is_a_new_reply(smollm):
    assert render_chat(smollm, [*ASK, ChatMessage("assistant", "")], options=PREFILL) == render_chat(smollm, ASK)
    assert render_chat(smollm, [*ASK, ChatMessage("assistant", "  ")], options=PREFILL) == render_chat(smollm, ASK)


@pytest.mark.parametrize(
    ("messages", "options", "param"),
    [
        (ASK, ChatTemplateOptions(continue_final_message=True), "continue_final_message"),  # both flags: vLLM's 400
        ([ChatMessage("user", "")], PREFILL, "continue_final_message"),  # an empty user message: nothing to go on
        ([*ASK, ChatMessage("assistant", "", (ToolCall("c1", "f", "{}"),))], PREFILL, "continue_final_message"),
        (ASK, ChatTemplateOptions(template_kwargs={"messages": []}), "chat_template_kwargs"),
        (ASK, ChatTemplateOptions(template_kwargs={"bos_token": "x"}), "chat_template_kwargs"),
        ([], None, "messages"),
    ],
)
def test_refusals_name_the_field(smollm, messages, options, param):
    with pytest.raises(PromptError) as refused:
        render_chat(smollm, messages, options=options)
    assert refused.value.param == param


def test_template_kwargs_reach_a_template_that_reads_them_and_others_are_dropped():
    plain = render_chat(THINKING, ASK)
    assert plain.endswith("<assistant>")
    thinking = render_chat(THINKING, ASK, options=ChatTemplateOptions(template_kwargs={"enable_thinking": True}))
    assert thinking == plain + "<think>"
    unread = ChatTemplateOptions(template_kwargs={"reasoning": "high", "nested": {"a": [1, 2]}})
    assert render_chat(THINKING, ASK, options=unread) == plain  # vLLM's rule: what the template does not read


def test_a_template_that_does_not_render_the_final_text_cannot_continue_it():
    silent = Templated("{% for m in messages %}<{{ m.role }}>{% endfor %}")
    with pytest.raises(PromptError) as refused:
        render_chat(silent, [*ASK, ChatMessage("assistant", "Blue")], options=PREFILL)
    assert refused.value.param == "continue_final_message"


def test_the_cut_keeps_trailing_space_only_where_the_template_kept_it():
    # transformers' rule: after the content's last occurrence; with its trailing spaces where they were rendered
    assert continued("<a>Hello </a>", "Hello ") == "<a>Hello "
    assert continued("<a>Hello</a>", "Hello ") == "<a>Hello"  # the template stripped it
    assert continued("<u>Hi</u><a>Hi</a>", "Hi") == "<u>Hi</u><a>Hi"  # the last occurrence
    with pytest.raises(PromptError):
        continued("<a></a>", "   ")


def test_the_fake_tokenizers_continue_too():
    text = render_chat(ByteTokenizer(), [*ASK, ChatMessage("assistant", "Red, or")], options=PREFILL)
    assert text == "user: Name a colour.\nassistant: Red, or"


def test_a_variable_the_template_chokes_on_is_the_callers_error():
    arithmetic = Templated("{{ messages[0].content }}{{ 1 + depth }}")
    with pytest.raises(PromptError) as refused:
        render_chat(arithmetic, ASK, options=ChatTemplateOptions(template_kwargs={"depth": {"a": 1}}))
    assert refused.value.param == "messages"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    kwargs=st.dictionaries(st.sampled_from(["enable_thinking", "messages", "x", "tools", ""]), JSON, max_size=3),
    final=st.text(max_size=12),
    add=st.booleans(),
    cont=st.booleans(),
)
def test_any_options_render_or_are_refused_by_name(kwargs, final, add, cont):
    options = ChatTemplateOptions(add_generation_prompt=add, continue_final_message=cont, template_kwargs=kwargs)
    try:
        text = render_chat(THINKING, [*ASK, ChatMessage("assistant", final)], options=options)
    except PromptError as refused:
        assert refused.param in ("continue_final_message", "chat_template_kwargs", "messages")
    else:
        assert isinstance(text, str)
