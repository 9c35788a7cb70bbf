"""A chat request's prompt text: its messages and tools through the model's chat template, as vLLM renders them.

    render_chat(tokenizer, messages, tools, options)
      ├─ options: add_generation_prompt (a new assistant message starts) or continue_final_message (the last
      │  message stays open and the model continues it), never both; template_kwargs: more template variables
      ├─ tokenizer.apply_chat_template(messages, add_generation_prompt, tools, template_kwargs)
      └─ continue_final_message: the text cut right after the last message's content (Hugging Face's rule,
         transformers' ``apply_chat_template``: the content's last occurrence, keeping its trailing spaces when
         the template kept them), so the end-of-turn tokens after it are gone
      └─ tool_format: a template that cannot show tools gets them written into its messages in that format
         (backends/tool_prompt_formats.py), passed on only when it is not the default (Hermes)

vLLM's rules (vllm/entrypoints/openai/chat_completion/protocol.py, ``check_generation_prompt``; vllm/entrypoints/
chat_utils.py, ``resolve_chat_template_kwargs``): both flags set is an error; a template variable the template
does not read is dropped. Here the variables the renderer sets itself (the messages, the tools, the flags, the
special tokens, the template's functions) are refused in ``template_kwargs`` rather than passed on to collide.
An empty final assistant message continued is a new assistant message (nothing to continue). Every refusal is a
PromptError naming the request field at fault; the control plane's intake and /tokenize both render through here.
"""

from __future__ import annotations

from typing import Any

from backends.hermes_tools import template_messages, template_tools
from backends.tool_prompt_formats import DEFAULT_TOOL_FORMAT, check_tool_format
from engine.prompt import PromptError
from transport.chat_wire import DEFAULT_CHAT_OPTIONS, ChatMessage, ChatTemplateOptions, ToolSpec

RESERVED_VARIABLES = frozenset(
    {"messages", "tools", "add_generation_prompt", "continue_final_message", "bos_token", "eos_token", "pad_token"}
    | {"raise_exception", "strftime_now"}
)


def render_chat(
    tokenizer: Any,
    messages: list[ChatMessage],
    tools: list[ToolSpec] | None = None,
    options: ChatTemplateOptions | None = None,
) -> str:
    """The prompt text of a chat; PromptError naming the field at fault (``messages``, ``tools``,
    ``continue_final_message``, ``chat_template_kwargs``; ``tools`` for an unknown ``tool_format`` too)."""
    options = options or DEFAULT_CHAT_OPTIONS
    if not messages:
        raise PromptError("messages must not be empty", "messages")
    if options.add_generation_prompt and options.continue_final_message:
        message = "cannot set both continue_final_message and add_generation_prompt to true"
        raise PromptError(message, "continue_final_message")
    variables = options.template_kwargs or None
    if variables:
        reserved = sorted(RESERVED_VARIABLES.intersection(variables))
        if reserved:
            raise PromptError(
                f"{reserved[0]!r} is set by the request itself, not a template variable", "chat_template_kwargs"
            )
    try:
        template_functions = template_tools(tools)
        check_tool_format(options.tool_format)
    except ValueError as e:
        raise PromptError(str(e), "tools") from None
    final = messages[-1]
    add_generation_prompt = options.add_generation_prompt
    if options.continue_final_message:
        if final.tool_calls:
            raise PromptError(
                "the final message has tool calls: there is no text to continue", "continue_final_message"
            )
        if not final.content.strip():  # nothing to continue: the reply starts a new message
            if final.role != "assistant":
                message = f"the final message ({final.role}) is empty: only an empty assistant message starts the reply"
                raise PromptError(message, "continue_final_message")
            messages, add_generation_prompt = messages[:-1], True
    try:  # a template may refuse the messages (raise_exception): the client's error
        text = tokenizer.apply_chat_template(
            template_messages(messages),
            add_generation_prompt=add_generation_prompt,
            tools=template_functions,
            **({"template_kwargs": variables} if variables else {}),  # a tokenizer without variables takes none
            **({"tool_format": options.tool_format} if options.tool_format != DEFAULT_TOOL_FORMAT else {}),
        )
    except ValueError as e:
        raise PromptError(str(e), "messages") from None
    if options.continue_final_message and final.content.strip():
        text = continued(text, final.content)
    return text


def continued(text: str, content: str) -> str:
    """``text`` cut right after the last occurrence of ``content`` (the final message's), as transformers'
    ``apply_chat_template(continue_final_message=True)`` cuts it: with its trailing spaces where the template kept
    them, else after its stripped form; PromptError when the template did not render it."""
    stripped = content.strip()
    at = text.rfind(stripped)
    if not stripped or at < 0:
        message = "the chat template does not render the final message's text, so it cannot be continued"
        raise PromptError(message, "continue_final_message")
    kept = content.lstrip()
    if text[at : at + len(kept)] == kept:
        return text[: at + len(kept)]
    return text[: at + len(stripped)]
