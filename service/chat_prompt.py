"""A chat request's prompt, as chat completions, ``/v1/messages`` and ``/v1/responses`` build it: the chat template
to render with (:func:`chat_template_for`), the turns and tools rendered and tokenized, and the request checked and
turned into a worker request (:func:`prepare_chat`). Each route reads its own request shape into turns, tools and
a :class:`~service.tool_choice.ToolUse` first; from there the three are one path.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from fastapi import Request

from guardrail.prompts import load_chat_template, renders_tools
from service.errors import ApiError
from service.generation import Prepared, prepare, prompt_token_ids
from service.runtime import Runtime
from service.schemas.generation import GenerationFields
from service.tenants.access import caller_of
from service.tool_choice import ToolUse

#: The marker of a ChatML template: such a model can be given the bundled Hermes template for tools.
_CHATML = "<|im_start|>"


@functools.cache
def _template(spec: str) -> str:
    return load_chat_template(spec)


def chat_template_for(runtime: Runtime, with_tools: bool) -> str | None:
    """The template to render with (None: the tokenizer's own).

    Raises:
        ApiError: 400 naming ``tools`` when tools are asked for and no template can render them.
    """
    spec = runtime.settings.chat_template
    template = _template(spec) if spec is not None else None
    if not with_tools:
        return template
    own = template if template is not None else getattr(runtime.tokenizer, "chat_template", None)
    if renders_tools(own):
        return template
    if spec is None and own and _CHATML in own:
        return _template("hermes")  # Hermes tool calls are ChatML: the same turns, plus the tools
    raise ApiError(400, "this model's chat template does not render tools; start the server with "
                   "--chat-template (GUARDRAIL_CHAT_TEMPLATE) naming one that does", param="tools",
                   code="unsupported_parameter")


async def prepare_chat(runtime: Runtime, request: Request, body: GenerationFields, endpoint: str,
                       messages: list[dict[str, Any]], functions: Sequence[dict[str, Any]] | None,
                       tools: ToolUse | None, token_limit: int | None, prompt_param: str) -> Prepared:
    """Render and tokenize a chat prompt and prepare its generation (:func:`service.generation.prepare`).

    Args:
        messages: the turns as Hugging Face chat templates read them.
        functions: the request's tools as chat completions' function tools (``{"type": "function",
            "function": {...}}``); rendered only when ``tools`` is not None (``tool_choice: none`` hides them).
        tools: how the answer is made and read for calls (its ``grammar``, when set, is the answer's structured
            output); None: no tools.
        token_limit: the request's completion token limit in its API's field (None: the default).
        prompt_param: the field errors about the prompt name (``messages``, ``input``).

    Returns:
        The prepared request; its prompt is ``generation.prompt_ids``.

    Raises:
        ApiError: 400 naming ``tools`` when the chat template cannot render them, naming ``prompt_param`` when the
            prompt does not fit the context or the template rejects it; and what ``prepare`` raises (limits,
            policy).
    """
    tool_list = list(functions) if tools is not None and functions else None
    prompt_ids = await prompt_token_ids(runtime, prompt_param, messages=messages, tools=tool_list,
                                        chat_template=chat_template_for(runtime, tool_list is not None))
    fields: dict[str, object] = {"endpoint": endpoint, "request_id": request.state.request_id}
    if tool_list:
        fields["tools"] = len(tool_list)
    if runtime.settings.debug_log_prompts:
        fields["prompt"] = messages
    return await prepare(runtime, body, prompt_ids, token_limit, fields, prompt_param=prompt_param,
                   caller=caller_of(request), grammar=tools.grammar if tools is not None else None)
