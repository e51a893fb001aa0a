"""The JSON grammar of a request as a token mask that follows the guard session (docs/structured-output.md).

Engine: llguidance (``LLMatcher``: Earley parser over the tokenizer's token trie, lazy masks, ``rollback(n)``),
chosen over xgrammar by bench/grammar.py (docs/benchmarks.md, "Grammar engines").

One :class:`GrammarState` per request. The decode step masks, in this order (the transformers engine,
:meth:`guardrail.engines.transformers.decoder.Generation._scores`): the guard's always-banned ids and the
bans of the position, then the grammar after the kept tokens — checked on the pick first
(:meth:`GrammarState.pick`: the forced token where the grammar forces one, else the pick over the unmasked scores
if the grammar takes it, else :meth:`GrammarState.mask` and pick again), or masked first
(:meth:`GrammarState.apply`) where a truncating warper (top-k, top-p, min-p) follows. The
grammar state is not driven by the engine's verdict handlers but *synchronised* to the session's kept
tokens before each mask (:meth:`GrammarState.sync`): when the guard rolls back ``k`` tokens the matcher
rolls back ``k`` tokens, whatever caused it (a hit, an end-of-text word, a stop-string probe), and a
re-pick at the same position reuses the mask (cached per grammar state).

Dead end: when the grammar allows only tokens the guard bans (a schema ``enum`` or ``pattern`` whose every
way on begins a banned term), every score is ``-inf`` and the engine's usual path applies: the picker finds
no candidate and the session finishes with ``content_filter``, cut before the term. The guard never lets a
schema force a banned term out.

End of text: the request's end ids (EOS, ``stop_token_ids``) are allowed exactly where the grammar accepts
(the JSON value is complete), whatever llguidance's own EOS is.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from guardrail.grammar.format import FIELD, JSON_LAYOUT, StructuredOutput
from guardrail.matching.vocab import TokenVocab
from guardrail.sized_cache import SizedLRU

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

#: How the JSON is laid out (:data:`guardrail.grammar.format.JSON_LAYOUT`), as llguidance's compile options.
JSON_OPTIONS: JsonCompileOptions = {"whitespace_flexible": JSON_LAYOUT["whitespace_flexible"],
                                    "item_separator": JSON_LAYOUT["item_separator"],
                                    "key_separator": JSON_LAYOUT["key_separator"]}

_UNKNOWN = -1  # GrammarState._forced before it is computed for the current state

#: Token texts :meth:`GrammarState.closing_path` prefers, best first, by where it stands. Inside a string only a
#: quote ends anything (brackets there are characters of the string): a quote and what it may close with it.
#: Elsewhere a quote would open a string: the brackets that close (several at once first), then a comma (a number
#: ends there when an object still needs keys: the grammar forces them next), then the smallest values.
_CLOSER_CHARS = frozenset('"}]')
_SEPARATORS = (", ", ",")
_SMALLEST_VALUES = ('""', "0", "[]", "{}", "null", "false", "true", '"', "[", "{", "-", "1")

_CLOSERS: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # vocab fingerprint -> (in a string, elsewhere)


def closing_tokens(vocab: TokenVocab) -> tuple[np.ndarray, np.ndarray]:
    """``(int64 (n,), int64 (m,))``: the ids :meth:`GrammarState.closing_path` prefers, best first, inside a JSON
    string (tokens of closers beginning with a quote, more closers first) and elsewhere (tokens of brackets, more
    first, then a comma, then the smallest values, :data:`_SMALLEST_VALUES` in that order). Built once per vocab
    and process (a pass over its bytes table, ~50 ms for 262,144 ids)."""
    found = _CLOSERS.get(vocab.fingerprint)
    if found is not None:
        return found
    quoted: list[tuple[int, int]] = []
    brackets: list[tuple[int, int]] = []
    values: dict[str, int] = {}
    for token_id, raw in enumerate(vocab.token_bytes):
        if not raw or token_id in vocab.special_ids:
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if text in (*_SMALLEST_VALUES, *_SEPARATORS) and text not in values:
            values[text] = token_id
        if set(text) <= _CLOSER_CHARS:
            if text.startswith('"') and '"' not in text[1:]:
                quoted.append((-len(text), token_id))
            elif '"' not in text:
                brackets.append((-len(text), token_id))
    in_string = [token_id for _, token_id in sorted(quoted)]
    elsewhere = [token_id for _, token_id in sorted(brackets)]
    elsewhere += [values[t] for t in (*_SEPARATORS, *_SMALLEST_VALUES) if t in values]
    found = _CLOSERS[vocab.fingerprint] = (np.array(in_string, dtype=np.int64), np.array(elsewhere, dtype=np.int64))
    return found


def in_json_string(text: bytes) -> bool:
    """Whether ``text`` ends inside a JSON string: an odd number of quotes not escaped by a backslash (the markup
    around a tool call holds none; prose before it may, where the grammar is free and nothing needs closing)."""
    return string_state(text)[0]


def string_state(text: bytes, state: tuple[bool, bool] = (False, False)) -> tuple[bool, bool]:
    """``(inside, escaped)`` after reading ``text`` from ``state``: inside a JSON string, and after a backslash
    there (so a path can be read token by token: :meth:`GrammarState.closing_path`)."""
    inside, escaped = state
    for byte in text:
        if escaped:
            escaped = False
        elif byte == 0x5C and inside:  # a backslash escapes the next character inside a string
            escaped = True
        elif byte == 0x22:
            inside = not inside
    return inside, escaped


_TOKENIZERS: dict[str, Any] = {}  # vocab fingerprint -> llguidance.LLTokenizer
#: Bytes of validated grammars kept (``GUARDRAIL_GRAMMAR_CACHE_BYTES`` in the service): a grammar embeds its
#: schema, so 256 of a schema padded to 4 MB would be 1 GB; weighed by the key's and the grammar's text.
GRAMMAR_CACHE_BYTES = 64 * 1024 * 1024


def _grammar_bytes(entry: tuple[str, str]) -> int:
    schema, grammar = entry
    return len(schema.encode()) + len(grammar.encode()) + 256


# (vocab fingerprint, schema text) -> (schema text, validated grammar)
GRAMMARS: SizedLRU[tuple[str, str], tuple[str, str]] = SizedLRU(GRAMMAR_CACHE_BYTES, _grammar_bytes)
_LOCK = threading.Lock()


def grammar_tokenizer(tokenizer: Any, vocab: TokenVocab) -> Any:
    """llguidance's view of ``tokenizer`` (its token trie), built once per vocab and process: 1.7 s for
    SmolLM2's 49,152 ids, 33 s for Gemma 3's 262,144 on the loaded 2-core machine (bench/grammar.py,
    ``tokenizer_s``, docs/benchmarks.md); requests wait for it on their worker thread, not the event loop.

    Args:
        tokenizer: a fast Hugging Face tokenizer (``PreTrainedTokenizerFast`` or transformers 5's
            ``TokenizersBackend``).
        vocab: its bytes table (the cache key).

    Raises:
        ValueError: ``response_format: ...`` when the tokenizer is not a fast one.
    """
    found = _TOKENIZERS.get(vocab.fingerprint)
    if found is not None:
        return found
    import llguidance.hf

    with _LOCK:
        found = _TOKENIZERS.get(vocab.fingerprint)
        if found is None:
            try:
                found = llguidance.hf.from_tokenizer(tokenizer)
            except ValueError as exc:
                raise ValueError(f"{FIELD}: not available with this tokenizer ({exc})") from None
            _TOKENIZERS[vocab.fingerprint] = found
    return found


def compile_grammar(spec: StructuredOutput, lltokenizer: Any, fingerprint: str) -> str:
    """The llguidance grammar of ``spec`` (a JSON schema laid out by :data:`JSON_OPTIONS`, or a Lark grammar),
    validated against the tokenizer; cached per (vocab, schema or grammar text).

    Raises:
        ValueError: ``response_format: invalid JSON schema: ...`` (``invalid grammar`` for Lark) with
            llguidance's message (an unknown ``type``, a dangling ``$ref``, an unsupported keyword, a bad
            ``pattern`` ...).
    """
    from llguidance import LLMatcher

    key = (fingerprint, spec.schema)
    found = GRAMMARS.get(key)
    if found is not None:
        return found[1]
    what = "grammar" if spec.kind == "lark" else "JSON schema"
    try:
        if spec.kind == "lark":
            grammar = LLMatcher.grammar_from_lark(spec.schema)
        else:
            grammar = LLMatcher.grammar_from_json_schema(spec.schema, defaults=JSON_OPTIONS)
        is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar, lltokenizer)
    except Exception as exc:  # noqa: BLE001 - whatever the client's schema makes the compiler raise is a 400
        raise ValueError(f"{FIELD}: invalid {what}: {exc}") from None
    if is_error:
        raise ValueError(f"{FIELD}: invalid {what}: {messages[0] if messages else 'rejected by llguidance'}")
    GRAMMARS.put(key, (spec.schema, grammar))  # least recently used out beyond GRAMMAR_CACHE_BYTES
    return grammar


def resize_grammar_cache(max_bytes: int) -> None:
    """Bound the grammar cache by ``max_bytes`` from now on (what it holds is dropped).

    Raises:
        ValueError: ``max_bytes`` < 1.
    """
    global GRAMMARS
    GRAMMARS = SizedLRU(max_bytes, _grammar_bytes)


def _byte_penalties() -> np.ndarray:
    """``float32 (256, 8)``: row ``b`` holds, per bit ``k`` of byte ``b`` (little-endian), 0 where the bit is set
    (allowed) and ``-inf`` where not: a bitmask's bytes looked up in it are the additive mask of their ids."""
    bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(bool)
    return np.where(bits, np.float32(0), np.float32(-np.inf)).astype(np.float32)


