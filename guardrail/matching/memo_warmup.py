"""Warming an artefact's transition memo from a bundled prose corpus, before the first request needs it.

An artefact computes a ``(state, token)`` transition on its first visit (:meth:`Artefact.transition
<guardrail.matching.artefact.Artefact.transition>`, ~15-50 µs) and answers later visits with one dictionary
lookup, so the first requests of a process pay for the pairs that ordinary prose visits. :func:`warm_memo` visits
them at start-up: it tokenizes ``data/warm_corpus.txt`` (original chat-assistant prose written for this project:
explanations, step lists, markdown, code, numbers, dialogue, a few paragraphs in German, French and Spanish; no
term of the bundled ``en`` list at the default obfuscation level) over the artefact's vocab and pushes each
paragraph through a :class:`~guardrail.matching.token_matcher.TokenMatcher` from the text start, as a decoder would.

There is no model tokenizer at this layer, only :class:`~guardrail.matching.vocab.TokenVocab`'s bytes per id:
:class:`GreedyTokenizer` takes the longest token whose bytes begin the rest of the text. That is not the model's
BPE, but it spells the same text with the same vocab, mostly with the same tokens (docs/matching.md, "Warming the
memo", has the overlap and the costs; ``bench/memo_warmup.py`` measures them).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from guardrail.matching.artefact import Artefact
from guardrail.matching.combined import ArtefactLike
from guardrail.matching.token_matcher import TokenMatcher
from guardrail.matching.vocab import TokenVocab

__all__ = ["CORPUS_PATH", "DEFAULT_MAX_TOKENS", "GreedyTokenizer", "WarmStats", "ids_by_bytes", "paragraphs",
           "warm_memo"]

#: The bundled prose corpus (UTF-8, ~3,000 words; package data).
CORPUS_PATH = Path(__file__).parent / "data" / "warm_corpus.txt"
#: Tokens :func:`warm_memo` pushes at most: the bundled corpus is ~4,900 tokens on SmolLM2 and ~4,500 on Gemma 3,
#: so this bounds only a caller's own, larger corpus.
DEFAULT_MAX_TOKENS = 20_000

# A paragraph with the blank lines after it (whitespace only; the next paragraph keeps its indentation): the
# chunks concatenate back to the text, and each chunk ends the way a paragraph of a chat answer does.
_PARAGRAPH = re.compile(r".+?(?:\n(?:[^\S\n]*\n)+|\Z)", re.DOTALL)


@dataclass(frozen=True)
class WarmStats:
    """What one :func:`warm_memo` did.

    Attributes:
        tokens: tokens pushed (the corpus' greedy tokens, up to ``max_tokens``).
        pairs: ``(state, token)`` pairs that were not memoised before their push (each computed once, then kept).
        hits: tokens that completed a term (rolled back and skipped); 0 with the bundled corpus.
        paragraphs: paragraphs pushed, each from the text start.
        seconds: wall time, tokenization included.
        swept_pairs: transitions memoised in bulk after the corpus, from the states a sweep can read the vocab
            from (:meth:`Artefact.fill_memo <guardrail.matching.artefact.Artefact.fill_memo>`; 0 where none can:
            an obfuscation or regex stream).
    """

    tokens: int
    pairs: int
    hits: int
    paragraphs: int
    seconds: float
    swept_pairs: int = 0


class GreedyTokenizer:
    """Longest-match tokenization over a vocab's bytes: at each position, the longest token that spells the
    next bytes.

    Built from ``vocab.token_bytes`` alone: a dict bytes -> id, looked up at each position for every token length
    of the vocab from the longest down (~0.09 s to build for Gemma 3's 262,144 tokens, ~0.06 s to encode the
    bundled corpus; a ``marisa_trie.BinaryTrie`` encodes it in ~0.005 s but takes ~0.25 s to build:
    ``bench/memo_warmup.py``). Of several ids with the same bytes, the lowest one outside a SentencePiece
    byte-fallback block (``<0x00>`` ... ``<0xFF>``, which the model's tokenizer uses only for bytes no piece
    spells) is taken, as the model's tokenizer would (:func:`ids_by_bytes`).

    Args:
        vocab: the token bytes table (special tokens, ``b""``, are never produced).
    """

    def __init__(self, vocab: TokenVocab):
        self._ids = ids_by_bytes(vocab)
        self._lengths = sorted({len(data) for data in self._ids}, reverse=True)

    def encode(self, text: str) -> list[int]:
        """Token ids spelling ``text`` (UTF-8), longest match first.

        ``b"".join(vocab.token_bytes[i] for i in encode(text)) == text.encode()`` except for a byte no token of
        the vocab spells (SmolLM2 has no token for 0x04, 0xF1, ... : see :class:`TokenVocab`), which is dropped
        as the model's own BPE drops it.
        """
        data = text.encode("utf-8")
        get, lengths = self._ids.get, self._lengths
        tokens: list[int] = []
        position, end = 0, len(data)
        while position < end:
            for length in lengths:
                token_id = get(data[position:position + length])
                if token_id is not None:
                    tokens.append(token_id)
                    # A slice cut short by the end matched the whole rest: this ends the loop either way.
                    position += length
                    break
            else:
                position += 1
        return tokens


def ids_by_bytes(vocab: TokenVocab) -> dict[bytes, int]:
    """The token id :class:`GreedyTokenizer` writes for each distinct non-empty token bytes string: the lowest id
    outside a SentencePiece byte-fallback block, else the block's id."""
    token_bytes = vocab.token_bytes
    fallback = _byte_fallback_ids(token_bytes)
    ids: dict[bytes, int] = {}
    for token_id in (*(i for i in range(len(token_bytes)) if i not in fallback), *fallback):
        data = token_bytes[token_id]
        if data:
            ids.setdefault(data, token_id)
    return ids


def _byte_fallback_ids(token_bytes: Sequence[bytes]) -> range:
    """The ids of a SentencePiece byte-fallback block (256 consecutive ids spelling bytes 0x00 ... 0xFF in
    order), or an empty range (byte-level BPE vocabs have none)."""
    for base, data in enumerate(token_bytes):
        if data == b"\x00" and base + 256 <= len(token_bytes) and all(
                token_bytes[base + b] == bytes((b,)) for b in range(256)):
            return range(base, base + 256)
    return range(0)


def paragraphs(text: str) -> list[str]:
    """``text`` cut after each run of blank lines: the chunks concatenate back to ``text``."""
    return _PARAGRAPH.findall(text)


def warm_memo(artefact: ArtefactLike, *, corpus: str | None = None,
              max_tokens: int = DEFAULT_MAX_TOKENS) -> WarmStats:
    """Visit the ``(state, token)`` pairs of ``corpus`` so that later requests find them memoised.

    Each paragraph of ``corpus`` is tokenized with :class:`GreedyTokenizer` and pushed through its own
    :class:`~guardrail.matching.token_matcher.TokenMatcher` from the text start, asking
    :meth:`~guardrail.matching.token_matcher.TokenMatcher.releasable` after every token as the guard session does
    (which memoises the state's lookback too). A token that completes a term is handled as decoding would: the
    matcher rolls back to the term's first token and the token is skipped. Results of the artefact do not change:
    a memoised transition is the one it would compute.

    Thread-safe (the artefact's memo takes its own lock): call it from a background thread while requests run.

    Args:
        artefact: an :class:`~guardrail.matching.artefact.Artefact` or a
            :class:`~guardrail.matching.combined.CombinedArtefact` (its own memo of pairs is warmed, and through it
            its components').
        corpus: the text; ``None`` reads the bundled :data:`CORPUS_PATH`.
        max_tokens: stop after pushing this many tokens.

    Returns:
        The counts and the wall time (:class:`WarmStats`).

    Raises:
        ValueError: ``max_tokens`` is negative.
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    started = time.perf_counter()
    text = CORPUS_PATH.read_text(encoding="utf-8") if corpus is None else corpus
    tokenizer = GreedyTokenizer(artefact.vocab)
    tokens = pairs = hits = chunks = 0
    for paragraph in paragraphs(text):
        if tokens >= max_tokens:
            break
        chunks += 1
        matcher = TokenMatcher(artefact)
        for token_id in tokenizer.encode(paragraph)[:max_tokens - tokens]:
            tokens += 1
            pairs += not artefact.memoised(matcher.state, token_id)
            hit = matcher.push(token_id)
            if hit is not None:
                hits += 1
                matcher.rollback_to(hit.start_token)
                continue
            matcher.releasable()
    # Then, where a sweep can read the vocab (level ``off``), every token from the states with no match in progress
    # that the corpus reached (the text start, after a word character, after a space: most of prose's steps),
    # not only the corpus' tokens.
    filled = artefact.fill_memo(artefact.sweepable_states()) if isinstance(artefact, Artefact) else 0
    return WarmStats(tokens, pairs, hits, chunks, time.perf_counter() - started, filled)
