"""Compile word lists into an :class:`~guardrail.matching.artefact.Artefact` for one tokenizer.

Unlike enumerating the tokenizations of each term (exponential in the term length, blind to terms that
start or end inside a token), the compiler builds one character-level automaton over all terms
(:mod:`guardrail.matching.automaton`) and runs every vocab token through it once from the text start; transitions
from other states are computed on first use during decoding and memoised.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from guardrail.matching.artefact import Artefact
from guardrail.matching.regex.automaton import MAX_REQUEST_REGEX_DFA_STATES
from guardrail.matching.term_spec import flatten, flatten_allows
from guardrail.matching.vocab import TokenVocab
from guardrail.wordlists.wordlist import WordList, WordListError, wordlist_digest

#: Bump when the artefact's meaning or layout changes: old cached artefacts then miss instead of lying.
#: 2: regex terms (term table with a regex flag, regex streams after the plain ones).
#: 3: obfuscation levels (obfuscation streams after the regex ones; every default-ignorable code point removed
#: by normalisation).
#: 4: what people type (issue 28): forms in any context (the spaced view's joint mark), doubled letters,
#: look-alike symbols, one real letter in short terms, runs of censor characters, one-edit forms of long
#: terms, emphasis read on the term side, decomposed accents, Arabic and Hebrew vowel marks dropped, halfwidth
#: voiced kana composed.
#: 5: one-edit forms also swap a term's last two letters ("fukc", "shti").
COMPILER_VERSION = 5


def artefact_key(vocab: TokenVocab, wordlists: Sequence[WordList]) -> str:
    """Content address of the artefact: sha256 hex of tokenizer fingerprint × list digest × compiler version."""
    material = f"{vocab.fingerprint}\n{wordlist_digest(wordlists)}\n{COMPILER_VERSION}"
    return hashlib.sha256(material.encode()).hexdigest()


def compile_artefact(vocab: TokenVocab, wordlists: Sequence[WordList]) -> Artefact:
    """Compile ``wordlists`` against ``vocab``.

    Raises:
        WordListError: if a term normalises to nothing matchable (e.g. only zero-width characters), or a
            regex term is outside the supported subset or its automaton exceeds the limits
            (docs/matching.md, "Regex terms"); the message names the list and the term. Nothing is
            cached on error.
    """
    terms, allows = flatten(wordlists)
    _check_terms(terms)
    return Artefact(vocab, terms, allows)


def compile_request_artefact(vocab: TokenVocab, wordlists: Sequence[WordList],
                             alongside: Sequence[WordList] = ()) -> Artefact:
    """Compile a request's own terms without a vocab sweep (milliseconds; never cached or stored).

    Transitions, from the text start too, are computed on demand for the tokens actually decoded; the
    always-banned tokens come from the per-vocab :class:`~guardrail.matching.token_text.TokenTextIndex`.
    Combine the result with the stored lists' artefact in a
    :class:`~guardrail.matching.combined.CombinedArtefact`.

    Args:
        vocab: the model's bytes table.
        wordlists: the request's lists (usually one, named ``request``).
        alongside: the stored lists compiled with them: their allow-terms apply to the request's
            substring terms too, as they would in one joint compile.

    Raises:
        WordListError: as :func:`compile_artefact`; regex terms get the lower automaton limit of request
            terms (:data:`~guardrail.matching.regex.automaton.MAX_REQUEST_REGEX_DFA_STATES`).
    """
    terms, allows = flatten(wordlists)
    _check_terms(terms)
    joint = {(a.normalized, a.case_sensitive): a for a in (*flatten_allows(alongside), *allows)}
    return Artefact(vocab, terms, tuple(joint.values()), lazy=True, regex_states=MAX_REQUEST_REGEX_DFA_STATES)


def _check_terms(terms) -> None:
    for spec in terms:
        if not spec.regex and not any(c.isalnum() for c in spec.normalized):
            raise WordListError(f"term {spec.text!r} has no letter or digit after normalisation", spec.list_name)
