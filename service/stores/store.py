"""The word-list store contract shared by the embedded and the Redis store.

A stored list is a :class:`~guardrail.wordlists.wordlist.WordList` plus a version number that grows by one on
every change of that name (a deleted and re-created list keeps counting, so an old ETag never matches
again). Lists are stored in the word-list text format (``format_wordlist`` / ``parse_wordlist``,
docs/wordlists.md), which round-trips every valid list. Every change appends an :class:`AuditRecord`.

The latest versions of each name are kept (``history_max``, ``GUARDRAIL_WORDLIST_HISTORY``), the current one
included, so that two can be compared and an older one written back (``GET /admin/wordlists/{name}/versions``);
a delete keeps them, as it keeps the version counter.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Literal, Protocol

from guardrail.wordlists.wordlist import Term, WordList, format_wordlist, split_regex_prefix, wordlist_from_terms

Action = Literal["create", "replace", "update", "delete", "seed"]

# Names become file names (embedded store) and Redis key suffixes: no separators, no dot-files.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


@dataclass(frozen=True)
class StoredWordList:
    """A word list as the store holds it.

    Attributes:
        wordlist: the terms and allow-terms.
        version: 1 for the first version of the name, +1 per change.
        updated_at: Unix time of the change, seconds.
    """

    wordlist: WordList
    version: int
    updated_at: float

    @cached_property
    def digest(self) -> str:
        """12 hex digits of the SHA-256 of the list's text (:func:`format_wordlist`): what the content is."""
        return content_digest(format_wordlist(self.wordlist))

    @property
    def etag(self) -> str:
        """Strong HTTP entity tag of this version: ``"v3-<digest>"``. The content digest makes a tag name one
        content even if a version number is given twice (a Redis that lost part of its data, docs/service.md)."""
        return entity_tag(self.version, self.digest)


def content_digest(text: str) -> str:
    """12 hex digits (48 bits) of the SHA-256 of ``text``: the content part of an entity tag."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def entity_tag(version: int, digest: str) -> str:
    """``"v<version>-<digest>"``, quoted as HTTP writes entity tags."""
    return f'"v{version}-{digest}"'


#: Versions of one list kept by default (``GUARDRAIL_WORDLIST_HISTORY``), the current one included.
DEFAULT_HISTORY = 20


@dataclass(frozen=True)
class VersionInfo:
    """One kept version of a list, without its terms: when it was written and its size.

    Attributes:
        version: the version number.
        updated_at: Unix time of the change that wrote it, seconds.
        terms: number of terms.
        allow: number of allow-terms.
    """

    version: int
    updated_at: float
    terms: int
    allow: int

    @classmethod
    def of(cls, stored: StoredWordList) -> VersionInfo:
        return cls(stored.version, stored.updated_at, len(stored.wordlist.terms), len(stored.wordlist.allow))

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def trimmed(history: list[VersionInfo], new: VersionInfo | None, keep: int) -> tuple[list[VersionInfo], list[int]]:
    """``history`` (oldest first) with ``new`` appended, cut to its last ``keep`` entries; and the versions cut."""
    entries = [*history, new] if new is not None else list(history)
    cut = len(entries) - keep if len(entries) > keep else 0
    return entries[cut:], [e.version for e in entries[:cut]]


@dataclass(frozen=True)
class AuditRecord:
    """One change of one list: when (Unix seconds), what, which token id, how many terms added/removed."""

    time: float
    action: Action
    list: str
    version: int
    token_id: str | None
    added: int
    removed: int

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


_TAG = re.compile(r"^v(\d+)(?:-([0-9a-f]{1,64}))?$")


@dataclass(frozen=True)
class Precondition:
    """An ``If-Match`` / ``If-None-Match`` condition on the current version of a list (or tenant).

    ``tags=None, absent=False``: ``If-Match: *`` (it must exist); ``tags={(3, "1f2e..."), (4, None)}``: the
    current version must be one of them, and its content digest too where the tag has one (a bare ``"v4"``,
    as earlier versions of this service wrote tags, names the version only); ``absent=True``:
    ``If-None-Match: *``.
    """

    tags: frozenset[tuple[int, str | None]] | None = None
    absent: bool = False

    def holds(self, current: int | None, digest: str | None = None) -> bool:
        """Whether the condition holds for the current version ``current`` (None: absent) whose content
        digest is ``digest``."""
        if self.absent:
            return current is None
        if current is None:
            return False
        if self.tags is None:
            return True
        return any(version == current and (want is None or want == digest) for version, want in self.tags)

    def holds_for(self, current: StoredWordList | None) -> bool:
        return self.holds(current.version if current else None, current.digest if current else None)

    @classmethod
    def if_match(cls, header: str) -> Precondition:
        """Parse an ``If-Match`` header (``*``, ``"v3-1f2e3d4c5b6a"``, ``W/"v3", "v4-..."``).

        Raises:
            ValueError: naming the entity tag that is not one of this service's (``"v<int>[-<hex>]"``).
        """
        header = header.strip()
        if header == "*":
            return cls()
        tags = set()
        for tag in (part.strip() for part in header.split(",")):
            bare = tag[2:] if tag.startswith("W/") else tag
            found = _TAG.match(bare.strip('"'))
            if found is None:
                raise ValueError(f"entity tag {tag!r} is not of the form \"v<version>-<digest>\"")
            tags.add((int(found.group(1)), found.group(2)))
        return cls(tags=frozenset(tags))


class StoreError(Exception):
    """Base class of the store's errors."""


