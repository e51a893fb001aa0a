"""The word lists a request asks for: stored lists by name (the default set when it names none) and
its own terms (``banned_terms`` and aliases) as one more list named ``request``."""

from __future__ import annotations

from collections.abc import Sequence

from guardrail.wordlists.wordlist import WordList, WordListError, wordlist_from_terms
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
        ApiError: 413 beyond ``GUARDRAIL_MAX_REQUEST_TERMS``; 422 naming the bad term (``banned_terms.3``).
    """
    if not terms:
        return None
    limit = runtime.settings.max_request_terms
    if len(terms) > limit:
        raise ApiError(413, f"{len(terms)} request terms exceed the limit of {limit} (GUARDRAIL_MAX_REQUEST_TERMS)",
                       param=param, code="too_many_terms")
    try:
        return wordlist_from_terms(to_terms(list(terms)), name=REQUEST_LIST)
    except WordListError as exc:
        raise invalid_term(exc, param) from None


def invalid_term(exc: WordListError, param: str) -> ApiError:
    """The 422 for a term the core refused; ``exc.line`` (1-based index) becomes ``param.<index>``."""
    index = f".{exc.line - 1}" if exc.line else ""
    return ApiError(422, f"invalid term: {exc.reason}", param=f"{param}{index}", code="invalid_term")
