"""The long-lived objects of one service process, built once by the app's lifespan.

The engine (:class:`guardrail.engines.base.Engine`, built by :func:`service.engines.build_engine`: the embedded
transformers model, in-process vLLM, or a gateway to a remote server), the tokenizer and its
:class:`~guardrail.matching.vocab.TokenVocab`, the artefact cache (memory → Redis → disk → compile), the word-list
store and its in-memory catalog, and the generation worker.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from transformers.utils import logging as transformers_logging

from guardrail.engines.base import Engine, ModelConfig
from guardrail.grammar import matcher as grammar_matcher
from guardrail.guard.escalation import ESCALATION_ARTEFACTS
from guardrail.guard.events import Event
from guardrail.matching.cache import ArtefactCache
from guardrail.matching.charset import word_chars
from guardrail.matching.memo_warmup import WarmStats, warm_memo
from guardrail.matching.obfuscation import Obfuscation
from guardrail.matching.regex import automaton as regex_automaton
from guardrail.matching.textmatch import TextMatcher
from guardrail.matching.token_text import TokenTextIndex
from guardrail.matching.vocab import TokenVocab
from guardrail.models import load_tokenizer
from guardrail.params import SamplingParams
from guardrail.sized_cache import SizedLRU
from guardrail.wordlists.wordlist import WordList, bundled_names, bundled_wordlist, load_wordlist, with_obfuscation
from service.catalog import WordListCatalog
from service.engines import build_engine
from service.metrics import GlobalFamilies, ServiceMetrics
from service.request_compiles import REQUEST_LIST, RequestCompiler
from service.settings import Settings
from service.stores.embedded import EmbeddedStore
from service.stores.redis_store import RedisStore
from service.stores.store import StoredWordList, WordListStore
from service.worker import GenerationWorker

log = logging.getLogger("guardrail.service")

__all__ = ["REQUEST_LIST", "Runtime", "default_set", "open_store", "seed_lists"]


def open_store(settings: Settings) -> WordListStore:
    """The Redis store when ``GUARDRAIL_REDIS_URL`` is set, else the embedded one under ``data_dir``."""
    if settings.redis_url:
        return RedisStore(settings.redis_url, settings.redis_prefix, settings.redis_timeout_s,
                          settings.audit_max_records, settings.wordlist_history)
    return EmbeddedStore(settings.data_dir, settings.audit_max_records, settings.wordlist_history)


def seed_lists(settings: Settings) -> list[WordList]:
    """Lists the store is seeded with (each only if its name was never used): every bundled list, plus
    default-set entries that are ``.txt`` files (``guardrail serve --wordlist my.txt``), named by their
    file stem."""
    lists = [bundled_wordlist(name) for name in bundled_names()]
    lists += [load_wordlist(name) for name in settings.wordlists if name.endswith(".txt")]
    return lists


def default_set(settings: Settings) -> list[str]:
    """The default set's list names (a ``.txt`` entry is known by its file stem)."""
    return [Path(n).stem if n.endswith(".txt") else n for n in settings.wordlists]


