"""Turn a request into prompt token ids: a chat through the tokenizer's chat template, or raw text.

Instruct models (SmolLM2) carry a chat template; base models (Gemma 3 270M base) have none and are
prompted by raw completion, with the tokenizer's own special tokens (Gemma's ``<bos>``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROLES = frozenset({"system", "user", "assistant", "tool"})
_TEMPLATES = Path(__file__).parent / "templates"
#: Chat templates shipped with the package, by name (``GUARDRAIL_CHAT_TEMPLATE=hermes``).
BUNDLED_TEMPLATES = {"hermes": "hermes_tools.jinja"}


def has_chat_template(tokenizer) -> bool:
    """Whether the tokenizer can format chats."""
    return bool(getattr(tokenizer, "chat_template", None))


def load_chat_template(spec: str) -> str:
    """A chat template's Jinja source from ``spec``: a bundled name (:data:`BUNDLED_TEMPLATES`), a file path,
    or the template itself (text holding ``{{`` or ``{%``), as vLLM's ``--chat-template`` reads it.

    Raises:
        ValueError: ``spec`` is none of these (no such file).
    """
    if spec in BUNDLED_TEMPLATES:
        return (_TEMPLATES / BUNDLED_TEMPLATES[spec]).read_text(encoding="utf-8")
    if "{{" in spec or "{%" in spec:
        return spec
    path = Path(spec).expanduser()
    if not path.is_file():
        raise ValueError(f"chat template {spec!r} is neither a bundled name ({', '.join(BUNDLED_TEMPLATES)}), "
                         "a file nor a Jinja template")
    return path.read_text(encoding="utf-8")


def renders_tools(template: str | None) -> bool:
    """Whether a chat template reads the ``tools`` variable (a template that does not would silently drop
    the request's tools)."""
    return template is not None and "tools" in template


def _check_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} objects")
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"messages[{index}] must be an object with 'role' and 'content', got {message!r}")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise ValueError(f"messages[{index}].role must be one of {sorted(ROLES)}, got {role!r}")
        tool_calls = message.get("tool_calls")
        if content is None and role == "assistant" and tool_calls:
            content = ""  # an assistant turn that only called tools
        if not isinstance(content, str):
            raise ValueError(f"messages[{index}].content must be a string, got {type(content).__name__}")
        # The keys Hugging Face chat templates read besides role and content (tool use).
        extra = {key: message[key] for key in ("tool_calls", "tool_call_id", "name") if message.get(key)}
        checked.append({"role": role, "content": content, **extra})
    return checked


def prompt_ids(tokenizer, prompt: str | None = None, messages: Sequence[Mapping[str, Any]] | None = None, *,
               tools: Sequence[Mapping[str, Any]] | None = None, chat_template: str | None = None,
               assistant_prefix: str = "") -> list[int]:
    """Token ids to prefill: exactly one of ``prompt`` (raw completion) or ``messages`` (chat).

    Chat: ``tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True)`` — the ids end
    where the assistant's answer begins, followed by ``assistant_prefix`` (text the answer is made to start
    with, such as the opening of a forced tool call). ``chat_template``: Jinja source used instead of the
    tokenizer's own. Messages may carry ``tool_calls`` (assistant), ``tool_call_id`` and ``name`` (the
    ``tool`` role), passed to the template as Hugging Face's templates expect them. Raw: ``tokenizer(prompt)``
    with the tokenizer's special tokens (BOS).

    Raises:
        ValueError: both or neither given, empty text, malformed messages (naming the index and field),
            or messages for a tokenizer without a chat template.
    """
    if (prompt is None) == (messages is None):
        raise ValueError("give exactly one of prompt (raw completion) or messages (chat)")
    if messages is not None:
        checked = _check_messages(messages)
        if chat_template is None and not has_chat_template(tokenizer):
            raise ValueError("messages: this model has no chat template (a base model); send a raw prompt instead")
        text = tokenizer.apply_chat_template(checked, tools=list(tools) if tools else None, chat_template=chat_template,
                                             add_generation_prompt=True, tokenize=False)
        # The template writes the special tokens itself (BOS included where it wants one).
        ids = tokenizer(text + assistant_prefix, add_special_tokens=False)["input_ids"]
        return [int(i) for i in ids]
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"prompt must be a non-empty string, got {prompt!r}")
    return [int(i) for i in tokenizer(prompt, add_special_tokens=True)["input_ids"]]
