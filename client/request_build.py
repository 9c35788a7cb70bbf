"""What one ``generate`` call sends: its keywords as the ClientGenerate the control plane decodes.

``AsyncZooClient.generate(prompt, *, stream=..., **options)`` (client/zoo_client.py) passes ``options`` here, so
this signature is the client's request API. Values are not checked here: the control plane validates a request once,
when it decodes it (engine/sampling_params.py, backends/chat_render.py), and a refusal comes back as a ZooError naming
the field.
"""

from __future__ import annotations

from typing import Any

from engine.sampling_params import SamplingParams
from engine.structured_output import StructuredOutput
from transport.chat_wire import DEFAULT_CHAT_OPTIONS, ChatMessage, ChatTemplateOptions, ToolSpec
from transport.messages import ClientGenerate


def build_request(
    request_id: str,
    prompt: str | None = None,
    *,
    messages: list[dict[str, str]] | list[ChatMessage] | None = None,
    prompt_token_ids: list[int] | None = None,
    max_tokens: int = 16,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int | None = None,
    stop: list[str] | str | None = None,
    stop_token_ids: list[int] | None = None,
    ignore_eos: bool = False,
    logprobs: int | None = None,
    prompt_logprobs: int | None = None,
    truncate_prompt_tokens: int | None = None,
    include_stop_str_in_output: bool = False,
    skip_special_tokens: bool = True,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    repetition_penalty: float = 1.0,
    logit_bias: dict[int, float] | None = None,
    min_p: float = 0.0,
    min_tokens: int = 0,
    allowed_token_ids: list[int] | None = None,
    bad_words: list[str] | None = None,
    structured_outputs: StructuredOutput | None = None,
    tools: list[ToolSpec] | None = None,
    embed: bool = False,
    cache_salt: str | None = None,
    add_generation_prompt: bool = True,
    continue_final_message: bool = False,
    chat_template_kwargs: dict[str, Any] | None = None,
    model: str | None = None,
    traffic_class: str = "default",
    trace_headers: dict[str, str] | None = None,
    priority: int = 0,
    return_prompt_token_ids: bool = False,
) -> ClientGenerate:
    """One request: exactly one of ``prompt``, ``messages`` (dicts with "role" and "content", or ChatMessage),
    ``prompt_token_ids``. The sampling keywords are engine/sampling_params.py's, as on HTTP.

    ``structured_outputs``: a constraint on the output's shape, exactly one of its fields set
    (``StructuredOutput(choice=("yes", "no"))``, ``(regex=...)``, ``(json=<a JSON schema's text>)``,
    ``(json_object=True)``, ``(grammar=<Lark>)``; importable from ``client``). A malformed or uncompilable one
    is ZooInvalidRequestError naming ``structured_outputs``; so is one beside ``ignore_eos``, ``min_tokens``
    or ``allowed_token_ids`` (naming that field).
    ``tools`` (with ``messages``): functions the model may call, shown in its prompt by the model's chat template
    (``ToolSpec(name, description, parameters=<a JSON schema's text>)``; importable from ``client``). The reply is
    the model's text; to force a call, add ``structured_outputs`` with the function's parameters schema.
    ``add_generation_prompt``, ``continue_final_message`` (the model continues the last message: a prefilled
    reply), ``chat_template_kwargs`` (more template variables): vLLM's chat options (backends/chat_render.py).
    ``prompt_logprobs``: every prompt token's log-probability, rank and that many alternatives, in
    ``Completion.prompt_logprobs`` (the first chunk's); a node whose runner cannot score prompts refuses it.
    ``truncate_prompt_tokens``, ``include_stop_str_in_output``, ``skip_special_tokens``, ``bad_words``: vLLM's, as on
    HTTP.
    ``embed``: the prompt's embedding too, in ``Completion.embedding`` (``embed()`` asks it of several inputs).
    ``cache_salt``: vLLM's: only requests with the same salt share prefix-cache blocks (engine/prefix_key.py).
    ``model``: None for the client's default. ``traffic_class`` picks the cell; ``priority``: vLLM's, lower runs
    earlier among the requests of its class. ``trace_headers``: the caller's W3C traceparent / tracestate.
    ``return_prompt_token_ids``: the prompt's tokens as served (rendered, truncated) in ``Completion.prompt_token_ids``
    (the first chunk's: vLLM's return_token_ids)."""
    chat = ChatTemplateOptions(
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message,
        template_kwargs=chat_template_kwargs,
    )
    return ClientGenerate(
        request_id=request_id,
        model=model,
        prompt=prompt,
        messages=[m if isinstance(m, ChatMessage) else ChatMessage(m["role"], m["content"]) for m in messages]
        if messages is not None
        else None,
        prompt_token_ids=prompt_token_ids,
        tools=tools,
        trace_headers=trace_headers,
        priority=priority,
        chat=None if chat == DEFAULT_CHAT_OPTIONS else chat,
        return_prompt_token_ids=return_prompt_token_ids,
        # validated by the control plane when it decodes the request (one validation, at the edge)
        sampling=SamplingParams.unchecked(
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            seed=seed,
            max_tokens=max_tokens,
            stop=(stop,) if isinstance(stop, str) else tuple(stop or ()),
            stop_token_ids=tuple(stop_token_ids or ()),
            ignore_eos=ignore_eos,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            truncate_prompt_tokens=truncate_prompt_tokens,
            include_stop_str_in_output=include_stop_str_in_output,
            skip_special_tokens=skip_special_tokens,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            repetition_penalty=repetition_penalty,
            logit_bias=tuple(logit_bias.items()) if isinstance(logit_bias, dict) else logit_bias or (),
            min_p=min_p,
            min_tokens=min_tokens,
            allowed_token_ids=tuple(allowed_token_ids or ()),
            bad_words=tuple(bad_words or ()),
            structured_outputs=structured_outputs,
            embed=embed,
            cache_salt=cache_salt,
        ),
        traffic_class=traffic_class,
    )
