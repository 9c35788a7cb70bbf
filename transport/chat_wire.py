"""A chat request's parts on the wire: its messages, the tools it may call, and how its template renders it.

``ClientGenerate`` (transport/messages.py) carries them; the control plane's intake renders them with the model's
chat template (backends/chat_render.py).
"""

from __future__ import annotations

from typing import Any

import msgspec


class ToolCall(msgspec.Struct, frozen=True):
    """A function call an assistant made: ``arguments`` is JSON text as the model wrote it."""

    id: str
    name: str
    arguments: str


class ChatMessage(msgspec.Struct, frozen=True):
    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant message's calls (the conversation so far)
    tool_call_id: str | None = None  # a "tool" message: the call it answers


class ToolSpec(msgspec.Struct, frozen=True):
    """A function the model may call (OpenAI's ``tools[].function``; ``parameters``: its JSON schema's text or "")."""

    name: str
    description: str = ""
    parameters: str = ""


class ChatTemplateOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How the chat template renders the messages (vLLM's chat-completion extensions, the same names).

    add_generation_prompt: end with the header of a new assistant message (the default).
    continue_final_message: end inside the last message instead, so the model continues it (an assistant's
        prefilled start: vLLM's, and what Anthropic's API does with a final assistant message). Not with
        ``add_generation_prompt``.
    template_kwargs: vLLM's ``chat_template_kwargs``: more variables for the template; the ones it does not read
        are dropped (vLLM's rule), the ones the renderer sets itself refused (backends/chat_render.py).
    tool_format: how a template that cannot show tools gets them, the calls and the results written into its
        messages (backends/tool_prompt_formats.py: hermes, llama3_json, mistral, pythonic): the gateway's tool-call
        parser's format, so the model is asked to write what is read back.
    """

    add_generation_prompt: bool = True
    continue_final_message: bool = False
    template_kwargs: dict[str, Any] | None = None
    tool_format: str = "hermes"


DEFAULT_CHAT_OPTIONS = ChatTemplateOptions()  # a new reply, no extra variables: sent as None on the wire
