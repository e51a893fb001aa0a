"""A request's guard arguments for the vLLM engine: ``SamplingParams.extra_args["guardrail"]``, validated.

Read by the logits processor (:mod:`guardrail.engines.vllm.logits_processor`, whose docstring lists the fields)
and written by the rollback driver and the gateway. Kept apart from the processor so that it imports without
vLLM or torch: the service, the gateway and the tests read and write the arguments where vLLM is not installed.

``obfuscation`` is the level of the lists (bundled lists and the request's terms) that set none, parsed here
once; a request that names none gets ``DEFAULT_OBFUSCATION``, the level of every other path (the service,
``Guard.load``, the CLI, ``TextMatcher``, ``VLLMDriver.artefact``; docs/vllm.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from guardrail.wordlists.obfuscation import DEFAULT_OBFUSCATION, Obfuscation
from guardrail.wordlists.wordlist import WordList

__all__ = ["EXTRA_ARGS_KEY", "GuardArgs", "parse_guard_args"]

#: The key of ``SamplingParams.extra_args`` this processor reads.
EXTRA_ARGS_KEY = "guardrail"
MaskMode = Literal["completing", "bans"]
_MASK_MODES = ("completing", "bans")
_FIELDS = ("wordlists", "banned_terms", "bans", "always_banned", "resume_tokens", "mask", "obfuscation")
#: The former name of ``always_banned`` (it also named a session's whole mask then: docs/design.md, glossary),
#: still read so that a gateway of the previous release keeps working against this processor.
_DEPRECATED_FIELDS = {"banned_ids": "always_banned"}


@dataclass(frozen=True)
class GuardArgs:
    """The validated ``extra_args["guardrail"]`` of one request (see the module docstring)."""

    wordlists: tuple[str, ...] = ()
    banned_terms: tuple[str, ...] = ()
    bans: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    resume_tokens: int = 0
    mask: MaskMode = "completing"
    always_banned: tuple[int, ...] = ()
    #: The level of the lists that set none (``DEFAULT_OBFUSCATION`` unless the request names one).
    obfuscation: Obfuscation = DEFAULT_OBFUSCATION

    @property
    def guards_terms(self) -> bool:
        """Whether any term is guarded (else only ``bans`` apply)."""
        return bool(self.wordlists or self.banned_terms)

    def to_extra_args(self) -> dict[str, object]:
        """The JSON-able ``extra_args`` entry that :func:`parse_guard_args` reads back."""
        return {EXTRA_ARGS_KEY: self.to_json_object()}

    def to_vllm_xargs(self) -> dict[str, str]:
        """The ``vllm_xargs`` of an HTTP request to vLLM's server: the entry JSON-encoded."""
        return {EXTRA_ARGS_KEY: json.dumps(self.to_json_object(), separators=(",", ":"))}

    def to_json_object(self) -> dict[str, object]:
        """The entry's object, JSON-able."""
        return {
            "wordlists": list(self.wordlists), "banned_terms": list(self.banned_terms),
            "bans": {str(p): list(ids) for p, ids in self.bans.items()},
            "always_banned": list(self.always_banned), "resume_tokens": self.resume_tokens, "mask": self.mask,
            "obfuscation": str(self.obfuscation),
        }

    def selected_wordlists(self) -> list[WordList]:
        """The lists this request guards against (bundled lists, then its own terms as the ``request`` list),
        each that sets no level at :attr:`obfuscation`: what the processor compiles.

        Raises:
            WordListError: unknown list name, invalid term.
        """
        from guardrail.wordlists.selection import select_wordlists
        from guardrail.wordlists.wordlist import with_obfuscation

        return with_obfuscation(select_wordlists(self.wordlists, self.banned_terms), self.obfuscation)


def _field(name: str) -> str:
    return f"extra_args[{EXTRA_ARGS_KEY!r}][{name!r}]"


def _strings(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"{_field(name)} must be a list of strings, got {type(value).__name__}")
    bad = [v for v in value if not isinstance(v, str) or not v.strip()]
    if bad:
        raise ValueError(f"{_field(name)} must hold non-empty strings, got {bad[:3]!r}")
    return tuple(value)


