"""guardrail: a tokenizer-level banned-term automaton, a guard session any engine can drive, and engines.

Layers (docs/design.md): ``guardrail.wordlists`` (lists and their format) → ``guardrail.matching``
(normalisation, text matcher, automaton, compiler, artefact, codec, cache, token matcher, vocab) →
``guardrail.guard`` (the per-request guard session, bans, hold-back, events) → ``guardrail.engines``
(one package per engine integration). The core imports nothing from ``service/``.

The public API is re-exported here and imported lazily, so ``import guardrail`` stays cheap (no torch)::

    from guardrail import Guard, TextDelta, Rollback, Finish
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> module that defines it. Lazy (PEP 562): importing the package must not import torch.
_EXPORTS = {
    "Guard": "guardrail.api",
    "Completion": "guardrail.guard.events",
    "GuardSession": "guardrail.guard.session",
    "Event": "guardrail.guard.events",
    "TextDelta": "guardrail.guard.events",
    "Rollback": "guardrail.guard.events",
    "Finish": "guardrail.guard.events",
    "FinishReason": "guardrail.guard.events",
    "Usage": "guardrail.guard.events",
    "WordList": "guardrail.wordlists.wordlist",
    "WordListError": "guardrail.wordlists.wordlist",
    "MatchMode": "guardrail.wordlists.wordlist",
    "TextMatcher": "guardrail.matching.textmatch",
    "TextMatch": "guardrail.matching.textmatch",
    "Artefact": "guardrail.matching.artefact",
    "TokenMatcher": "guardrail.matching.token_matcher",
    "TokenVocab": "guardrail.matching.vocab",
    "compile_artefact": "guardrail.matching.compiler",
    "SamplingParams": "guardrail.params",
    "StreamingDecoder": "guardrail.engines.transformers.decoder",
    "MaskOnlyLogitsProcessor": "guardrail.engines.transformers.logits_processor",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'guardrail' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
