"""The word lists a request asks for: stored lists by name (the default set when it names none) and
its own terms (``banned_terms`` and aliases) as one more list named ``request``."""

from __future__ import annotations

from collections.abc import Sequence

from guardrail.matching.regex.automaton import MAX_REQUEST_REGEX_DFA_STATES, check_regex_terms
from guardrail.wordlists.wordlist import Term, WordList, WordListError, wordlist_from_terms
from service.catalog import UnknownWordList
from service.errors import ApiError
from service.runtime import REQUEST_LIST, Runtime
from service.schemas.terms import TermItem, to_terms
from service.stores.store import StoredWordList


def stored_lists(runtime: Runtime, names: Sequence[str] | None) -> tuple[StoredWordList, ...]:
    """The current versions of the named lists (``None``: the default set).

    Raises:
        ApiError: 404 naming ``wordlists`` for a list that does not exist.
    """
    try:
        return runtime.catalog.resolve(runtime.default_wordlists if names is None else names)
    except UnknownWordList as exc:
        raise ApiError(404, f"word list {exc.name!r} does not exist", param="wordlists",
                       code="wordlist_not_found") from None


def request_list(runtime: Runtime, terms: Sequence[TermItem], param: str = "banned_terms") -> WordList | None:
    """The request's own terms as a list named ``request`` (None without terms).

    Raises:
        ApiError: 413 beyond ``GUARDRAIL_MAX_REQUEST_TERMS``; 400 naming the bad term (``banned_terms.3``),
            regex terms whose automaton is over the request limit included.
    """
    if not terms:
        return None
    limit = runtime.settings.max_request_terms
    if len(terms) > limit:
        raise ApiError(413, f"{len(terms)} request terms exceed the limit of {limit} (GUARDRAIL_MAX_REQUEST_TERMS)",
                       param=param, code="too_many_terms")
    items = to_terms(list(terms))
    try:
        wordlist = wordlist_from_terms(items, name=REQUEST_LIST)
    except WordListError as exc:
        raise invalid_term(exc, param) from None
    check_compiles(wordlist, items, param, MAX_REQUEST_REGEX_DFA_STATES)
    return wordlist


def check_compiles(wordlist: WordList, items: Sequence[str | Term], param: str, max_states: int) -> None:
    """Check that the regex terms of ``wordlist`` (built from ``items``) compile within ``max_states``
    automaton nodes, which parsing alone cannot tell (docs/matching.md, "Regex terms").

    Raises:
        ApiError: 400 naming ``param.<index>`` (the index in ``items``), the term and the reason; ``param``
            alone when only the regex terms together are too large.
    """
    if not any(term.regex for term in wordlist.terms):
        return
    try:
        check_regex_terms(wordlist, max_states)
    except WordListError as exc:
        if exc.line is not None:  # a line of the deduplicated list: find the request item it came from
            term = wordlist.terms[exc.line - 1]
            index = next(i for i, item in enumerate(items, start=1) if wordlist_from_terms([item]).terms[0] == term)
            exc = WordListError(exc.reason, exc.source, index)
        raise invalid_term(exc, param) from None


def invalid_term(exc: WordListError, param: str) -> ApiError:
    """The 400 for a term the core refused; ``exc.line`` (1-based index) becomes ``param.<index>``."""
    index = f".{exc.line - 1}" if exc.line else ""
    return ApiError(400, f"invalid term: {exc.reason}", param=f"{param}{index}", code="invalid_term")
