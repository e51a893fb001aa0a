"""The word lists a request asks for: stored lists by name (the default set when it names none) and
its own terms (``banned_terms`` and aliases) as one more list named ``request``, compiled in the bounded
compile pool (:mod:`service.request_compiles`)."""

from __future__ import annotations

from collections.abc import Sequence

from guardrail.wordlists.wordlist import WordList
from service.catalog import UnknownWordList
from service.errors import ApiError
from service.request_compiles import check_compiles, invalid_term
from service.runtime import Runtime
from service.schemas.terms import TermItem
from service.stores.store import StoredWordList

__all__ = ["check_compiles", "invalid_term", "request_list", "stored_lists"]


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


async def request_list(runtime: Runtime, terms: Sequence[TermItem], param: str = "banned_terms") -> WordList | None:
    """The request's own terms as a list named ``request`` (None without terms), compiled off the event loop
    within the request compile budget (:meth:`service.request_compiles.RequestCompiler.request_list`).

    Raises:
        ApiError: 413 beyond ``GUARDRAIL_MAX_REQUEST_TERMS`` or ``GUARDRAIL_MAX_REQUEST_REGEX_TERMS``; 400
            naming the bad term (``banned_terms.3``), regex terms whose automaton is over the request limit
            included, or the field when the terms together are over it or over the time budget; 503
            ``compile_busy`` when the compile pool and its wait are full.
    """
    return await runtime.compiler.request_list(terms, param)
