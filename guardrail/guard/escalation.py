"""The evasion guard: once a term caused a rollback, match it in substring mode for the rest of the generation.

After a rollback the model often writes the refused term in a form a whole-word rule does not catch —
glued to a neighbour ("whattalk", "TALKMaster"), joined by an underscore, which the matching contract
counts as a word character ("STUPID_stiform"). The guard session *escalates* such a term: from the
rollback target of its first hit (the escalation position) on, the term is also matched as a ``substring``
term (same case rule, the lists' allow-terms), by its own :class:`~guardrail.matching.token_matcher.TokenMatcher`
over a small artefact of its own. Its hits roll back like any other hit; a rollback to before the escalation
position drops the escalation (that text no longer exists). docs/design.md §5 and docs/matching.md say what
is caught and what is not.

What lives where:

* :func:`escalation_terms` — the patterns an escalated term is matched as: the term as a substring, and in
  ``edit`` mode also its one-edit variants, as regex terms compiled into the same automaton
  (``[^ ]orry|s[^ ]rry|…``).
* :class:`EscalationCache` — compiled escalation artefacts, shared by every request of the process (an LRU
  keyed by vocab fingerprint, term patterns and allow-terms), since their memoised transitions are worth
  keeping. An artefact holds no per-request state.
* :class:`Escalation` — one escalated term in one generation: the escalation position and the matcher.
  Per-request; the :class:`~guardrail.guard.session.GuardSession` owns its escalations.

A request that never hits builds none of this: no matcher, no artefact, no work per step.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from guardrail.matching.artefact import Artefact
from guardrail.matching.term_spec import AllowSpec, TermSpec, term_spec
from guardrail.matching.token_matcher import Hit, TokenMatcher
from guardrail.matching.vocab import TokenVocab
from guardrail.params import EvasionGuard
from guardrail.sized_cache import SizedLRU, deep_sizeof
from guardrail.wordlists.wordlist import MatchMode, Term

#: Terms with fewer letters and digits are not escalated: as substrings they hide in innocent words
#: ("no" in "not", "ass" in "class"); the whole-word rule keeps applying to them.
MIN_ESCALATION_CHARS = 4
#: ``edit`` mode tolerates one edit only in terms with at least this many letters and digits (the issue's
#: rule): a shorter term is one edit away from too many ordinary words ("talk": "walk", "tall", "tale").
MIN_EDIT_CHARS = 5
#: ... and at most this many characters: the variants of an n-character term make ~4n alternatives of ~n
#: characters each, which must stay within the regex automaton's limits (MAX_REGEX_NFA_STATES).
MAX_EDIT_CHARS = 32
#: What an inserted or substituted character may be: anything but a space (a space would split the word,
#: and "spa is" is not "paris" misspelled).
_EDIT_WILDCARD = "[^ ]"
#: Bytes of compiled escalation artefacts kept per process (one per distinct term, case rule and allow-term set;
#: ``GUARDRAIL_ESCALATION_CACHE_BYTES`` in the service).
ESCALATION_CACHE_BYTES = 128 * 1024 * 1024


def _letters(text: str) -> str:
    return "".join(c for c in text if c.isalnum())


def escalation_terms(term: TermSpec, mode: EvasionGuard) -> tuple[TermSpec, ...]:
    """The patterns an escalated ``term`` is matched as, with local term ids ``0..k-1``; empty when the
    term is not escalated (mode ``off``, fewer than :data:`MIN_ESCALATION_CHARS` letters and digits, or a
    one-word ``substring`` term in ``substring`` mode, which already matches everything this would add).

    ``substring`` mode, every pattern in ``substring`` mode with the term's case rule:

    * the term itself ("talk" → "whattalk", "talking", "TALKMaster", "STUPID_stiform"); a regex term as
      its own pattern;
    * for a phrase whose words are separated by spaces only, the words joined with nothing and with one
      ``_`` ("thank you" → "thankyou", "thank_you").

    ``edit`` mode adds, for each of those literal forms with :data:`MIN_EDIT_CHARS` to
    :data:`MAX_EDIT_CHARS` characters, its one-edit variants as substring regex terms (one per kind of
    edit): a character substituted (any character but a space), inserted between two of its characters,
    deleted, or two neighbours swapped ("SOORY", "sorrry", "WELCOM", "srory"; "sroy" is two edits). An
    insertion at either end needs no pattern: the term itself, as a substring, already matches.

    The returned specs keep the term's ``text`` and ``list_name``, so a hit reports the term as written.
    """
    if mode == "off" or len(_letters(term.normalized)) < MIN_ESCALATION_CHARS:
        return ()
    if term.regex:
        return (TermSpec(0, term.list_name, term.text, term.normalized, MatchMode.SUBSTRING, term.case_sensitive,
                         True),)
    forms = [term.normalized]
    words = term.normalized.split(" ")
    if len(words) > 1 and all(w and all(c.isalnum() or c == "_" for c in w) for w in words):
        forms += ["".join(words), "_".join(words)]
    elif term.match is MatchMode.SUBSTRING and mode == "substring":
        return ()
    specs = [TermSpec(0, term.list_name, term.text, form, MatchMode.SUBSTRING, term.case_sensitive)
             for form in forms]
    if mode == "edit":
        for form in forms:
            if MIN_EDIT_CHARS <= len(_letters(form)) and len(form) <= MAX_EDIT_CHARS:
                specs += [_regex_spec(term, pattern) for pattern in one_edit_patterns(form)]
    return tuple(replace(spec, term_id=i) for i, spec in enumerate(specs))


def one_edit_patterns(form: str) -> list[str]:
    """Regex patterns (Python syntax, over normalised text) matching the strings one edit away from ``form``:
    one per kind of edit (substitution, insertion between two characters, deletion, swap of neighbours), each
    an alternation; see :func:`escalation_terms` for which edits."""
    n, esc, any_char = len(form), re.escape, _EDIT_WILDCARD
    kinds = [
        [esc(form[:i]) + any_char + esc(form[i + 1:]) for i in range(n)],  # substitution
        [esc(form[:i]) + any_char + esc(form[i:]) for i in range(1, n)],  # insertion between two characters
        [esc(form[:i] + form[i + 1:]) for i in range(n)],  # deletion
        [esc(form[:i] + form[i + 1] + form[i] + form[i + 2:]) for i in range(n - 1) if form[i] != form[i + 1]],
    ]
    return ["(?:" + "|".join(dict.fromkeys(alternatives)) + ")" for alternatives in kinds if alternatives]


def _regex_spec(term: TermSpec, pattern: str) -> TermSpec:
    """A substring regex spec of ``pattern`` reported as ``term``."""
    spec = term_spec(0, term.list_name, Term(pattern, MatchMode.SUBSTRING, term.case_sensitive, regex=True))
    return replace(spec, text=term.text)


class EscalationCache:
    """Compiled escalation artefacts, least recently used dropped beyond ``max_bytes`` (thread-safe).

    An artefact is compiled lazily (no vocab sweep: :class:`~guardrail.matching.artefact.Artefact` with
    ``lazy=True``, milliseconds plus, once per process and vocab, the token-text index) and then shared by
    every request that escalates the same term; its memoised transitions and completing sets grow with use
    (it is weighed when kept). It holds no per-request state (the :class:`Escalation` does).

    Args:
        max_bytes: bytes of artefacts kept (>= 1).
        sizeof: an artefact's weight in bytes (default: :func:`~guardrail.sized_cache.deep_sizeof` without the
            vocab it shares).

    Raises:
        ValueError: ``max_bytes`` < 1.
    """

    def __init__(self, max_bytes: int = ESCALATION_CACHE_BYTES, sizeof: Callable[[Artefact], int] | None = None):
        self._sizeof = sizeof or (lambda artefact: deep_sizeof(artefact, shared=(artefact.vocab,)))
        self._artefacts: SizedLRU[tuple, Artefact] = SizedLRU(max_bytes, self._sizeof)
        self._lock = threading.Lock()
        self.compiles = 0

    @property
    def max_bytes(self) -> int:
        return self._artefacts.max_bytes

    @property
    def bytes(self) -> int:
        """Bytes the kept artefacts weigh (as weighed when kept)."""
        return self._artefacts.bytes

    def resize(self, max_bytes: int) -> None:
        """Bound the cache by ``max_bytes`` from now on (what it holds is dropped).

        Raises:
            ValueError: ``max_bytes`` < 1.
        """
        self._artefacts = SizedLRU(max_bytes, self._sizeof)

    def __len__(self) -> int:
        return len(self._artefacts)

    def get(self, vocab: TokenVocab, terms: tuple[TermSpec, ...], allows: tuple[AllowSpec, ...]) -> Artefact:
        """The artefact of ``terms`` (from :func:`escalation_terms`) with ``allows`` for ``vocab``."""
        key = (vocab.fingerprint, terms, allows)
        found = self._artefacts.get(key)  # a hit becomes the most recently used
        if found is not None:
            return found
        # Compiled outside the lock (a few ms; the first use in a process also builds the token-text
        # index); two requests racing on one term compile it twice and keep the first.
        built = Artefact(vocab, terms, allows, lazy=True)
        with self._lock:
            found = self._artefacts.get(key)
            if found is None:
                found = built
                self.compiles += 1
                self._artefacts.put(key, built)
        return found

    def clear(self) -> None:
        self._artefacts.clear()


#: The process-wide cache every guard session uses.
ESCALATION_ARTEFACTS = EscalationCache()


class Escalation:
    """One escalated term in one generation: its matcher, stepped over the tokens from :attr:`start` on.

    Positions given to and returned by this class are the session's (completion tokens); the matcher
    counts from :attr:`start`.

    Args:
        term_id: the term's id in the session's artefact (what escalated).
        artefact: the compiled :func:`escalation_terms` of the term.
        start: the escalation position (the rollback target of the term's first hit).

    Attributes:
        always_banned: ``int64 (k,)`` tokens whose own text holds an escalated pattern: masked at every
            position from :attr:`start` on.
    """

    __slots__ = ("term_id", "start", "matcher", "always_banned")

    def __init__(self, term_id: int, artefact: Artefact, start: int):
        self.term_id = term_id
        self.start = start
        self.matcher = TokenMatcher(artefact)
        self.always_banned: np.ndarray = artefact.always_banned

    def __repr__(self) -> str:
        return f"Escalation(term_id={self.term_id}, start={self.start}, tokens={len(self.matcher)})"

    def push(self, token_id: int) -> Hit | None:
        """Append the token at session position ``start + len(matcher)``, or the hit it completes (its
        ``start_token`` a session position; the token is then not appended)."""
        hit = self.matcher.push(token_id)
        return None if hit is None else self.absolute(hit)

    def finish(self) -> Hit | None:
        """End of text here: a match pending on an allow-term decision may complete."""
        hit = self.matcher.finish()
        return None if hit is None else self.absolute(hit)

    def releasable(self) -> int:
        """Session positions before which no match of this escalation can begin."""
        return self.start + self.matcher.releasable()

    def rollback_to(self, position: int) -> None:
        """Keep the tokens before session ``position`` (``>= start``)."""
        self.matcher.rollback_to(position - self.start)

    def retry_bans(self, hit: Hit) -> set[int]:
        """:meth:`TokenMatcher.retry_bans` of a hit this escalation reported, after :meth:`rollback_to` it."""
        return self.matcher.retry_bans(self.local(hit))

    def absolute(self, hit: Hit) -> Hit:
        return _shifted(hit, self.start)

    def local(self, hit: Hit) -> Hit:
        return _shifted(hit, -self.start)


def _shifted(hit: Hit, offset: int) -> Hit:
    return Hit(hit.term_id, hit.list_name, hit.term, hit.start_token + offset, hit.first_token, hit.stream,
               hit.depth)