class Runtime:
    """Everything a request needs. Building one loads the model (seconds from the disk cache, minutes
    on first use); :meth:`start` starts the background threads, :meth:`close` stops them.

    Raises:
        guardrail.wordlists.wordlist.WordListError: a default-set ``.txt`` file is invalid.
        OSError / ValueError from the model loader: the model cannot be loaded.
    """

    def __init__(self, settings: Settings, metrics: ServiceMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        started = time.perf_counter()
        self.started_at = int(time.time())
        self.model_id = settings.model  # what /v1/models lists and requests must name
        # The store first: a second process on the embedded store's data directory fails here, in
        # milliseconds, rather than after the model load (service/stores/embedded.py locks it).
        self.store = open_store(settings)
        transformers_logging.disable_progress_bar()  # stderr carries JSON lines only
        try:
            # The tokenizer only: the engine loads weights if it needs them (the remote engine never does).
            self.tokenizer = load_tokenizer(settings.tokenizer or settings.model)
            self.vocab = TokenVocab.from_tokenizer(self.tokenizer)
            self.engine: Engine = build_engine(settings, self.tokenizer, self.vocab,
                                               on_step=metrics.batch_size.observe)
        except BaseException:
            self.store.close()  # releases the data directory's lock for a retry in this process
            raise
        prefix = self.engine.capabilities.global_metrics_prefix
        if prefix is not None:  # the engine's own metrics, in prometheus-client's process-wide registry
            metrics.registry.register(GlobalFamilies(prefix))
        log.info("model loaded", extra={"model": settings.model, "seconds": round(time.perf_counter() - started, 2)})

        self.artefacts = ArtefactCache(
            redis_url=settings.redis_url,
            cache_dir=settings.cache_dir,
            key_prefix=settings.redis_prefix,
            redis_timeout_s=settings.redis_timeout_s,
            on_lookup=lambda layer: metrics.artefact_cache_lookups.labels(layer).inc(),
            on_compile=metrics.compile_duration.observe,
            max_memory_bytes=settings.artefact_cache_bytes,
        )
        self.default_wordlists = default_set(settings)
        self.catalog = WordListCatalog(self.store, metrics, lambda: seed_lists(settings),
                                       settings.version_poll_interval_s)
        # One worker thread per stream the engine runs at once, each blocked on its own stream's events.
        threads = max(settings.max_concurrent, self.engine.capacity)
        self.worker = GenerationWorker(self._stream, metrics, threads, settings.max_queue, settings.retry_after_s)
        # Shared by the worker threads (SizedLRU takes its own lock), bounded by bytes.
        self._text_matchers: SizedLRU[tuple[object, ...], TextMatcher] = SizedLRU(
            settings.text_matcher_cache_bytes, TextMatcher.approx_bytes)
        # A request's own terms compile in a pool of their own, within a budget (service/request_compiles.py).
        self.compiler = RequestCompiler(settings, metrics)
        ESCALATION_ARTEFACTS.resize(settings.escalation_cache_bytes)
        grammar_matcher.resize_grammar_cache(settings.grammar_cache_bytes)
        metrics.watch_cache("artefacts", lambda: self.artefacts.memory_bytes, settings.artefact_cache_bytes)
        metrics.watch_cache("text_matchers", lambda: self._text_matchers.bytes, settings.text_matcher_cache_bytes)
        metrics.watch_cache("escalation", lambda: ESCALATION_ARTEFACTS.bytes, settings.escalation_cache_bytes)
        metrics.watch_cache("grammars", lambda: grammar_matcher.GRAMMARS.bytes, settings.grammar_cache_bytes)
        metrics.watch_cache("regex_automata", lambda: regex_automaton.AUTOMATA.bytes,
                            regex_automaton.AUTOMATON_CACHE_BYTES)
        metrics.watch_cache("compile_refusals", lambda: self.compiler.refusals_bytes,
                            settings.compile_refusal_cache_bytes)
        #: What the start-up warm-up's :func:`~guardrail.matching.memo_warmup.warm_memo` did to the default set's
        #: artefact (``None`` until it has run, or when it failed).
        self.memo_warmup: WarmStats | None = None

    def start(self) -> None:
        """Load the word lists, start the worker, and compile the default set's artefact in the background.

        Raises:
            ValueError: the default set names a list the store does not have (a typo in
                ``GUARDRAIL_WORDLISTS`` would otherwise fail every request that names no lists).
        """
        self.catalog.start()
        missing = [name for name in self.default_wordlists if self.catalog.get(name) is None]
        if missing:
            self.catalog.stop()
            raise ValueError(f"GUARDRAIL_WORDLISTS names unknown word lists {missing}; known: "
                             f"{', '.join(self.catalog.names())}")
        try:
            self.engine.start()
        except Exception:
            self.catalog.stop()
            raise
        self.worker.start()
        threading.Thread(target=self._warm_up, name="guardrail-warmup", daemon=True).start()

    def close(self) -> None:
        self.compiler.close()
        self.worker.stop()
        self.engine.close()
        self.catalog.stop()
        self.store.close()

    def engine_problem(self) -> str | None:
        """Why this process cannot generate now, or None (``/readyz`` answers 503 ``unavailable``, ``/healthz``
        503): an in-process engine loop or a worker thread ended. A remote upstream that does not answer is not
        this process's problem: restarting it would not help, so ``/readyz`` reports it as ``degraded``."""
        health = self.engine.health()
        if not health.ok and not self.engine.capabilities.upstream:
            return health.detail
        if not self.worker.alive():
            return "a generation worker thread is not running"
        return None

    def _stream(self, prompt_ids: Sequence[int], wordlists: tuple[WordList, ...], params: SamplingParams,
                cancel: threading.Event) -> Iterator[Event]:
        """The decoder stream of one choice (runs on a worker thread); no lists = no guard.

        The request's own terms (the list named :data:`REQUEST_LIST`) are compiled apart in milliseconds
        and combined with the stored lists' cached artefact (docs/matching.md).
        """
        stored = [wl for wl in wordlists if wl.name != REQUEST_LIST]
        request_lists = [wl for wl in wordlists if wl.name == REQUEST_LIST]
        artefact = self.artefacts.get_with_request(self.vocab, stored, request_lists)
        return self.engine.stream(prompt_ids, artefact, params, cancel)

    @property
    def context_length(self) -> int:
        """Prompt + completion tokens at most: the engine's real ``max_model_len`` (the remote engine's is
        read from the upstream at start)."""
        return self.engine.context_length

    @property
    def vocab_size(self) -> int:
        """Token ids a request may name are below this (the model's logits width)."""
        return self.engine.num_logits

    @property
    def model_config(self) -> ModelConfig | None:
        """What the watermark detector needs of the model's config; ``None`` when the engine does not know it
        (:attr:`EngineCapabilities.model_config <guardrail.engines.base.EngineCapabilities.model_config>`)."""
        return self.engine.capabilities.model_config

    # The embedded engine's parts, for the tests and tools that reach into it (None on other engines).
    @property
    def model(self):
        return getattr(self.engine, "model", None)

    @property
    def decoder(self):
        return getattr(self.engine, "decoder", None)

    @property
    def batched(self):
        return getattr(self.engine, "batched", None)

    def _warm_up(self) -> None:
        try:
            lists = [s.wordlist for s in self.catalog.resolve(self.default_wordlists)]
            artefact, _ = self.artefacts.get(self.vocab, with_obfuscation(lists, self.settings.obfuscation))
            TokenTextIndex.for_vocab(self.vocab)  # request terms compile against it: build it before they come
            word_chars()  # and regex terms against the \w \d \s tables (~0.3 s once)
            # The (state, token) pairs of ordinary prose, computed now rather than by the first requests' guard
            # (docs/matching.md, "Warming the memo"; ~0.1-0.9 s on 2 cores).
            stats = warm_memo(artefact)
            self.memo_warmup = stats
            log.info("artefact memo warmed", extra={"tokens": stats.tokens, "pairs": stats.pairs,
                                                    "hits": stats.hits, "seconds": round(stats.seconds, 3)})
            # Everything built so far lives as long as the process (model, vocab tables, token-text index,
            # artefacts): move it out of the cyclic collector's reach, so that a request that allocates (a
            # request's terms, obfuscation automata) does not pay a full collection over millions of objects.
            gc.freeze()
        except Exception:  # noqa: BLE001 - a failed warm-up only costs the first request time
            log.exception("artefact warm-up failed")

    def text_matcher(self, stored: Sequence[StoredWordList], obfuscation: Obfuscation) -> TextMatcher:
        """The text matcher for these list versions at this obfuscation setting (for lists without their
        own; built once per combination, LRU-kept), over private automata (``TextMatcher(shared=False)``)."""
        key = (*((s.wordlist.name, s.version) for s in stored), obfuscation)
        found = self._text_matchers.get(key)  # a hit counts as a use (LRU order)
        if found is not None:
            return found
        # Built outside any lock (it can take a while); two threads may build the same one, the last one kept.
        # Private automata: clients' text (megabytes of anything) must not grow the ones generations step.
        matcher = TextMatcher([s.wordlist for s in stored], obfuscation=obfuscation, shared=False)
        self._text_matchers.put(key, matcher)
        return matcher