class WordListNotFound(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"word list {name!r} does not exist")
        self.name = name


class PreconditionFailed(StoreError):
    """The precondition did not hold; ``current`` is the current version (None: the list is absent) and
    ``etag`` its entity tag."""

    def __init__(self, name: str, current: int | None, etag: str | None = None, what: str = "word list") -> None:
        state = "does not exist" if current is None else f"is at version {current} (ETag {etag})"
        super().__init__(f"precondition failed: {what} {name!r} {state}")
        self.name = name
        self.current = current
        self.etag = etag

    @classmethod
    def of(cls, name: str, current: StoredWordList | None) -> PreconditionFailed:
        return cls(name, current.version if current else None, current.etag if current else None)


class StoreUnavailable(StoreError):
    """The backing store (Redis, the data directory) cannot be read or written right now."""


class WriteOutcomeUnknown(StoreUnavailable):
    """A write was sent but whether it committed cannot be told now (the store stopped answering between the
    commit and the check of its write marker, docs/service.md "Writes and their outcome"): reading the
    current version tells."""


class WriteConflict(StoreError):
    """Other writers kept changing the list during every attempt of a write (busy, not broken: retry)."""


@dataclass(frozen=True)
class Change:
    """What a write does to one list: the new content (None: delete) and the audit counts."""

    wordlist: WordList | None
    action: Action
    added: int
    removed: int


def replacement(current: StoredWordList | None, new: WordList, action: Action | None = None) -> Change:
    """The change replacing ``current`` by ``new`` (terms added/removed counted as sets)."""
    old_terms = set(current.wordlist.terms) if current else set()
    new_terms = set(new.terms)
    chosen: Action = action or ("replace" if current else "create")
    return Change(new, chosen, len(new_terms - old_terms), len(old_terms - new_terms))


def _same_term(term: Term, written: str) -> bool:
    """``written`` (as in a request: ``re:PATTERN`` for a regex term) names ``term``; a pattern compares
    exactly, a literal text case-insensitively unless the term is case-sensitive."""
    text, regex = split_regex_prefix(written.strip())
    if regex != term.regex:
        return False
    if term.case_sensitive or regex:
        return term.text == text
    return term.text.casefold() == text.casefold()


def patched(current: StoredWordList, add: Iterable[str | Term], remove: Sequence[str]) -> Change:
    """The change adding ``add`` and removing every term whose text equals one of ``remove``
    (case-insensitively for case-insensitive terms; ``re:PATTERN`` names a regex term).

    Raises:
        guardrail.wordlists.wordlist.WordListError: an added term is invalid (``line`` = its 1-based index).
    """
    additions = wordlist_from_terms(add, name=current.wordlist.name).terms
    kept = [t for t in current.wordlist.terms if not any(_same_term(t, r) for r in remove)]
    seen = set(kept)
    merged = kept + [t for t in additions if t not in seen]
    new = WordList(current.wordlist.name, tuple(merged), current.wordlist.allow, current.wordlist.obfuscation)
    return replacement(current, new, "update")


def deletion(current: StoredWordList) -> Change:
    return Change(None, "delete", 0, len(current.wordlist.terms))


Compute = Callable[[StoredWordList | None], Change | None]


class WordListStore(Protocol):
    """Where word lists and the audit log live (embedded files or Redis).

    Every method may raise :class:`StoreUnavailable`; the write methods also raise
    :class:`PreconditionFailed` and :class:`WordListNotFound`.
    """

    kind: str  # "embedded" | "redis"

    def ping(self) -> None:
        """Raise :class:`StoreUnavailable` unless the store answers."""

    def versions(self) -> dict[str, int]:
        """Current version of every list (cheap: what replicas poll)."""

    def get(self, name: str) -> StoredWordList | None: ...

    def has_history(self, name: str) -> bool:
        """Whether a version was ever given to ``name`` (true after a delete too)."""

    def write(
        self, name: str, compute: Compute, precondition: Precondition | None, token_id: str | None
    ) -> StoredWordList | None:
        """Apply ``compute(current)`` atomically if ``precondition`` holds.

        ``compute`` returns the :class:`Change` (or None: nothing to do, the current list is returned).
        Returns the new stored list, or None after a delete.
        """

    def audit(self, limit: int) -> list[AuditRecord]:
        """The latest ``limit`` audit records, newest first."""

    def history(self, name: str) -> list[VersionInfo]:
        """The kept versions of ``name``, newest first (the current one first while the list exists; after a
        delete, the versions it had); ``[]`` for a name never used."""

    def get_version(self, name: str, version: int) -> StoredWordList | None:
        """Version ``version`` of ``name`` while it is kept (:meth:`history`), else None."""

    def close(self) -> None: ...


def seed(store: WordListStore, wordlists: Iterable[WordList]) -> list[str]:
    """Store each list whose name was never used (startup, recovery of a Redis that lost its data);
    a list an operator deleted stays deleted. Returns the names it created."""
    created: list[str] = []
    for wordlist in wordlists:
        if store.has_history(wordlist.name):
            continue

        def compute(current: StoredWordList | None, wl: WordList = wordlist) -> Change | None:
            if current is not None:  # created meanwhile by another replica
                return None
            if wl.name not in created:  # compute may run again when a Redis transaction retries
                created.append(wl.name)
            return replacement(None, wl, "seed")

        store.write(wordlist.name, compute, None, None)
    return created
