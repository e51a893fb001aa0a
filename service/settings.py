"""Service configuration, read from ``GUARDRAIL_*`` environment variables (pydantic-settings).

Every field can be set as ``GUARDRAIL_<FIELD>`` (case-insensitive); list fields accept a comma-separated
string (``GUARDRAIL_WORDLISTS=en,de``) or a JSON array. ``guardrail serve`` passes its flags as keyword
arguments, which take precedence over the environment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from guardrail.engines.drafting import DEFAULT_SPECULATIVE_TOKENS
from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION
from guardrail.matching.regex.automaton import MAX_REQUEST_REGEX_DFA_STATES
from guardrail.models import cache_dir
from guardrail.params import DEFAULT_EVASION_GUARD, DEFAULT_HASHING_KEY, EvasionGuard
from guardrail.prompts import load_chat_template
from guardrail.wordlists.wordlist import MAX_TERMS
from service.schemas.obfuscation import ObfuscationSetting
from service.stores.store import DEFAULT_HISTORY, NAME_PATTERN

#: The shortest admin token accepted: 32 random URL-safe characters hold 192 bits.
MIN_ADMIN_TOKEN_CHARS = 32

#: Seconds past a request's own time limit before a silent generation is declared failed (service/worker.py).
WATCHDOG_GRACE_S = 30.0


def _split_csv(value: object) -> object:
    """Accept ``"a, b"`` as well as a JSON array or a Python list for list-valued settings."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


