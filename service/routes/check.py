"""``POST /v1/check``: scan a text (e.g. a user's prompt) against word lists; matches with spans."""

from __future__ import annotations

import heapq

from fastapi import APIRouter, Depends, Request

from guardrail.matching.textmatch import TextMatcher
from service.auth import require_client
from service.deps import RuntimeDep
from service.errors import ApiError, documented_errors
from service.request_lists import request_list, stored_lists
from service.schemas.check import MAX_CHECK_MATCHES, CheckMatch, CheckRequest, CheckResponse, ListVersion
from service.tenants.access import caller_of
from service.tenants.policy import ANONYMOUS_POLICY, PolicyViolation

router = APIRouter(prefix="/v1", tags=["check"], dependencies=[Depends(require_client)])


@router.post("/check", response_model=CheckResponse, summary="Scan a text for banned terms",
             responses=documented_errors(e401="Missing or unknown API key.", e403="Not allowed by the key's policy.",
                                         e404="Unknown word list.", e429="The API key's rate limit.",
                                         e413="Body or request terms beyond the server's limits."))
def check(body: CheckRequest, runtime: RuntimeDep, request: Request) -> CheckResponse:
    """Every occurrence of a term of the chosen lists (and of ``banned_terms``), overlapping ones too;
    the first ``MAX_CHECK_MATCHES`` (1000) by position are listed, ``match_count`` counts them all.

    Spans index ``text`` in code points (``text[start:end]``), under the matching contract of
    docs/wordlists.md (NFKC, case folding, whitespace runs, match modes) and the obfuscation level
    (``obfuscation``, else the API key's or the server's: docs/matching.md), the same the decoder enforces. The
    API key's policy applies as to a generation (its default, allowed and required lists, request terms,
    obfuscation floor).
    """
    caller = caller_of(request)
    policy = caller.policy if caller is not None else ANONYMOUS_POLICY
    try:
        names = policy.wordlists(body.wordlists, runtime.default_wordlists)
        policy.check_request_terms(len(body.request_terms()), "bad_words" if body.bad_words else "banned_terms")
        obfuscation = policy.obfuscation_for(body.obfuscation, runtime.settings.obfuscation)
    except PolicyViolation as exc:
        raise ApiError(403, str(exc), param=exc.param, code="not_allowed") from None
    stored = stored_lists(runtime, names)
    found = runtime.text_matcher(stored, obfuscation).scan(body.text) if stored else []
    requested = request_list(runtime, body.request_terms())
    if requested is not None:
        found += TextMatcher([requested], obfuscation=obfuscation).scan(body.text)
    first = heapq.nsmallest(MAX_CHECK_MATCHES, found, key=lambda m: (m.start, m.end, m.list_name))
    matches = [CheckMatch(term=m.term, list=m.list_name, start=m.start, end=m.end, text=body.text[m.start:m.end])
               for m in first]
    return CheckResponse(
        flagged=bool(matches),
        matches=matches,
        match_count=len(found),
        truncated=len(found) > len(matches),
        wordlists=[ListVersion(name=s.wordlist.name, version=s.version) for s in stored],
    )
