"""``POST /v1/check``: scan a text (e.g. a user's prompt) against word lists; matches with spans."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from guardrail.matching.obfuscation import Obfuscation
from guardrail.matching.textmatch import TextMatch, TextMatcher
from guardrail.wordlists.wordlist import WordList
from service.auth import require_client
from service.deps import RuntimeDep
from service.errors import ApiError, documented_errors
from service.request_lists import request_list, stored_lists
from service.runtime import Runtime
from service.schemas.check import MAX_CHECK_MATCHES, CheckMatch, CheckRequest, CheckResponse, ListVersion
from service.schemas.terms import TermItem
from service.stores.store import StoredWordList
from service.tenants.access import caller_of, may_read_list
from service.tenants.policy import ANONYMOUS_POLICY, PolicyViolation

router = APIRouter(prefix="/v1", tags=["check"], dependencies=[Depends(require_client)])


@dataclass(frozen=True)
class Scanner:
    """The lists a request is scanned with (the caller's policy applied) and their matcher; shared by
    ``/v1/check`` and ``/v1/moderations``."""

    stored: tuple[StoredWordList, ...]
    requested: WordList | None
    obfuscation: Obfuscation
    runtime: Runtime

    @classmethod
    async def for_request(cls, runtime: Runtime, request: Request, wordlists: Sequence[str] | None,
                          terms: Sequence[TermItem], terms_param: str, obfuscation: Obfuscation | None) -> Scanner:
        """The request's own terms compile in the compile pool (:mod:`service.request_compiles`).

        Raises:
            ApiError: 403 naming the field the caller's policy does not allow; 404 for an unknown list; what
                :func:`service.request_lists.request_list` raises for the request's terms.
        """
        caller = caller_of(request)
        policy = caller.policy if caller is not None else ANONYMOUS_POLICY
        try:
            names = policy.wordlists(wordlists, runtime.default_wordlists)
            policy.check_request_terms(len(terms), terms_param)
            level = policy.obfuscation_for(obfuscation, runtime.settings.obfuscation)
        except PolicyViolation as exc:
            raise ApiError(403, str(exc), param=exc.param, code="not_allowed") from None
        return cls(stored_lists(runtime, names), await request_list(runtime, terms, terms_param), level, runtime)

    @property
    def list_names(self) -> list[str]:
        """The names of the lists scanned (``request`` for the request's own terms)."""
        return [s.wordlist.name for s in self.stored] + (["request"] if self.requested is not None else [])

    def scan(self, text: str) -> list[TextMatch]:
        """Every match in ``text``, overlapping ones too (CPU-bound: call from a worker thread)."""
        found = self.runtime.text_matcher(self.stored, self.obfuscation).scan(text) if self.stored else []
        if self.requested is not None:
            found += TextMatcher([self.requested], obfuscation=self.obfuscation, shared=False).scan(text)
        return found


@router.post("/check", response_model=CheckResponse, summary="Scan a text for banned terms",
             responses=documented_errors(e401="Missing or unknown API key.", e403="Not allowed by the key's policy.",
                                         e404="Unknown word list.", e429="The API key's rate limit.",
                                         e413="Body or request terms beyond the server's limits."))
async def check(body: CheckRequest, runtime: RuntimeDep, request: Request) -> CheckResponse:
    """Every occurrence of a term of the chosen lists (and of ``banned_terms``), overlapping ones too;
    the first ``MAX_CHECK_MATCHES`` (1000) by position are listed, ``match_count`` counts them all.

    Spans index ``text`` in code points (``text[start:end]``), under the matching contract of
    docs/wordlists.md (NFKC, case folding, whitespace runs, match modes) and the obfuscation level
    (``obfuscation``, else the API key's or the server's: docs/matching.md), the same the decoder enforces. The
    API key's policy applies as to a generation (its default, allowed and required lists, request terms,
    obfuscation floor). ``term`` is given only for lists the caller may read
    (:func:`service.tenants.access.may_read_list`), else null: a private list cannot be read out by scanning
    a dictionary.

    The request's terms compile in the bounded compile pool; the scan (megabytes take a while) runs in the
    thread pool, never on the event loop.
    """
    scanner = await Scanner.for_request(runtime, request, body.wordlists, body.request_terms(),
                                        "bad_words" if body.bad_words else "banned_terms", body.obfuscation)
    found = await run_in_threadpool(scanner.scan, body.text)
    first = heapq.nsmallest(MAX_CHECK_MATCHES, found, key=lambda m: (m.start, m.end, m.list_name))
    caller = caller_of(request)
    readable = {name: may_read_list(caller, name, admin=False) for name in {m.list_name for m in first}}
    matches = [CheckMatch(term=m.term if readable[m.list_name] else None, list=m.list_name, start=m.start,
                          end=m.end, text=body.text[m.start:m.end]) for m in first]
    return CheckResponse(
        flagged=bool(matches),
        matches=matches,
        match_count=len(found),
        truncated=len(found) > len(matches),
        wordlists=[ListVersion(name=s.wordlist.name, version=s.version) for s in scanner.stored],
    )