_BYTE_PENALTIES = _byte_penalties()


def unpack_bitmask(words: np.ndarray, width: int) -> np.ndarray:
    """A token bitmask (``int32 (ceil(n / 32),)``, bit ``i % 32`` of word ``i // 32`` set when id ``i`` is
    allowed: llguidance's and xgrammar's layout) as ``bool (width,)``; ids past the mask are ``False``."""
    bits = np.unpackbits(words.view(np.uint8), bitorder="little").view(np.bool_)
    if len(bits) >= width:
        return bits[:width]
    return np.concatenate([bits, np.zeros(width - len(bits), dtype=np.bool_)])


class GrammarState:
    """One request's grammar matcher, kept in step with the guard session's kept tokens.

    Args:
        spec: the request's structured output.
        tokenizer: the served fast tokenizer; ``vocab`` its bytes table.
        end_ids: ids that end the request's text (the session's ``eos_ids``): allowed where the grammar
            accepts, masked elsewhere.
        num_logits: width of the engine's logits rows.

    Raises:
        ValueError: ``response_format: ...``: the schema does not compile (see :func:`compile_grammar`).
    """

    def __init__(self, spec: StructuredOutput, tokenizer: Any, vocab: TokenVocab, end_ids: Iterable[int],
                 num_logits: int):
        from llguidance import LLMatcher

        lltokenizer = grammar_tokenizer(tokenizer, vocab)
        grammar = compile_grammar(spec, lltokenizer, vocab.fingerprint)
        self.spec = spec
        self.matcher = LLMatcher(lltokenizer, grammar)
        # llguidance's mask is the single fast-forward token wherever bytes are forced, unless the grammar turns
        # forcing off (``%llguidance {"no_forcing": true}``): then :meth:`forced` is never trusted (conservative:
        # the words anywhere in the grammar's text are enough).
        self._forcing = "no_forcing" not in grammar
        self._vocab_size = int(lltokenizer.vocab_size)
        if self.matcher.is_error():
            raise ValueError(f"{FIELD}: invalid JSON schema: {self.matcher.get_error()}")
        self.num_logits = num_logits
        self._bitmask = np.zeros((lltokenizer.vocab_size + 31) // 32, dtype=np.int32)
        # llguidance allows its own EOS where the grammar accepts; the request's end ids decide instead.
        own_eos = {int(t) for t in lltokenizer.eos_tokens} | {int(lltokenizer.eos_token)}
        self._end_ids = np.array(sorted(t for t in end_ids if 0 <= t < num_logits), dtype=np.int64)
        self._other_eos = np.array(sorted(t for t in own_eos - set(self._end_ids.tolist()) if 0 <= t < num_logits),
                                   dtype=np.int64)
        self._end_set = frozenset(self._end_ids.tolist())
        self._other_eos_set = frozenset(self._other_eos.tolist())
        self._tokens: list[int] = []  # what the matcher consumed
        # Per state (reset by _stale): the bitmask is computed; the forced token (_UNKNOWN, None or an id); whether
        # bytes are forced (llguidance's ``compute_ff_bytes``, None until asked).
        self._mask_ready = False
        self._forced: int | None = _UNKNOWN
        self._ff_bytes: bool | None = None
        #: How :meth:`pick` decided, counted over the request: ``forced``, ``accepted`` (the pick over the
        #: unmasked scores), ``refused`` (masked and picked again).
        self.picks = {"forced": 0, "accepted": 0, "refused": 0}
        self._forbidden: torch.Tensor | None = None  # ``bool (1, num_logits)`` of the current state, cached
        # The additive mask of the current state (0 allowed, -inf forbidden), rebuilt in place per state: adding
        # it costs a quarter of a boolean masked_fill_ on SmolLM2's row (bench/grammar.py, ``tool_calls``).
        self._bytes = np.empty((self._bitmask.nbytes, 8), dtype=np.float32)
        # The lookup's output is the mask itself when it covers the row (the usual case), else copied into one.
        self._penalty = (self._bytes.reshape(-1)[:num_logits] if self._bytes.size >= num_logits
                         else np.full(num_logits, -np.inf, dtype=np.float32))
        self._penalty_row = torch.from_numpy(self._penalty).unsqueeze(0)
        self._penalty_ready = False
        self._closers = closing_tokens(vocab)
        self._token_bytes = vocab.token_bytes
        #: Tokens :meth:`close_within` took instead of the picker's choice, over the request.
        self.closed = 0

    @property
    def consumed(self) -> tuple[int, ...]:
        """The token ids the matcher is past."""
        return tuple(self._tokens)

    @property
    def accepting(self) -> bool:
        """Whether the JSON value is complete here (the text may end)."""
        return bool(self.matcher.is_accepting())

    def sync(self, token_ids: Sequence[int]) -> None:
        """Put the matcher after ``token_ids`` (the session's kept tokens): roll back past the first token that
        differs from what it consumed, then consume the rest.

        Raises:
            RuntimeError: the grammar refuses a kept token (the engine kept a token outside the mask: a bug),
                or llguidance cannot roll back that far.
        """
        done = self._tokens
        n = len(done)
        common = n if n <= len(token_ids) and list(token_ids[:n]) == done else _common_prefix(done, token_ids)
        if common < n:
            if not self.matcher.rollback(n - common):
                raise RuntimeError(f"the grammar could not roll back {n - common} tokens: "
                                   f"{self.matcher.get_error()}")
            del done[common:]
            self._stale()
        for token in token_ids[common:]:
            if not self.matcher.consume_token(int(token)):
                raise RuntimeError(f"the grammar refused kept token {int(token)}: {self.matcher.get_error()}")
            done.append(int(token))
            self._stale()

    def _stale(self) -> None:
        self._forbidden = None
        self._penalty_ready = False
        self._mask_ready = False
        self._forced = _UNKNOWN
        self._ff_bytes = None

    def _compute_mask(self) -> None:
        if self._mask_ready:
            return
        self.matcher.unsafe_compute_mask_ptr(self._bitmask.ctypes.data, self._bitmask.nbytes)
        if self.matcher.is_error():
            raise RuntimeError(f"the grammar failed: {self.matcher.get_error()}")
        self._mask_ready = True

    def _bytes_forced(self) -> bool:
        if self._ff_bytes is None:
            self._ff_bytes = bool(self.matcher.compute_ff_bytes())
        return self._ff_bytes

    def forced(self) -> int | None:
        """The one token the grammar allows next in the current state, where it forces one, else ``None``.

        Where every way on begins with the same bytes (a key, the rest of a tool's name, ``", "``), llguidance's
        mask is the single first token of their canonical tokenization (its fast-forward tokens,
        ``compute_ff_tokens``; about 17 us on SmolLM2 for a tool call's forced run of ~50 bytes, the mask then
        adds 2 us and the row 35). ``None`` where nothing is forced, where llguidance forces bytes but no whole
        token (the mask then holds the tokens that begin with those bytes), where the grammar turns forcing off,
        and where the forced token is an end id (the end ids follow :attr:`accepting`, which is false here).
        Cached until the state changes.
        """
        if self._forced == _UNKNOWN:
            token = None
            if self._forcing and self._bytes_forced():
                ff = self.matcher.compute_ff_tokens()
                first = int(ff[0]) if ff else -1
                if 0 <= first < self.num_logits and first not in self._end_set and first not in self._other_eos_set:
                    token = first
            self._forced = token
        return self._forced

    def allows(self, token: int) -> bool:
        """Whether the grammar allows ``token`` next in the current state: exactly ``not forbidden()[0, token]``,
        mostly without computing the mask.

        Where nothing is forced, llguidance's mask is every token its parser takes (``compute_bias`` with an empty
        prefix), so one ``validate_tokens`` answers (about 2 us; tested against the mask on every id,
        tests/grammar/test_grammar.py); where a token is forced, the answer is whether ``token`` is it
        (:meth:`forced`); where bytes are forced but no whole token, the mask is computed (no row is built).
        """
        token = int(token)
        if token in self._end_set:
            return self.accepting
        if token in self._other_eos_set or not 0 <= token < min(self._vocab_size, self.num_logits):
            return False  # validate_tokens would stop the matcher on an id past its vocab
        if not self._mask_ready:
            forced = self.forced()
            if forced is not None:
                return token == forced
            if not self._bytes_forced():
                return self.matcher.validate_tokens([token]) == 1
            self._compute_mask()
        return bool((int(self._bitmask[token >> 5]) >> (token & 31)) & 1)

    def forbidden(self) -> torch.Tensor:
        """``bool (1, num_logits)``: ``True`` where the grammar forbids the next token in the current state
        (the end ids follow :attr:`accepting`). Cached until the state changes."""
        if self._forbidden is None:
            self._compute_mask()
            allowed = unpack_bitmask(self._bitmask, self.num_logits).copy()
            allowed[self._other_eos] = False
            allowed[self._end_ids] = self.accepting
            self._forbidden = torch.from_numpy(~allowed).unsqueeze(0)
        return self._forbidden

    def penalty(self) -> torch.Tensor:
        """``float32 (1, num_logits)``: 0 where the grammar allows the next token in the current state, ``-inf``
        where it forbids it (:meth:`forbidden` as an additive mask). Rebuilt in place when the state changes: a
        view to use before the next :meth:`sync`."""
        if not self._penalty_ready:
            self._compute_mask()
            np.take(_BYTE_PENALTIES, self._bitmask.view(np.uint8), axis=0, out=self._bytes)
            if self._penalty.base is not self._bytes:  # ids past the bitmask stay -inf
                self._penalty[:self._bytes.size] = self._bytes.reshape(-1)
            self._penalty[self._other_eos] = -np.inf
            self._penalty[self._end_ids] = 0.0 if self.accepting else -np.inf
            self._penalty_ready = True
        return self._penalty_row

    def apply(self, scores: torch.Tensor, token_ids: Sequence[int]) -> torch.Tensor:
        """Mask ``scores`` (``(1, num_logits)`` float) in place to ``-inf`` where the grammar forbids the next
        token after ``token_ids`` (the session's kept tokens): adds :meth:`penalty`; returns ``scores``.

        Raises:
            RuntimeError: as :meth:`sync`.
        """
        self.sync(token_ids)
        return self.mask(scores)

    def mask(self, scores: torch.Tensor) -> torch.Tensor:
        """Mask ``scores`` (``(1, num_logits)`` float) in place to ``-inf`` where the grammar forbids the next
        token in the current state (adds :meth:`penalty`); returns ``scores``."""
        penalty = self.penalty()
        return scores.add_(penalty if scores.dtype == penalty.dtype else penalty.to(scores.dtype))

    def closing_path(self, limit: int) -> list[int] | None:
        """A short way from the current state to a complete value: at most ``limit`` token ids, ``[]`` where the
        value is complete already, ``None`` where none was found within ``limit``.

        Greedy, on a copy of the matcher: the forced token where the grammar forces one, else the first of
        :func:`closing_tokens` the grammar allows (inside a string, :func:`in_json_string`, a quote; elsewhere
        the brackets that close, else the smallest value), else the lowest allowed id. Not always the shortest
        (a schema can make a short value long to reach). About 25 us per token of the path (a mask each).
        """
        matcher = self.matcher.deep_copy()
        bitmask = np.zeros_like(self._bitmask)
        path: list[int] = []
        token_bytes = self._token_bytes
        # Read once, then token by token along the path (not the whole text again at each step of the path).
        state = string_state(b"".join(token_bytes[t] for t in self._tokens if 0 <= t < len(token_bytes)))
        while not matcher.is_accepting():
            if len(path) >= limit or matcher.is_stopped() or matcher.is_error():
                return None
            ff = matcher.compute_ff_tokens() if self._forcing else []
            if ff:
                token = int(ff[0])
            else:
                matcher.unsafe_compute_mask_ptr(bitmask.ctypes.data, bitmask.nbytes)
                closers = self._closers[0] if state[0] else self._closers[1]
                hits = np.flatnonzero((bitmask[closers >> 5] >> (closers & 31)) & 1)
                if len(hits):
                    token = int(closers[hits[0]])
                else:
                    ids = np.flatnonzero(unpack_bitmask(bitmask, self._vocab_size))
                    ids = ids[~np.isin(ids, self._other_eos) & ~np.isin(ids, self._end_ids)]
                    if not len(ids):
                        return None
                    token = int(ids[0])
            if not matcher.consume_token(token):
                return None
            path.append(token)
            if token < len(token_bytes):
                state = string_state(token_bytes[token], state)
        return path

    def close_within(self, scores: torch.Tensor, token_ids: Sequence[int], room: int) -> int | None:
        """The next token when the value must be closed to fit the ``room`` tokens left (this one included):
        the first of :meth:`closing_path` (or an end id where the value is complete) when that path and the end
        id after it take all the room or more; ``None`` where there is room to spare, no path was found, or the
        guard bans the path's token (``scores`` ``-inf`` there: the guard comes first). The caller picks as
        usual on ``None``.

        So a structured answer cut by ``max_tokens`` still parses: its last string is cut short instead of the
        JSON (docs/structured-output.md, "Closing at max_tokens").
        """
        self.sync(token_ids)
        if self.accepting:
            token = int(self._end_ids[0]) if room <= 1 and len(self._end_ids) else None
        else:
            # Looked for at every position near the end: one token can lengthen the path by many (an optional
            # key whose value is an object of required keys), so no bound says when to look again.
            path = self.closing_path(room)
            token = path[0] if path and len(path) + 1 >= room else None
        if token is None or not float(scores[0, token]) > -math.inf:
            return None
        self.closed += 1
        return token

    def pick(self, scores: torch.Tensor, token_ids: Sequence[int],
             pick: Callable[[torch.Tensor], int | None]) -> int | None:
        """The next token after ``token_ids`` (the session's kept tokens) as ``pick`` would choose it from
        ``scores`` masked by the grammar, masking only when the grammar refuses ``pick``'s choice unmasked.

        - Where the grammar forces a token (:meth:`forced`), the masked row holds that one score: the answer
          is that token if its score is above ``-inf`` (NaN counts as ``-inf``), else ``None``; nothing is
          picked.
        - Else ``pick(scores)``; if the grammar allows it (:meth:`allows`) it is the answer; if not, ``scores``
          is masked in place (:meth:`mask`) and picked again.

        This equals ``pick`` on the masked scores when ``pick`` is the argmax (the unmasked argmax, the lowest
        id among the highest scores, is allowed: then it is also the masked argmax) or a draw from
        ``softmax(scores)``: with ``p`` the unmasked distribution and ``A`` the allowed set, a token ``x`` of
        ``A`` comes out with probability ``p(x) + (1 - p(A)) p(x) / p(A) = p(x) / p(A)``, its masked
        probability (docs/structured-output.md, "Checking the pick first"). It does not hold when ``scores``
        went through a warper that keeps a set of candidates by rank or mass (top-k, top-p, min-p): unmasked,
        forbidden tokens take places in that set. Warpers that act on each score alone (temperature, the
        watermark's green-list bias) commute with the mask. A seeded draw uses the generator differently
        from mask-first (none at a forced token, two at a refusal): the same distribution, other draws.

        Args:
            scores: ``(1, num_logits)`` float, the final scores of the position (masked in place on a refusal).
            token_ids: the session's kept tokens.
            pick: the picker (:meth:`guardrail.engines.transformers.sampling.TokenPicker.pick`): a token id, or
                ``None`` when every score is ``-inf``.

        Returns:
            The token id, or ``None`` when the grammar and the scores leave no candidate.

        Raises:
            RuntimeError: as :meth:`sync`, or the grammar failed computing its mask.
        """
        self.sync(token_ids)
        forced = self.forced()
        if forced is not None:
            self.picks["forced"] += 1
            return forced if float(scores[0, forced]) > -math.inf else None
        token = pick(scores)
        if token is None or self.allows(token):
            self.picks["accepted"] += 1
            return token
        self.picks["refused"] += 1
        return pick(self.mask(scores))


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
