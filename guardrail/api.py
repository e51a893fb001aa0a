"""The public Python API: load a model with its word lists once, then generate or stream guarded text.

Example:
    >>> from guardrail.api import Guard
    >>> guard = Guard.load(model="smollm2", wordlists=("en",), banned_terms=("sorry",))
    >>> done = guard.generate(messages=[{"role": "user", "content": "Apologise."}], temperature=0, max_tokens=40)
    >>> done.text, done.finish_reason, done.usage.rollbacks
    >>> for event in guard.stream(prompt="Once upon a time", max_tokens=40):
    ...     if isinstance(event, TextDelta): print(event.text, end="", flush=True)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from guardrail.engines.transformers.decoder import StreamingDecoder, generation_eos_ids
from guardrail.engines.transformers.watermark import WatermarkVerdict, detect_watermark
from guardrail.guard.events import Completion, Event, Finish, FinishReason, Rollback, TextDelta, Usage
from guardrail.matching.combined import ArtefactLike
from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION, Obfuscation
from guardrail.matching.textmatch import TextMatch, TextMatcher
from guardrail.matching.vocab import TokenVocab
from guardrail.params import SamplingParams
from guardrail.prompts import prompt_ids
from guardrail.wordlists.selection import select_wordlists
from guardrail.wordlists.wordlist import WordList, with_obfuscation

__all__ = ["Completion", "FinishReason", "Guard", "TextDelta", "Rollback", "Finish", "Usage"]


def sampling_params(params: Mapping[str, Any]) -> SamplingParams:
    """``SamplingParams(**params)``, with an unknown name reported as a ``ValueError`` naming it.

    Values are caller data of any type: ``SamplingParams`` checks each and raises ``ValueError`` naming it."""
    unknown = sorted(set(params) - SamplingParams.field_names())
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown}; accepted: {sorted(SamplingParams.field_names())}")
    return SamplingParams(**params)


def _parsed(obfuscation: Obfuscation | str) -> Obfuscation:
    """``obfuscation`` typed: the public API takes the setting as written too, parsed here, at the edge."""
    return obfuscation if isinstance(obfuscation, Obfuscation) else Obfuscation.parse(obfuscation)


class Guard:
    """A model, its tokenizer and the compiled word lists, ready to generate.

    Build it with :meth:`load` (by model name) or :meth:`from_model` (a model already loaded). Thread-safe
    for concurrent calls (each generation has its own state; the model is only read), though on CPU they
    share the cores.

    Attributes:
        model, tokenizer, vocab: the loaded model, its tokenizer and bytes table.
        wordlists: the word lists guarded against.
        artefact: their compiled form (``None`` when there are no terms: decoding is unguarded).
        decoder: the :class:`~guardrail.engines.transformers.decoder.StreamingDecoder`.
    """

    def __init__(self, model, tokenizer, vocab: TokenVocab, wordlists: Sequence[WordList],
                 artefact: ArtefactLike | None):
        self.model = model
        self.tokenizer = tokenizer
        self.vocab = vocab
        self.wordlists = tuple(wordlists)
        self.artefact = artefact
        self.decoder = StreamingDecoder(model, tokenizer, vocab)
        self._text_matcher = TextMatcher(self.wordlists, shared=False)  # check() reads untrusted text

    @classmethod
    def load(cls, model: str = "smollm2", wordlists: Sequence[str] = ("en",), banned_terms: Sequence[str] = (),
             redis_url: str | None = None, cache_dir: str | Path | None = None,
             obfuscation: Obfuscation | str = DEFAULT_OBFUSCATION) -> Guard:
        """Load a model and compile (or fetch) its artefact.

        Args:
            model: ``smollm2``, ``gemma3``, a Hugging Face model directory or a ``.gguf`` file.
            wordlists: bundled list names (``"en"``, ``"de"``…) or ``.txt`` word-list files.
            banned_terms: extra terms (the request list, named ``request``).
            redis_url: share compiled artefacts through Redis.
            cache_dir: directory for compiled artefacts on disk (default: guardrail's cache directory).
            obfuscation: which obfuscated forms match too, for lists without their own level: an
                :class:`~guardrail.matching.obfuscation.Obfuscation`, or as written (``off``, ``homoglyphs``,
                ``leet``, ``spaced``, ``masked``, optionally ``+markup``; docs/matching.md), parsed here;
                default ``DEFAULT_OBFUSCATION``, as on every path.

        Raises:
            ValueError: unknown model (see :func:`guardrail.models.resolve_model`), invalid ``obfuscation``.
            WordListError: unknown list name, malformed list file, invalid term.
        """
        # before the slow loads: a typo fails fast
        lists = with_obfuscation(select_wordlists(wordlists, banned_terms), _parsed(obfuscation))
        return cls.load_lists(model, lists, redis_url=redis_url, cache_dir=cache_dir)

    @classmethod
    def load_lists(cls, model: str, wordlists: Sequence[WordList], redis_url: str | None = None,
                   cache_dir: str | Path | None = None, obfuscation: Obfuscation | str = DEFAULT_OBFUSCATION) -> Guard:
        """Like :meth:`load`, with word lists already built (:mod:`guardrail.wordlists.wordlist`); ``obfuscation``
        is the level of the lists that set none."""
        from guardrail.models import load_model, load_tokenizer

        lists = with_obfuscation(wordlists, _parsed(obfuscation))
        tokenizer = load_tokenizer(model)
        return cls._build(load_model(model), tokenizer, lists, redis_url, cache_dir)

    @classmethod
    def from_model(cls, model, tokenizer, wordlists: Sequence[str] = ("en",), banned_terms: Sequence[str] = (),
                   redis_url: str | None = None, cache_dir: str | Path | None = None,
                   obfuscation: Obfuscation | str = DEFAULT_OBFUSCATION) -> Guard:
        """The full rollback decoder on a model you already loaded (``AutoModelForCausalLM.from_pretrained``).

        Same guarantee as :meth:`load` (unlike the mask-only
        :class:`~guardrail.engines.transformers.logits_processor.MaskOnlyLogitsProcessor`): the decoder keeps its
        own KV cache per request and rolls back; the model is only read.

        Args:
            model: a transformers ``PreTrainedModel`` causal LM, in eval mode, on the CPU.
            tokenizer: its tokenizer (a transformers fast tokenizer; the token bytes are read from it).
            wordlists, banned_terms, redis_url, cache_dir, obfuscation: as for :meth:`load`.

        Raises:
            ValueError: ``model`` is not a causal LM with a config, is in training mode or not on the CPU.
            WordListError: unknown list name, malformed list file, invalid term.

        Example:
            >>> model = AutoModelForCausalLM.from_pretrained(path).eval()
            >>> guard = Guard.from_model(model, AutoTokenizer.from_pretrained(path), banned_terms=("sorry",))
            >>> guard.generate(prompt="I am", max_tokens=20).text
        """
        if not callable(model) or not hasattr(getattr(model, "config", None), "get_text_config"):
            raise ValueError(f"model: expected a transformers PreTrainedModel, got {type(model).__name__}")
        if getattr(model, "training", False):
            raise ValueError("model: in training mode (dropout on); call model.eval() first")
        device = getattr(model, "device", None)
        if device is not None and getattr(device, "type", "cpu") != "cpu":
            raise ValueError(f"model: the transformers engine decodes on the CPU, the model is on {device}")
        lists = with_obfuscation(select_wordlists(wordlists, banned_terms), _parsed(obfuscation))
        return cls._build(model, tokenizer, lists, redis_url, cache_dir)

    @classmethod
    def _build(cls, model, tokenizer, lists: list[WordList], redis_url: str | None,
               cache_dir: str | Path | None) -> Guard:
        from guardrail.matching.cache import ArtefactCache
        from guardrail.models import cache_dir as default_cache_dir

        vocab = TokenVocab.from_tokenizer(tokenizer, eos_ids=generation_eos_ids(model))
        artefact = None
        if any(wl.terms for wl in lists):
            directory = cache_dir if cache_dir is not None else default_cache_dir()
            cache = ArtefactCache(redis_url=redis_url, cache_dir=directory)
            # Ad-hoc banned terms (the "request" list) are compiled apart, never cached (docs/matching.md).
            artefact = cache.get_with_request(vocab, [wl for wl in lists if wl.name != "request"],
                                              [wl for wl in lists if wl.name == "request"])
        return cls(model, tokenizer, vocab, lists, artefact)

    def prompt_ids(self, prompt: str | None = None, messages: Sequence[Mapping[str, str]] | None = None) -> list[int]:
        """The prompt's token ids (chat template for ``messages``, raw text for ``prompt``)."""
        return prompt_ids(self.tokenizer, prompt=prompt, messages=messages)

    def stream(self, prompt: str | None = None, messages: Sequence[Mapping[str, str]] | None = None, *,
               cancel: threading.Event | None = None, **params) -> Iterator[Event]:
        """Generate, yielding :class:`TextDelta`, :class:`Rollback` and a final :class:`Finish`.

        Args:
            prompt: raw completion text (base models), or
            messages: a chat (``[{"role": "user", "content": "…"}]``) for models with a chat template.
            cancel: set it to stop early (``finish_reason="cancelled"``).
            **params: :class:`~guardrail.engines.transformers.sampling.SamplingParams` fields (``max_tokens``,
                ``temperature``, ``top_p``, ``seed``, ``stop``, ``logit_bias``, ``watermark``, ``max_rollbacks``,
                ``evasion_guard`` (``"substring"``, the default, ``"edit"`` or ``"off"``)…).

        Raises:
            ValueError: bad prompt/messages or parameter (named), before anything is generated.
        """
        sampling = sampling_params(params)
        ids = self.prompt_ids(prompt, messages)
        return self.decoder.stream(ids, self.artefact, sampling, cancel)

    def generate(self, prompt: str | None = None, messages: Sequence[Mapping[str, str]] | None = None, *,
                 cancel: threading.Event | None = None, **params) -> Completion:
        """Generate a whole answer; same arguments as :meth:`stream`."""
        return Completion.from_events(self.stream(prompt, messages, cancel=cancel, **params))

    def check(self, text: str) -> list[TextMatch]:
        """The guarded terms found in ``text`` (the text contract,
        :class:`~guardrail.matching.textmatch.TextMatcher`)."""
        return self._text_matcher.scan(text)

    def detect_watermark(self, text: str, hashing_key: int | None = None) -> WatermarkVerdict:
        """Whether ``text`` carries this model's watermark (generated with ``watermark=True``).

        Raises:
            ValueError: text shorter than 2 tokens.
        """
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        kwargs = {} if hashing_key is None else {"hashing_key": hashing_key}
        return detect_watermark(ids, self.model.config, **kwargs)