def _count(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{_field(name)} must be an int >= 0, got {value!r}")
    return value


def _token_ids(value: object) -> bool:
    return not isinstance(value, str) and isinstance(value, Sequence) and all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)


def parse_guard_args(extra_args: Mapping[str, object] | None) -> GuardArgs | None:
    """Read and validate a request's ``extra_args[EXTRA_ARGS_KEY]``; ``None`` when absent (unguarded).

    The entry is an object, or that object JSON-encoded in a string (``vllm_xargs`` carries no nested objects).
    Word-list names are checked against the bundled lists and terms against the word-list rules, so a
    bad request fails at admission, before the engine sees it.

    Raises:
        ValueError: a malformed entry; the message names the field (``extra_args['guardrail']['bans']``)
            and the bad value. (:class:`~guardrail.wordlists.wordlist.WordListError` is a ``ValueError``.)
    """
    if not extra_args or EXTRA_ARGS_KEY not in extra_args:
        return None
    raw = extra_args[EXTRA_ARGS_KEY]
    if isinstance(raw, str):  # vllm_xargs on the HTTP server: values are scalars or lists
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"extra_args[{EXTRA_ARGS_KEY!r}] is a string but not JSON ({exc})") from None
    if not isinstance(raw, Mapping):
        raise ValueError(f"extra_args[{EXTRA_ARGS_KEY!r}] must be an object, got {type(raw).__name__}")
    for old, new in _DEPRECATED_FIELDS.items():
        if old in raw:
            if new in raw:
                raise ValueError(f"extra_args[{EXTRA_ARGS_KEY!r}]: {old!r} is the former name of {new!r}; give one")
            raw = {**{k: v for k, v in raw.items() if k != old}, new: raw[old]}
    unknown = sorted(set(raw) - set(_FIELDS) - set(_DEPRECATED_FIELDS))
    if unknown:
        raise ValueError(f"extra_args[{EXTRA_ARGS_KEY!r}]: unknown field(s) {unknown}; accepted: {list(_FIELDS)}")
    wordlists = _strings("wordlists", raw.get("wordlists", ()))
    terms = _strings("banned_terms", raw.get("banned_terms", ()))
    bans_raw = raw.get("bans", {})
    if not isinstance(bans_raw, Mapping):
        raise ValueError(f"{_field('bans')} must be an object {{position: [token ids]}}, got {type(bans_raw).__name__}")
    bans: dict[int, tuple[int, ...]] = {}
    always_banned = raw.get("always_banned", ())
    if not _token_ids(always_banned):
        raise ValueError(f"{_field('always_banned')} must be a list of token ids >= 0, got {always_banned!r}")
    for key, ids in bans_raw.items():
        try:
            position = int(key)
        except (TypeError, ValueError):
            position = -1
        if position < 0:
            raise ValueError(f"{_field('bans')}: positions must be ints >= 0, got {key!r}")
        if not _token_ids(ids):
            raise ValueError(f"{_field('bans')}[{key!r}] must be a list of token ids >= 0, got {ids!r}")
        bans[position] = tuple(ids)
    resume = _count("resume_tokens", raw.get("resume_tokens", 0))
    mask = raw.get("mask", "completing")
    if mask not in _MASK_MODES:
        raise ValueError(f"{_field('mask')} must be one of {list(_MASK_MODES)}, got {mask!r}")
    obfuscation = DEFAULT_OBFUSCATION
    if "obfuscation" in raw:
        written = raw["obfuscation"]
        if not isinstance(written, str):
            raise ValueError(f"{_field('obfuscation')} must be a string LEVEL or LEVEL+markup, got {written!r}")
        try:
            obfuscation = Obfuscation.parse(written)
        except ValueError as exc:
            raise ValueError(f"{_field('obfuscation')}: {exc}") from None
    from guardrail.wordlists.selection import select_wordlists

    select_wordlists(wordlists, terms)  # unknown list names and invalid terms raise here, named
    return GuardArgs(wordlists, terms, bans, resume, mask, tuple(always_banned), obfuscation)