class Settings(BaseSettings):
    """Configuration of one service process.

    Raises:
        pydantic.ValidationError: naming the ``GUARDRAIL_*`` field whose value is invalid.
    """

    # hide_input_in_errors: a refused secret (a short admin token) must not be echoed into the start-up error.
    model_config = SettingsConfigDict(env_prefix="GUARDRAIL_", extra="ignore", case_sensitive=False,
                                      hide_input_in_errors=True)

    # -- model and default lists ------------------------------------------------------------------
    model: str = Field("smollm2", description="Model name (smollm2, gemma3) or a local path.")
    engine: Literal["transformers", "vllm", "remote"] = Field(
        "transformers", description="transformers (embedded, default), vllm (in-process; needs the vllm extra) or "
        "remote (a gateway to an inference server that already runs: GUARDRAIL_UPSTREAM_URL); docs/engines.md."
    )
    tokenizer: str | None = Field(
        None, description="The tokenizer (a bundled model name or a local Hugging Face directory); unset = the "
        "model's. engine=remote loads only this, and checks it against the upstream's at start-up.")
    vllm_kv_cache_gib: int = Field(
        2, ge=1, description="engine=vllm on CPU: the KV cache in GiB (VLLM_CPU_KVCACHE_SPACE, which wins when set). "
        "A fixed size, not vLLM's default fraction of a NUMA node's memory. SmolLM2 in float32 needs ~46 KB a token: "
        "2 GiB hold ~46k tokens. GPUs size theirs with vllm_engine_args' gpu_memory_utilization.")
    vllm_engine_args: dict[str, Any] = Field(
        default_factory=dict, description='More vllm.EngineArgs for engine=vllm, JSON: {"enforce_eager": true}.'
    )
    upstream_url: str | None = Field(
        None, description="engine=remote: the upstream server's root URL (vLLM's OpenAI server: http://host:8000).")
    upstream_api: Literal["auto", "vllm", "llamacpp"] = Field(
        "auto", description="engine=remote: the upstream's API: vllm (vLLM's OpenAI server), llamacpp (llama.cpp's "
        "llama-server) or auto (read from its /v1/models at start-up); docs/engines.md.")
    upstream_logits_processor: Literal["auto", "on", "off"] = Field(
        "auto", description="engine=remote, vLLM upstream: ban through guardrail's vLLM logits processor (exact "
        "masks, a rollback in one request) when the upstream's environment has guardrail installed: auto (probed "
        "at start-up), on (refuse to start without it) or off (logit_bias -100 and a one-token re-pick).")
    upstream_model: str | None = Field(
        None, description="engine=remote: the upstream model id requests name; unset = the first /v1/models lists.")
    upstream_max_streams: int = Field(
        32, ge=1, description="engine=remote: streams sent to the upstream at once (pooled connections).")
    upstream_connect_timeout_s: float = Field(
        2.0, gt=0, description="engine=remote: opening a connection to the upstream, seconds.")
    upstream_read_timeout_s: float = Field(
        60.0, gt=0, description="engine=remote: longest wait for the upstream's next bytes (a long prefill), seconds.")
    upstream_retries: int = Field(
        2, ge=0, description="engine=remote: retries of a connection that could not be opened (never of a request "
        "the upstream received).")
    upstream_health_interval_s: float = Field(
        1.0, gt=0, description="engine=remote: how often the upstream's /health is probed, seconds.")
    wordlists: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["en"],
        description="Word lists applied when a request names none (the default set).",
    )

    # -- storage ----------------------------------------------------------------------------------
    redis_url: str | None = Field(None, description="redis://… ; unset = embedded store under data_dir.")
    redis_prefix: str = Field(
        "guardrail:", min_length=1, description="Namespace of every Redis key and channel (tests use their own)."
    )
    redis_timeout_s: float = Field(
        0.5, gt=0, description="Connect and read timeout of every Redis client, seconds; calls are not retried, "
        "so a Redis that does not answer stalls one call at most twice this."
    )
    data_dir: Path = Field(
        default_factory=lambda: Path(platformdirs.user_data_dir("guardrail")),
        description="Files of the embedded store (word lists, audit log).",
    )
    cache_dir: Path = Field(default_factory=cache_dir, description="Compiled artefacts and converted models.")
    version_poll_interval_s: float = Field(
        1.0, gt=0, description="How often the word-list versions are re-read from the store, seconds."
    )
    audit_max_records: int = Field(10_000, ge=1, description="Audit records kept (oldest dropped).")
    wordlist_history: int = Field(
        DEFAULT_HISTORY, ge=1, le=1000, description="Versions of each word list kept, the current one included "
        "(GET /admin/wordlists/{name}/versions: compare them, write an older one back).")

    # -- credentials ------------------------------------------------------------------------------
    admin_token: SecretStr | None = Field(
        None, description="Bearer token for /admin, at least 32 characters (refused at start otherwise); "
        "unset = admin off.")
    admin_failures_per_minute: int = Field(
        10, ge=1, description="Failed admin-token attempts a client address may make in any 60 s; then every "
        "admin route answers it 429 with Retry-After until the oldest leaves the window (per replica).")
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list, description="Shared client API keys for /v1 (they get the anonymous policy); "
        "set = a request needs one of them or a tenant key; empty = no shared keys.")
    allow_anonymous: bool = Field(
        True, description="Serve /v1 requests without a tenant key under the anonymous policy (the server's "
        "settings); false = they get 401.")
    anonymous_requests_per_minute: int = Field(
        0, ge=0, description="Requests per minute of all anonymous callers together (each GUARDRAIL_API_KEYS key "
        "counts alone, with this limit); 0 = no limit.")
    anonymous_tokens_per_minute: int = Field(
        0, ge=0, description="Tokens (prompt + n x max_tokens) per minute of all anonymous callers together (each "
        "GUARDRAIL_API_KEYS key counts alone, with this limit); 0 = no limit.")
    anonymous_required_wordlists: Annotated[list[Annotated[str, Field(pattern=NAME_PATTERN)]], NoDecode] = Field(
        default_factory=list, description="Lists always enforced for anonymous callers and GUARDRAIL_API_KEYS "
        "holders, whatever the request names (a tenant policy's required_wordlists); empty = none.")
    anonymous_min_obfuscation: Annotated[ObfuscationSetting | None, NoDecode] = Field(
        None, description="Floor and default of the obfuscation level of anonymous "
        "callers and GUARDRAIL_API_KEYS holders (a tenant policy's obfuscation); unset = the server's obfuscation, "
        "and they may choose any.")
    anonymous_evasion_guard_off: bool = Field(
        True, description="Whether anonymous callers and GUARDRAIL_API_KEYS holders may ask for a weaker "
        "evasion_guard than the server's (off included); false = the server's evasion_guard is their floor.")
    anonymous_request_terms: bool = Field(
        True, description="Whether anonymous callers and GUARDRAIL_API_KEYS holders may send their own terms "
        "(banned_terms, bad_words, banned_strings); false = 403 naming the field.")
    tenant_metric_labels: int = Field(
        32, ge=0, description="Tenants named in the tenant label of the request metrics (the first this process "
        "serves); the rest are counted as 'other'.")

    # -- execution --------------------------------------------------------------------------------
    max_concurrent: int = Field(1, ge=1, description="Generations run at once (one model instance).")
    max_batch: int = Field(8, ge=1, description="Generations decoded together, one forward pass per step "
                           "(continuous batching); 1 for models with sliding-window layers.")
    prefill_chunk: int = Field(512, ge=1, description="Prompt tokens (rows x columns) prefilled per decode step "
                               "at most: a longer prefill spans several steps while running streams keep going.")
    prefix_cache_mb: int = Field(256, ge=0, description="Memory for the KV caches of prompt heads reused by "
                                 "later requests (prefix caching), MiB; 0 turns it off.")
    speculative_tokens: int = Field(DEFAULT_SPECULATIVE_TOKENS, ge=0, le=16, description="Tokens drafted per step "
                                    "(prompt lookup) and verified in one forward pass (speculative decoding, embedded "
                                    "engine); 0 turns it off. A request's speculative=false turns it off for it.")
    max_queue: int = Field(16, ge=0, description="Generations waiting for the model; beyond -> 429.")
    retry_after_s: int = Field(1, ge=1, description="Retry-After sent with a 429, seconds.")
    request_timeout_s: float = Field(120.0, gt=0, description="Wall-clock limit of one generation.")

    # -- health and drain (docs/service.md, "Health, readiness and drain") ------------------------
    ready_queue_fraction: float = Field(
        1.0, gt=0, le=1, description="/readyz answers 503 while the generations waiting for the model fill this "
        "fraction of max_queue (rounded up, at least 1); 1.0 = only when the queue is full and the next request "
        "would get 429. With max_queue=0: while every worker thread is busy.")
    worker_stall_timeout_s: float | None = Field(
        None, gt=0, description="/healthz answers 503 when a worker thread has been busy this long without "
        "progress (no decoder event), seconds; unset = request_timeout_s + 30.")
    drain_timeout_s: float = Field(
        120.0, ge=0, description="On SIGTERM (guardrail serve): how long running generations may go on before "
        "they are ended with an error event, seconds. Pod grace period must exceed it.")

    # -- request limits ---------------------------------------------------------------------------
    default_max_tokens: int = Field(256, ge=1, description="max_tokens when a request gives none.")
    max_tokens_limit: int = Field(4096, ge=1, description="Largest max_tokens a request may ask for.")
    max_n: int = Field(4, ge=1, description="Largest n (choices, generated one after another).")
    max_request_terms: int = Field(1000, ge=0, description="banned_terms + bad_words + banned_strings.")
    max_list_terms: int = Field(
        MAX_TERMS, ge=1, le=MAX_TERMS, description="Terms + allow-terms in one stored list (413 beyond)."
    )
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="Request body size (413 beyond). The body is "
        "parsed on the event loop: a MiB of key-heavy JSON holds it ~30 ms (bench/abuse.py), so raise it only for "
        "prompts that need it.")
    max_request_regex_terms: int = Field(
        100, ge=0, description="Regex terms (re:...) among a request's own terms (413 beyond): each may cost "
        "thousands of automaton states to compile.")
    request_compile_workers: int = Field(
        2, ge=1, description="Processes that compile requests' own terms (a pool of their own, never the event "
        "loop, its GIL nor the default thread pool; ~30 MB each).")
    request_compile_queue: int = Field(
        8, ge=0, description="Request compiles that may wait for a compile process; beyond, 503 compile_busy at once "
        "(with Retry-After) instead of an unbounded queue.")
    request_compile_time_s: float = Field(
        1.0, gt=0, description="Compile budget of one request's own terms, seconds of compile process time (its "
        "wait for a thread not counted): a 400 naming the field beyond.")
    request_compile_max_states: int = Field(
        MAX_REQUEST_REGEX_DFA_STATES, ge=1, le=MAX_REQUEST_REGEX_DFA_STATES,
        description="Automaton states a request's regex terms may need together (400 naming the term or the field "
        "beyond); at most the engine's own request limit.")
    compile_refusal_ttl_s: float = Field(
        300.0, ge=0, description="How long a refused set of request terms is answered from memory (the same 400, "
        "no compile), seconds; 0 = not kept.")
    compile_refusal_cache_bytes: int = Field(
        4 * 1024 * 1024, ge=1, description="Bytes of refused term sets (their term text) kept for that.")
    max_schema_bytes: int = Field(
        256 * 1024, ge=1, description="A JSON schema or grammar a request sends (response_format, a tool's "
        "parameters, text.format ...) in bytes of compact JSON (400 naming the field beyond).")
    max_schema_depth: int = Field(32, ge=1, description="Nesting of objects and arrays in one such schema.")
    max_schema_properties: int = Field(5000, ge=1, description="Object keys in one such schema, all levels together.")
    grammar_cache_bytes: int = Field(
        64 * 1024 * 1024, ge=1, description="Compiled grammars (structured output, tool calls) kept, bytes.")
    artefact_cache_bytes: int = Field(
        1024 * 1024 * 1024, ge=1, description="Compiled word-list artefacts kept in memory, bytes (as weighed "
        "when built; lazy artefacts grow with use).")
    text_matcher_cache_bytes: int = Field(
        256 * 1024 * 1024, ge=1, description="Text matchers (/v1/check, /v1/moderations, input checks) kept, bytes.")
    escalation_cache_bytes: int = Field(
        128 * 1024 * 1024, ge=1, description="Escalation artefacts (evasion guard) kept, bytes.")
    max_rollbacks: int = Field(64, ge=0, description="Rollback budget of one generation.")
    max_rollbacks_per_position: int = Field(8, ge=0, description="Rollback budget at one position.")
    evasion_guard: EvasionGuard = Field(
        DEFAULT_EVASION_GUARD, description="substring: a term that caused a rollback is also matched as a substring "
        "for the rest of that generation (glued and _-joined forms); edit: also with one edit of tolerance (terms "
        "of 5+ letters: misspellings); off. A request's evasion_guard overrides it.")
    obfuscation: Annotated[ObfuscationSetting, NoDecode] = Field(
        DEFAULT_OBFUSCATION,
        description="Which obfuscated forms of the terms also match, for lists and terms that set no level of their "
        "own: off | homoglyphs | leet | spaced | masked, optionally +markup (docs/matching.md). A request's "
        "obfuscation overrides it.")
    watermark_key: int = Field(
        DEFAULT_HASHING_KEY, gt=0, description="Secret hashing key of the watermark (generation and detection). The "
        "default is transformers' public constant, with which anyone can detect and forge the watermark: the service "
        "warns at start while it is in use; the Helm chart generates a random key at install."
    )

    # -- chat protocol ----------------------------------------------------------------------------
    chat_template: str | None = Field(
        None, description="Chat template used instead of the tokenizer's: a bundled name (hermes: ChatML with "
        "Hermes-style tool calls), a file path, or the Jinja text itself (vLLM's --chat-template). Unset: the "
        "tokenizer's; a request with tools on a ChatML model whose template ignores tools uses hermes.")
    tool_call_parser: Literal["hermes", "json"] = Field(
        "hermes", description="How tool calls are read from the answer: hermes (<tool_call>{json}</tool_call>) or "
        "json (the whole answer is a JSON call). Must match what the chat template asks the model to write.")
    sse_keepalive_s: float = Field(
        5.0, ge=0, description="Seconds without a chunk after which a stream sends an SSE comment (': keep-alive'), "
        "so that idle proxies keep it open while the guard holds text back; 0 turns it off.")

    # -- listening --------------------------------------------------------------------------------
    admin_port: int | None = Field(
        None, ge=1, le=65535, description="Serve /admin, /metrics and /console on this TCP port only (guardrail "
        "serve binds it beside --port, on the same host); the main port then answers them 404. Unset = the main "
        "port serves everything (make serve). The Helm chart sets it, so that its NetworkPolicy can admit the "
        "admin port from labelled namespaces only.")

    # -- admin console ----------------------------------------------------------------------------
    console: bool = Field(
        True, description="Serve the admin console at /console (docs/console.md): pages that call this API with the "
        "signed-in caller's admin token or tenant key; false leaves it out.")

    # -- logging ----------------------------------------------------------------------------------
    log_level: str = Field("INFO", description="Python logging level name.")
    debug_log_prompts: bool = Field(
        False, description="Log prompt and completion text (off: logs never contain user text)."
    )

    @property
    def worker_stall_limit_s(self) -> float:
        """``worker_stall_timeout_s``, or the request time limit plus the worker's watchdog grace, seconds."""
        if self.worker_stall_timeout_s is not None:
            return self.worker_stall_timeout_s
        return self.request_timeout_s + WATCHDOG_GRACE_S

    @field_validator("wordlists", "api_keys", "anonymous_required_wordlists", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return _split_csv(value)

    @field_validator("redis_url", "admin_token", "upstream_url", "tokenizer", "upstream_model",
                     "anonymous_min_obfuscation", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("admin_token")
    @classmethod
    def _long_admin_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_ADMIN_TOKEN_CHARS:
            raise ValueError(f"GUARDRAIL_ADMIN_TOKEN must be at least {MIN_ADMIN_TOKEN_CHARS} characters (it has "
                             f"{len(value.get_secret_value())}); make one with: python -c 'import secrets; "
                             "print(secrets.token_urlsafe(32))'")
        return value

    @field_validator("chat_template")
    @classmethod
    def _loadable_template(cls, value: str | None) -> str | None:
        if value is not None and value.strip():
            load_chat_template(value)  # a ValueError names the field
            return value
        return None

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError(f"log_level must be DEBUG, INFO, WARNING, ERROR or CRITICAL, got {value!r}")
        return level
