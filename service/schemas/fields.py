"""What each generating route does with every field of OpenAI's and Anthropic's request bodies: it **takes** the
field (honours it), **refuses** it (400 ``unsupported_parameter`` naming it, when set to anything but null,
false, an empty list or object: the answer would not be what the field asks for), or **ignores** it, with the
reason it cannot change the answer here. The tables cover the fields of the ``openai`` and ``anthropic`` client
libraries' request types (tests/clients/test_request_fields.py walks them: a field a client adds fails that test
until it is put here) and vLLM's extensions; docs/service.md shows them ("Request fields").

The request models refuse from these tables (:meth:`~service.schemas.generation.GenerationFields.unsupported_field`
and the routes); a field a table does not name and a model does not declare is ignored and logged by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Verdict = Literal["taken", "refused", "ignored"]


@dataclass(frozen=True)
class FieldRule:
    """What a route does with one request field, and why (the docs' table cell)."""

    verdict: Verdict
    note: str = ""


def _t(note: str = "") -> FieldRule:
    return FieldRule("taken", note)


def _r(note: str) -> FieldRule:
    return FieldRule("refused", note)


def _i(note: str) -> FieldRule:
    return FieldRule("ignored", note)


_NOTHING_STORED = _i("nothing is stored or billed: it cannot change the answer")
_CACHE = _i("the prefix cache is automatic (docs/engines.md)")
_NO_REASONING = "the served models answer without a reasoning phase"
_SAMPLING = _t()

#: ``POST /v1/chat/completions`` (OpenAI's ``chat.completions.create``, and vLLM's extensions).
CHAT: dict[str, FieldRule] = {
    "model": _t(), "messages": _t("text content parts only; an image or audio part is a 400"),
    "stream": _t(), "stream_options": _t("include_usage"), "n": _t("up to the server's limit"),
    "max_tokens": _t(), "max_completion_tokens": _t(), "temperature": _SAMPLING, "top_p": _SAMPLING,
    "seed": _SAMPLING, "stop": _t(), "frequency_penalty": _SAMPLING, "presence_penalty": _SAMPLING,
    "logit_bias": _t(), "logprobs": _t("delivered tokens only, never a rolled-back one"), "top_logprobs": _t(),
    "response_format": _t("json_object, json_schema: a grammar under the guard (docs/structured-output.md)"),
    "tools": _t("function tools; strict: the call follows parameters (grammar)"),
    "tool_choice": _t("required and a named function: the call is generated under a grammar"),
    "parallel_tool_calls": _t(),
    "user": _i("an end-user id for abuse monitoring; no use here"),
    "metadata": _NOTHING_STORED, "store": _NOTHING_STORED, "service_tier": _i("one tier here"),
    "safety_identifier": _i("an end-user id for abuse monitoring; no use here"),
    "prompt_cache_key": _CACHE, "prompt_cache_options": _CACHE, "prompt_cache_retention": _CACHE,
    "reasoning_effort": _i(_NO_REASONING), "modalities": _i("text is the only output (audio needs `audio`, refused)"),
    "moderation": _i("moderation is /v1/moderations; the guard runs on every answer anyway"),
    "audio": _r("no audio output"), "prediction": _r("predicted outputs are not implemented"),
    "verbosity": _r("no verbosity control over the served models"),
    "web_search_options": _r("no built-in tools"),
    "functions": _r("the legacy function calling: use tools"), "function_call": _r("use tool_choice"),
    # vLLM's extensions.
    "top_k": _t(), "min_p": _t(), "repetition_penalty": _t(), "min_tokens": _t(), "stop_token_ids": _t(),
    "ignore_eos": _t(), "guided_json": _t("as response_format json_schema"), "bad_words": _t("as banned_terms"),
    "prompt_logprobs": _r("not implemented"), "guided_regex": _r("JSON grammars only"),
    "guided_choice": _r("JSON grammars only"), "guided_grammar": _r("JSON grammars only"),
    "guided_decoding_backend": _r("llguidance is the backend"), "structured_outputs": _r("use response_format"),
    "use_beam_search": _r("no beam search"), "length_penalty": _r("no beam search"),
    "allowed_token_ids": _r("not implemented"), "include_stop_str_in_output": _r("not implemented"),
    "truncate_prompt_tokens": _r("a prompt too long for the context is a 400"),
    "chat_template": _r("the server's template only (GUARDRAIL_CHAT_TEMPLATE)"),
    "chat_template_kwargs": _r("the server's template only"),
    "continue_final_message": _r("not implemented"), "documents": _r("no RAG templates"),
    "echo": _r("not implemented on chat"), "suffix": _r("not implemented"),
}

#: ``POST /v1/completions`` (OpenAI's legacy ``completions.create``).
COMPLETIONS: dict[str, FieldRule] = {
    "model": _t(), "prompt": _t("a string, one string in a list, or token ids"), "stream": _t(),
    "stream_options": _t("include_usage"), "n": _t("up to the server's limit"), "max_tokens": _t(),
    "temperature": _SAMPLING, "top_p": _SAMPLING, "seed": _SAMPLING, "stop": _t(), "frequency_penalty": _SAMPLING,
    "presence_penalty": _SAMPLING, "logit_bias": _t(), "logprobs": _t("delivered tokens only"),
    "user": _i("an end-user id for abuse monitoring; no use here"),
    "echo": _r("not implemented"), "suffix": _r("not implemented"), "best_of": _r("only 1 (n choices instead)"),
}

#: ``POST /v1/responses`` (OpenAI's ``responses.create``).
RESPONSES: dict[str, FieldRule] = {
    "model": _t(), "input": _t("a string, messages, function_call and function_call_output items"),
    "instructions": _t(), "stream": _t(), "max_output_tokens": _t(), "temperature": _SAMPLING, "top_p": _SAMPLING,
    "text": _t("format text, json_object, json_schema: a grammar under the guard"),
    "tools": _t("function tools (strict unless strict: false); built-in tools are a 400"),
    "tool_choice": _t("required and a named function: the call is generated under a grammar"),
    "parallel_tool_calls": _t(),
    "user": _i("an end-user id for abuse monitoring; no use here"),
    "safety_identifier": _i("an end-user id for abuse monitoring; no use here"),
    "metadata": _NOTHING_STORED, "store": _NOTHING_STORED, "service_tier": _i("one tier here"),
    "stream_options": _i("obfuscation of stream events: no padding is sent"),
    "prompt_cache_key": _CACHE, "prompt_cache_options": _CACHE, "prompt_cache_retention": _CACHE,
    "reasoning": _i(_NO_REASONING), "truncation": _i("disabled: a prompt too long for the context is a 400"),
    "include": _i("no reasoning, search or logprob extras to include"),
    "moderation": _i("moderation is /v1/moderations; the guard runs on every answer anyway"),
    "max_tool_calls": _i("limits built-in tool calls; there are none"),
    "context_management": _i("no server-side context compaction; the input is used as given"),
    "top_logprobs": _r("no logprobs on this route (chat completions has them)"),
    "previous_response_id": _r("nothing is stored: send the whole input"),
    "conversation": _r("nothing is stored: send the whole input"), "prompt": _r("no stored prompts"),
    "background": _r("no background responses"), "background_options": _r("no background responses"),
    "image": _r("no image output"), "access_programs": _r("no access programs"),
}

#: ``POST /v1/messages`` (Anthropic's ``messages.create``); ``count_tokens`` reads its prompt fields.
MESSAGES: dict[str, FieldRule] = {
    "model": _t(), "messages": _t("text, tool_use and tool_result blocks; an image or document is a 400"),
    "system": _t(), "max_tokens": _t(), "stop_sequences": _t(), "stream": _t(),
    "temperature": _SAMPLING, "top_p": _SAMPLING, "top_k": _SAMPLING,
    "tools": _t("client tools; strict: the call follows input_schema (grammar)"),
    "tool_choice": _t("any and a named tool: the call is generated under a grammar"),
    "output_config": _t("format json_schema: a grammar under the guard; effort is ignored (no reasoning)"),
    "metadata": _i("user_id for abuse monitoring; no use here"), "service_tier": _i("one tier here"),
    "inference_geo": _i("one location here"), "speed": _i("one speed here"),
    "cache_control": _CACHE, "diagnostics": _i("no diagnostics are collected"),
    "user_profile_id": _i("no user profiles here"), "workspace_id": _i("no workspaces here"),
    "thinking": _r(_NO_REASONING + ": no thinking blocks"), "container": _r("no code execution containers"),
    "mcp_servers": _r("no MCP connector"),
}


def refused(table: dict[str, FieldRule]) -> frozenset[str]:
    """The fields a table refuses."""
    return frozenset(name for name, rule in table.items() if rule.verdict == "refused")


def is_set(value: object) -> bool:
    """Whether a request sets a field to something (a refused field set to null, false, ``[]``, ``{}`` or ``""``
    asks for nothing and is let through, as clients send some of these by default)."""
    return value not in (None, False, [], {}, "")
