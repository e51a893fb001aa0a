"""Turn a request into prompt token ids: a chat through the tokenizer's chat template, or raw text.

Instruct models (SmolLM2) carry a chat template; base models (Gemma 3 270M base) have none and are
prompted by raw completion, with the tokenizer's own special tokens (Gemma's ``<bos>``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

ROLES = frozenset({"system", "user", "assistant"})


def has_chat_template(tokenizer) -> bool:
    """Whether the tokenizer can format chats."""
    return bool(getattr(tokenizer, "chat_template", None))


def _check_messages(messages: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} objects")
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"messages[{index}] must be an object with 'role' and 'content', got {message!r}")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise ValueError(f"messages[{index}].role must be one of {sorted(ROLES)}, got {role!r}")
        if not isinstance(content, str):
            raise ValueError(f"messages[{index}].content must be a string, got {type(content).__name__}")
        checked.append({"role": role, "content": content})
    return checked


def prompt_ids(tokenizer, prompt: str | None = None,
               messages: Sequence[Mapping[str, str]] | None = None) -> list[int]:
    """Token ids to prefill: exactly one of ``prompt`` (raw completion) or ``messages`` (chat).

    Chat: ``tokenizer.apply_chat_template(messages, add_generation_prompt=True)`` — the ids end where the
    assistant's answer begins. Raw: ``tokenizer(prompt)`` with the tokenizer's special tokens (BOS).

    Raises:
        ValueError: both or neither given, empty text, malformed messages (naming the index and field),
            or messages for a tokenizer without a chat template.
    """
    if (prompt is None) == (messages is None):
        raise ValueError("give exactly one of prompt (raw completion) or messages (chat)")
    if messages is not None:
        checked = _check_messages(messages)
        if not has_chat_template(tokenizer):
            raise ValueError("messages: this model has no chat template (a base model); send a raw prompt instead")
        ids = tokenizer.apply_chat_template(checked, add_generation_prompt=True, tokenize=True, return_dict=False)
        return [int(i) for i in ids]
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(f"prompt must be a non-empty string, got {prompt!r}")
    return [int(i) for i in tokenizer(prompt, add_special_tokens=True)["input_ids"]]
