"""Where compiled artefacts are kept: in-process LRU → Redis (optional) → local files → compile.

Keys are content addresses (:func:`guardrail.matching.compiler.artefact_key`), so a changed list, tokenizer or
compiler can never be served a stale artefact, and replicas sharing Redis share compiles. A blob that
fails to decode (corrupt, foreign, other version) is treated as a miss: recompiled and overwritten.
Redis errors are treated as misses too (the service reports Redis health separately); a lookup whose
Redis read failed does not try to write to Redis either, so one lookup waits on a Redis that does not
answer at most once (:func:`guardrail.redis_client.worst_case_stall_s` of ``redis_timeout_s``).

A request's own terms never go through the layers: :meth:`ArtefactCache.get_with_request` compiles them
apart in milliseconds (no vocab sweep) and combines them with the stored lists' artefact at run time;
nothing of them is written to disk or Redis. The disk layer is bounded (``max_disk_bytes``, least
recently used files out).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

from guardrail.atomic_file import write_atomically
from guardrail.matching.artefact import Artefact
from guardrail.matching.codec import ArtefactFormatError, decode_artefact, encode_artefact
from guardrail.matching.combined import CombinedArtefact
from guardrail.matching.compiler import COMPILER_VERSION, artefact_key, compile_artefact, compile_request_artefact
from guardrail.matching.vocab import TokenVocab
from guardrail.redis_client import DEFAULT_TIMEOUT_S, bounded_client
from guardrail.sized_cache import SizedLRU
from guardrail.wordlists.wordlist import WordList

log = logging.getLogger(__name__)

#: Artefacts in Redis expire after this many seconds unless used again (content-addressed: safe to drop).
REDIS_TTL_SECONDS = 30 * 24 * 3600
#: Default bound of the disk layer: ~200 Gemma 3 artefacts of one case mode (9 bytes per token and case
#: mode plus 1 per token: ~2.6 MB each), ~1000 SmolLM2 ones.
DEFAULT_MAX_DISK_BYTES = 512 * 1024 * 1024
#: Default bound of the in-process layer, bytes of artefacts (as weighed when kept: lazy tables grow with use).
DEFAULT_MAX_MEMORY_BYTES = 1024 * 1024 * 1024


class ArtefactCache:
    """Find or build the artefact for (vocab, word lists).

    Args:
        redis_url: ``redis://…`` to share artefacts between replicas; ``None`` for none.
        cache_dir: directory for the on-disk layer (``<cache_dir>/artefacts/<key>.bin``); ``None`` for none.
        max_memory_bytes: bytes of artefacts kept in the in-process LRU (>= 1), each weighed by the length of
            its encoded blob (its tables as stored, without the vocab it shares; known without a walk over the
            artefact, which costs ~0.4 s for an ``en`` artefact); one heavier than the bound is served but not kept.
        max_disk_bytes: bound of the disk layer in bytes: after each write, the least recently used
            files (by modification time; a disk hit refreshes it) are removed until the rest fit. The file
            just written is always kept. ``None``: unbounded.
        key_prefix: Redis key namespace.
        redis_timeout_s: socket connect and read timeout of the Redis client, seconds (the service passes
            ``GUARDRAIL_REDIS_TIMEOUT_S``); redis-py does not retry (:mod:`guardrail.redis_client`).
        on_lookup: called with the layer name (``memory|redis|disk|compile``) of every lookup.
        on_compile: called with the compile duration in seconds after every compile.
    """

    def __init__(self, redis_url: str | None = None, cache_dir: str | Path | None = None,
                 max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
                 key_prefix: str = "guardrail:", on_lookup: Callable[[str], None] | None = None,
                 on_compile: Callable[[float], None] | None = None,
                 max_disk_bytes: int | None = DEFAULT_MAX_DISK_BYTES, redis_timeout_s: float = DEFAULT_TIMEOUT_S):
        if max_disk_bytes is not None and max_disk_bytes < 0:
            raise ValueError(f"max_disk_bytes must be >= 0 or None, got {max_disk_bytes}")
        if max_memory_bytes < 1:
            raise ValueError(f"max_memory_bytes must be >= 1, got {max_memory_bytes}")
        self.cache_dir = Path(cache_dir) / "artefacts" if cache_dir is not None else None
        self.max_memory_bytes = max_memory_bytes
        self.max_disk_bytes = max_disk_bytes
        self.key_prefix = key_prefix
        self._on_lookup = on_lookup or (lambda layer: None)
        self._on_compile = on_compile or (lambda seconds: None)
        # Every put passes the blob's length as the weight; the fallback is never a walk over the tables.
        self._memory: SizedLRU[str, Artefact] = SizedLRU(max_memory_bytes, lambda artefact: 1)
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._redis = None
        if redis_url:  # redis is an edge dependency, imported by bounded_client only when a URL is configured
            self._redis = bounded_client(redis_url, redis_timeout_s)

    @property
    def memory_bytes(self) -> int:
        """Bytes the in-process layer holds now (as weighed when each artefact was kept)."""
        return self._memory.bytes

    def redis_key(self, key: str) -> str:
        return f"{self.key_prefix}artefact:{key}"

    def get(self, vocab: TokenVocab, wordlists: Sequence[WordList]) -> tuple[Artefact, str]:
        """Return ``(artefact, layer)``; ``layer`` is where it was found (``compile`` on a miss).

        Raises:
            WordListError: if the lists do not compile (nothing is cached then).
        """
        key = artefact_key(vocab, wordlists)
        found = self._memory.get(key)  # a hit becomes the most recently used
        with self._lock:
            if found is not None:
                self._on_lookup("memory")
                return found, "memory"
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # one compile per key even when many requests miss at once
            found = self._memory.get(key)
            if found is not None:
                layer = "memory"
            else:
                found, layer, redis_answered, weight = self._load(vocab, key)
                if found is None:
                    started = time.perf_counter()
                    found = compile_artefact(vocab, wordlists)
                    self._on_compile(time.perf_counter() - started)
                    layer = "compile"
                    weight = self._store(found, key, to_redis=redis_answered)
                self._memory.put(key, found, size=weight)
            with self._lock:
                self._key_locks.pop(key, None)
        self._on_lookup(layer)
        return found, layer

    def get_with_request(self, vocab: TokenVocab, stored: Sequence[WordList],
                         request: Sequence[WordList]) -> Artefact | CombinedArtefact | None:
        """The artefact guarding ``stored`` lists (through the cache layers) plus a request's own lists.

        The request's terms are compiled apart without a vocab sweep
        (:func:`~guardrail.matching.compiler.compile_request_artefact`, milliseconds, never stored) and
        combined with the stored artefact (:class:`~guardrail.matching.combined.CombinedArtefact`).
        Returns ``None`` when there are no lists at all (unguarded decoding).

        Raises:
            WordListError: if a list does not compile.
        """
        request_lists = [wl for wl in request if wl.terms]
        if not request_lists:
            return self.get(vocab, stored)[0] if stored else None
        extra = compile_request_artefact(vocab, request_lists, alongside=stored)
        return CombinedArtefact(self.get(vocab, stored)[0], extra) if stored else extra

    def _load(self, vocab: TokenVocab, key: str) -> tuple[Artefact | None, str, bool, int]:
        """``(artefact or None, layer, whether Redis answered, the blob's length in bytes)``; Redis not
        configured counts as answered."""
        redis_answered = True
        if self._redis is not None:
            redis_answered, blob = self._redis_get(key)
            if blob is not None:
                artefact = self._decode(blob, vocab, key, "redis")
                if artefact is not None:
                    return artefact, "redis", True, len(blob)
        if self.cache_dir is not None:
            path = self.cache_dir / f"{key}.bin"
            if path.exists():
                try:
                    blob = path.read_bytes()
                    os.utime(path)  # recently used: last out of the bounded disk layer
                except FileNotFoundError:  # pruned by another process meanwhile: a miss
                    return None, "compile", redis_answered, 0
                artefact = self._decode(blob, vocab, key, str(path))
                if artefact is not None:
                    return artefact, "disk", redis_answered, len(blob)
        return None, "compile", redis_answered, 0

    @staticmethod
    def _decode(blob: bytes, vocab: TokenVocab, key: str, where: str) -> Artefact | None:
        try:
            return decode_artefact(blob, vocab, key, COMPILER_VERSION)
        except ArtefactFormatError as exc:
            log.warning("discarding artefact %s from %s: %s", key[:12], where, exc)
            return None

    def _redis_get(self, key: str) -> tuple[bool, bytes | None]:
        """``(whether Redis answered, the blob or None)``."""
        import redis

        client = self._redis
        if client is None:
            return True, None
        try:
            # redis-py types every reply as ``ResponseT``; a client without ``decode_responses`` returns bytes.
            return True, cast("bytes | None", client.get(self.redis_key(key)))
        except redis.RedisError as exc:
            log.warning("redis unavailable for artefact lookup: %s", exc)
            return False, None

    def _store(self, artefact: Artefact, key: str, to_redis: bool = True) -> int:
        """Write ``artefact`` to Redis (unless ``to_redis`` is False) and disk; returns its blob's length, bytes."""
        blob = encode_artefact(artefact, key, COMPILER_VERSION)
        if self._redis is not None and to_redis:  # not after a failed read: one stall per lookup at most
            import redis

            try:
                self._redis.set(self.redis_key(key), blob, ex=REDIS_TTL_SECONDS)
            except redis.RedisError as exc:
                log.warning("redis unavailable for artefact store: %s", exc)
        if self.cache_dir is not None:
            path = self.cache_dir / f"{key}.bin"
            write_atomically(path, blob)
            self._prune_disk(keep=path)
        return len(blob)

    def _prune_disk(self, keep: Path) -> None:
        """Remove the least recently used artefact files until the layer fits ``max_disk_bytes``."""
        cache_dir = self.cache_dir
        if self.max_disk_bytes is None or cache_dir is None:
            return
        files = []
        for path in cache_dir.glob("*.bin"):
            try:
                stat = path.stat()
            except FileNotFoundError:  # another process pruned it
                continue
            files.append((stat.st_mtime_ns, stat.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.max_disk_bytes:
                break
            if path == keep:
                continue
            path.unlink(missing_ok=True)
            total -= size
            log.info("artefact disk cache over %d bytes: removed %s", self.max_disk_bytes, path.name)
