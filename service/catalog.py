"""The in-memory copy of the stored word lists that requests read.

Generation never waits on the store: it reads this copy, which a background thread keeps current by
re-reading the store's version index every ``poll_interval_s`` (the truth) and at once when a change
notification arrives (Redis pub/sub: a hint). A change made on this replica is applied here right
after the store accepted it. When the store does not answer, the copy keeps serving the last versions
seen and :attr:`WordListCatalog.healthy` turns false; on recovery the default lists are seeded again if
the store lost them. A store that lost its data while answering (a Redis restarted without persistence
between two polls; the store notices it from its epoch, see :mod:`service.stores.redis_store`) is
re-seeded too, counted in ``guardrail_store_resets_total`` and reported by ``/readyz``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence

from guardrail.wordlists.wordlist import WordList
from service.metrics import ServiceMetrics
from service.stores.store import StoredWordList, StoreUnavailable, WordListStore, seed

log = logging.getLogger("guardrail.service.catalog")


class UnknownWordList(KeyError):
    """A request named a word list that does not exist; ``name`` is the first unknown one."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class WordListCatalog:
    """Current word lists by name, refreshed from ``store``.

    Args:
        store: the embedded or Redis store.
        metrics: ``guardrail_wordlist_version`` and ``guardrail_redis_up`` are kept here.
        defaults: the lists to seed into the store when absent (the bundled default set); called
            at start and after each recovery.
        poll_interval_s: seconds between two reads of the version index.
    """

    def __init__(
        self,
        store: WordListStore,
        metrics: ServiceMetrics,
        defaults: Callable[[], Iterable[WordList]],
        poll_interval_s: float = 1.0,
    ) -> None:
        self.store = store
        self._metrics = metrics
        self._defaults = defaults
        self._interval = poll_interval_s
        self._lists: dict[str, StoredWordList] = {}
        self._lock = threading.Lock()  # serialises refreshes with local updates
        self._hint = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.healthy = False
        self._known = False  # no refresh finished yet: the first result is not a change of health
        self.last_error: str | None = None
        self._resets_seen = 0  # store.resets already handled (counted, re-seeded)

    # -- reading (lock-free: the dict is replaced, never mutated) -----------------------------------
    def names(self) -> list[str]:
        return sorted(self._lists)

    def get(self, name: str) -> StoredWordList | None:
        return self._lists.get(name)

    def resolve(self, names: Sequence[str]) -> tuple[StoredWordList, ...]:
        """The current version of each named list, in the given order (duplicates dropped).

        Raises:
            UnknownWordList: naming the first list that does not exist.
        """
        lists = self._lists
        found = []
        for name in dict.fromkeys(names):
            stored = lists.get(name)
            if stored is None:
                raise UnknownWordList(name)
            found.append(stored)
        return tuple(found)

    # -- keeping current ------------------------------------------------------------------------
    def start(self) -> None:
        """Seed and load synchronously (so the first request sees the lists), then start refreshing.

        A store that does not answer at start leaves the catalog unhealthy with the default lists
        served from memory (version 0) until the store recovers.
        """
        self.refresh()
        if not self._lists and not self.healthy:
            fallback = {wl.name: StoredWordList(wl, 0, 0.0) for wl in self._defaults()}
            self._replace(fallback)
        poller = threading.Thread(target=self._poll, name="guardrail-wordlist-poll", daemon=True)
        self._threads.append(poller)
        listen = getattr(self.store, "listen", None)
        if listen is not None:
            listener = threading.Thread(
                target=listen, args=(self._hint.set, self._stop), name="guardrail-wordlist-hints", daemon=True
            )
            self._threads.append(listener)
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._hint.set()
        for thread in self._threads:
            thread.join(timeout=5)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._hint.wait(self._interval)
            self._hint.clear()
            if not self._stop.is_set():
                self.refresh()

    def refresh(self) -> None:
        """Bring the copy up to the store's versions; records health instead of raising."""
        with self._lock:
            try:
                versions = self.store.versions()
                resets = getattr(self.store, "resets", 0)
                lost = resets - self._resets_seen  # data losses the store noticed since the last refresh
                if lost:
                    self._metrics.store_resets.inc(lost)
                    self._resets_seen = resets
                if not self.healthy or lost:
                    created = seed(self.store, self._defaults())
                    if created:
                        log.info("seeded word lists", extra={"lists": created})
                        versions = self.store.versions()
                lists = {n: s for n, s in self._lists.items() if versions.get(n) == s.version}
                for name in versions:
                    if name not in lists:
                        stored = self.store.get(name)
                        if stored is not None:
                            lists[name] = stored
            except StoreUnavailable as exc:
                self._set_health(False, str(exc))
                return
            self._replace(lists)
            self._set_health(True, None)

    def apply_local(self, name: str, stored: StoredWordList | None) -> None:
        """Apply a change this replica just made in the store (``None``: deleted)."""
        with self._lock:
            lists = dict(self._lists)
            if stored is None:
                lists.pop(name, None)
            else:
                lists[name] = stored
            self._replace(lists)

    def _replace(self, lists: dict[str, StoredWordList]) -> None:
        for gone in set(self._lists) - set(lists):
            self._metrics.wordlist_version.remove(gone)
        for name, stored in lists.items():
            self._metrics.wordlist_version.labels(name).set(stored.version)
        self._lists = lists

    def _set_health(self, healthy: bool, error: str | None) -> None:
        if healthy != self.healthy or not self._known:
            if healthy:
                if self._known:
                    log.info("word-list store answers again", extra={"store": self.store.kind})
            else:
                log.warning("word-list store unavailable", extra={"store": self.store.kind, "error": error})
        self.healthy = healthy
        self._known = True
        self.last_error = error
        self._metrics.set_redis_up(healthy)
