"""The exact bytes every token id contributes to the output text.

The matcher works on text, but the decoder sees token ids. ``TokenVocab`` is the bridge: one bytes
string per token id, such that for any text (see ``TokenVocab`` for the two documented exceptions)

    b"".join(vocab.token_bytes[i] for i in tokenizer.encode(text, add_special_tokens=False))
        == text.encode("utf-8")

Two tokenizer families are supported, told apart by the backend tokenizer's decoder (never by model
name):

* **byte-level BPE** (GPT-2, SmolLM2, Llama 3, Qwen): every byte is spelled as one printable character
  (``Ġ`` = space, ``Ċ`` = newline, ...); the table is the inverse of GPT-2's ``bytes_to_unicode``.
* **SentencePiece-style** (Gemma, Llama 2, Mistral): ``▁`` (U+2581) stands for a space and
  ``<0xNN>`` tokens carry single bytes (byte fallback), so a token may hold half a UTF-8 character.

Special and control tokens (``<bos>``, ``<|im_end|>``, ``<start_of_turn>``, ``<unusedN>``, ...) contribute
nothing: they never appear in the text and are never matched. Which ids those are is what the tokenizer's own
``decode(..., skip_special_tokens=True)`` drops: a user-defined piece that a config lists among the special
tokens but the tokenizer prints (Mistral's SentencePiece ``[REFERENCE_DOC_0]``…, ``[REF]``) is text.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

__all__ = ["TokenVocab", "TokenizerFamily", "detect_family"]

#: Format tag written into serialised vocabs; bump when the layout or the fingerprint recipe changes.
_FORMAT_VERSION = 1

#: Special tokens that end a turn or a document in common chat formats. They count as EOS in addition to
#: ``tokenizer.eos_token_id`` because chat models end an answer with them (Gemma's ``<end_of_turn>``,
#: ChatML's ``<|im_end|>``), while the tokenizer names only one EOS.
_END_MARKERS = frozenset(
    {"<eos>", "</s>", "<|endoftext|>", "<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end_of_text|>"}
)

_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SPIECE_SPACE = "\u2581"  # ▁


class TokenizerFamily(str, Enum):
    """How a tokenizer spells the bytes of its tokens."""

    BYTE_LEVEL = "byte_level"
    SENTENCEPIECE = "sentencepiece"


def _gpt2_byte_decoder() -> dict[int, int]:
    """Map each character of GPT-2's ``bytes_to_unicode`` (as a code point) back to its byte.

    Source: openai/gpt-2 ``encoder.py``: printable Latin-1 bytes stand for themselves, the other 68
    bytes are shifted to U+0100 upwards in order.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: b for b in printable}
    shift = 0
    for b in range(256):
        if b not in table:
            table[b] = 256 + shift
            shift += 1
    return {char: byte for byte, char in table.items()}


# str.translate target: each byte-map character becomes the Latin-1 character of its byte, so that
# ``token.translate(_BYTE_LEVEL_TABLE).encode("latin-1")`` yields the token's bytes in one C call.
_BYTE_LEVEL_TABLE = {char: byte for char, byte in _gpt2_byte_decoder().items()}


def _component_json(component: Any) -> Any:
    """The JSON description of a ``tokenizers`` component (decoder, normalizer, pre-tokenizer), or None.

    ``__getstate__`` serialises only that component, so this stays cheap even for a 262k vocab, unlike
    ``Tokenizer.to_str()``.
    """
    if component is None:
        return None
    return json.loads(component.__getstate__())


def _types(node: Any) -> list[dict[str, Any]]:
    """Every ``{"type": ...}`` object in a component's JSON, nested sequences flattened."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if "type" in node:
            found.append(node)
        for value in node.values():
            found.extend(_types(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_types(value))
    return found


def detect_family(tokenizer: Any) -> tuple[TokenizerFamily, bool]:
    """Tell how ``tokenizer`` spells token bytes, and whether it prepends a space to encoded text.

    Args:
        tokenizer: a transformers fast tokenizer (``tokenizer.backend_tokenizer`` is a ``tokenizers.Tokenizer``).

    Returns:
        ``(family, prefix_space)``. ``prefix_space`` is True for legacy SentencePiece set-ups with
        ``add_dummy_prefix`` (a ``Metaspace`` pre-tokenizer with ``prepend_scheme`` "first"/"always", or a
        ``Prepend("▁")`` normaliser): ``encode("Hi")`` then spells ``"▁Hi"``.

    Raises:
        ValueError: the tokenizer has no backend tokenizer, or its decoder is neither byte-level nor
            SentencePiece-style (e.g. WordPiece), naming the decoder types found.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(
            f"tokenizer {type(tokenizer).__name__} has no backend_tokenizer: only fast (tokenizers-backed) "
            "tokenizers are supported"
        )
    decoder_types = [node["type"] for node in _types(_component_json(backend.decoder))]
    pre_nodes = _types(_component_json(backend.pre_tokenizer))
    norm_nodes = _types(_component_json(backend.normalizer))

    if "ByteLevel" in decoder_types:
        return TokenizerFamily.BYTE_LEVEL, False
    if {"ByteFallback", "Metaspace"} & set(decoder_types) or any(
        node["type"] == "Replace" and _SPIECE_SPACE in json.dumps(node, ensure_ascii=False)
        for node in _types(_component_json(backend.decoder))
    ):
        prefix_space = any(
            node["type"] == "Metaspace" and node.get("prepend_scheme", "always") != "never"
            and node.get("add_prefix_space", True)
            for node in pre_nodes
        ) or any(node["type"] == "Prepend" and node.get("prepend") == _SPIECE_SPACE for node in norm_nodes)
        return TokenizerFamily.SENTENCEPIECE, prefix_space
    raise ValueError(
        f"unsupported tokenizer decoder {decoder_types or 'None'}: expected a byte-level BPE decoder "
        "(ByteLevel) or a SentencePiece-style one (Metaspace, ByteFallback or Replace('▁', ' '))"
    )


def _byte_level_bytes(token: str) -> bytes:
    try:
        return token.translate(_BYTE_LEVEL_TABLE).encode("latin-1")
    except UnicodeEncodeError:
        # Not spelled in the byte map (a literal added token): its text is what it contributes.
        return token.encode("utf-8")


def _sentencepiece_bytes(token: str) -> bytes:
    fallback = _BYTE_FALLBACK.fullmatch(token)
    if fallback is not None:
        return bytes([int(fallback.group(1), 16)])
    return token.replace(_SPIECE_SPACE, " ").encode("utf-8")


def _byte_level_table(tokens: list[str]) -> list[bytes]:
    """Bytes of byte-level BPE tokens: one translate + encode over all tokens, then slicing.

    Every byte-map character stands for exactly one byte, so token lengths in characters are the
    byte offsets; a token outside the map (rare literal added tokens) sends us to the per-token path.
    """
    try:
        blob = "".join(tokens).translate(_BYTE_LEVEL_TABLE).encode("latin-1")
    except UnicodeEncodeError:
        return [_byte_level_bytes(token) for token in tokens]
    bounds = [0, *np.cumsum([len(token) for token in tokens]).tolist()]
    return [blob[bounds[i]:bounds[i + 1]] for i in range(len(tokens))]


def _sentencepiece_table(tokens: list[str]) -> list[bytes]:
    """Bytes of SentencePiece-style tokens: ``▁`` -> space over all tokens at once, ``<0xNN>`` -> byte NN."""
    # Join with a separator no token contains, so that one replace + encode + split does the work.
    plain = "".join(tokens)
    separator = next((c for c in ("\x00", "\x01", "\uffff", "\U0010ffff") if c not in plain), None)
    if separator is None:
        table = [_sentencepiece_bytes(token) for token in tokens]
    else:
        joined = separator.join(tokens).replace(_SPIECE_SPACE, " ")
        table = joined.encode("utf-8").split(separator.encode("utf-8"))
    for i, token in enumerate(tokens):
        if len(token) == 6 and token.startswith("<0x"):
            table[i] = _sentencepiece_bytes(token)
    return table


def _table_digest(token_bytes: tuple[bytes, ...], special_ids: frozenset[int], prefix_space: bool) -> str:
    """sha256 hex over the vocab size, the bytes table (offsets + blob), the special ids and the prefix flag."""
    blob, offsets = _pack(token_bytes)
    digest = hashlib.sha256()
    digest.update(f"guardrail-vocab-v{_FORMAT_VERSION}:{len(token_bytes)}:{int(prefix_space)}:".encode())
    digest.update(offsets.astype("<i8").tobytes())
    digest.update(blob.tobytes())
    digest.update(np.array(sorted(special_ids), dtype="<i8").tobytes())
    return digest.hexdigest()


def _pack(token_bytes: tuple[bytes, ...]) -> tuple[np.ndarray, np.ndarray]:
    """One uint8 blob of all tokens and int64 offsets of shape ``(n + 1,)``: token i is ``blob[o[i]:o[i+1]]``."""
    offsets = np.zeros(len(token_bytes) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in token_bytes], out=offsets[1:])
    return np.frombuffer(b"".join(token_bytes), dtype=np.uint8), offsets


@dataclass(frozen=True)
class TokenVocab:
    """Bytes contributed by each token id, plus the ids that contribute none.

    Attributes:
        token_bytes: index = token id (``len == len(tokenizer)``); ``b""`` for special/control tokens
            and ids the tokenizer leaves undefined. A token may hold part of a UTF-8 character
            (byte-level BPE, ``<0xNN>`` byte fallback).
        special_ids: ids that contribute no text and must never be matched (special, control, unused).
        eos_ids: ids that end generation: ``tokenizer.eos_token_id`` plus the special end-of-turn/-text
            markers present (``<end_of_turn>``, ``<|im_end|>``, ``<|endoftext|>``, ...) and any ids passed
            to ``from_tokenizer``.
        fingerprint: sha256 hex of the vocab size, the bytes table, the special ids and ``prefix_space``;
            two tokenizers with the same fingerprint produce the same text for the same ids.
        prefix_space: True when the tokenizer prepends a space to encoded text (legacy SentencePiece
            ``add_dummy_prefix``): the property then reads ``joined == b" " + text.encode()`` for non-empty
            text, and a decoder should drop one leading space of a completion's first token. Gemma 3,
            SmolLM2, Llama 3 and Qwen do not; Llama 2 and Mistral v0.1 do.

    The round-trip property holds for any text except where the tokenizer itself cannot spell it:
    (1) the literal string of a special token (it encodes to that token, which contributes nothing);
    (2) for SentencePiece-style tokenizers, a literal ``▁`` (U+2581), which they cannot tell from a
    space; (3) bytes for which a byte-level vocab has no single-byte token: BPE drops them (SmolLM2
    lacks 0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xF1, 0xF2 and the bytes never valid in UTF-8, so
    U+40000..U+BFFFF lose their lead byte). The model cannot emit such text either, so none of these
    weakens the guarantee.
    """

    token_bytes: tuple[bytes, ...]
    special_ids: frozenset[int]
    eos_ids: frozenset[int]
    fingerprint: str
    prefix_space: bool = False

    def __post_init__(self) -> None:
        size = len(self.token_bytes)
        bad = [i for i in (*self.special_ids, *self.eos_ids) if not 0 <= i < size]
        if bad:
            raise ValueError(f"special_ids/eos_ids hold ids outside the vocab of {size}: {sorted(bad)[:10]}")

    def __len__(self) -> int:
        return len(self.token_bytes)

    def __repr__(self) -> str:  # the default repr would print 262k bytes strings
        return (
            f"TokenVocab(size={len(self)}, special={len(self.special_ids)}, eos={sorted(self.eos_ids)}, "
            f"prefix_space={self.prefix_space}, fingerprint={self.fingerprint[:16]}…)"
        )

    @classmethod
    def build(
        cls,
        token_bytes: Iterable[bytes],
        special_ids: Iterable[int],
        eos_ids: Iterable[int] = (),
        prefix_space: bool = False,
    ) -> TokenVocab:
        """A vocab from its parts, computing the fingerprint. ``special_ids`` must map to ``b""``.

        Raises:
            ValueError: a special id carries bytes, or an id lies outside the table.
        """
        table = tuple(token_bytes)
        specials = frozenset(int(i) for i in special_ids)
        for i in specials:
            if 0 <= i < len(table) and table[i]:
                raise ValueError(f"special_ids: token {i} carries bytes {table[i]!r}; special tokens contribute none")
        return cls(table, specials, frozenset(int(i) for i in eos_ids), _table_digest(table, specials, prefix_space),
                   prefix_space)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, eos_ids: Iterable[int] = ()) -> TokenVocab:
        """Build the table for a transformers fast tokenizer (vectorised: ~0.5 s for 262k tokens on one core).

        Args:
            tokenizer: a ``PreTrainedTokenizerBase`` with a ``tokenizers`` backend.
            eos_ids: extra ids that end generation (e.g. ``model.generation_config.eos_token_id``).

        Raises:
            ValueError: unsupported tokenizer family (see ``detect_family``).
        """
        family, prefix_space = detect_family(tokenizer)
        size = len(tokenizer)
        # The backend's id_to_token directly: transformers' convert_ids_to_tokens costs ~5x more per id.
        id_to_token = tokenizer.backend_tokenizer.id_to_token
        raw = [id_to_token(i) for i in range(size)]
        added = tokenizer.added_tokens_decoder  # {id: AddedToken}

        # What the tokenizer itself prints for an id decides (decode(skip_special_tokens=True), as a client's
        # detokenizer does): control tokens print nothing, while a user-defined piece that the config lists
        # among the special tokens (Mistral's SentencePiece [REFERENCE_DOC_0..19], [REF]) prints as text.
        candidates = {i for i in tokenizer.all_special_ids if i is not None and 0 <= i < size}
        candidates |= {i for i, tok in added.items() if tok.special and 0 <= i < size}
        decode = tokenizer.backend_tokenizer.decode
        special = {i for i in candidates if not decode([i], skip_special_tokens=True)}
        special |= {i for i, tok in enumerate(raw) if tok is None}  # holes in the id space
        # Added tokens are spelled below from their content; blank them here so that a literal added
        # token outside the byte map cannot knock the byte-level table off its one-pass path.
        tokens = ["" if tok is None or i in added else tok for i, tok in enumerate(raw)]

        if family is TokenizerFamily.BYTE_LEVEL:
            table = _byte_level_table(tokens)
        else:
            table = _sentencepiece_table(tokens)
        for i, tok in added.items():
            if i in special or not 0 <= i < size:
                continue
            # Added tokens are cut from the raw text before the model's byte map applies; only
            # "normalized" ones are matched against normalised text (where " " is already "▁").
            if family is TokenizerFamily.SENTENCEPIECE and tok.normalized:
                table[i] = _sentencepiece_bytes(tok.content)
            else:
                table[i] = tok.content.encode("utf-8")
        for i in special:
            table[i] = b""

        ends = {int(i) for i in eos_ids}
        if tokenizer.eos_token_id is not None:
            ends.add(int(tokenizer.eos_token_id))
        ends |= {i for i in special if raw[i] in _END_MARKERS}
        return cls.build(table, special, ends, prefix_space)

    # -- serialisation: flat arrays, never pickle (artefacts travel through a shared Redis) ------------

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Flat numpy arrays: ``blob`` uint8 (total bytes,), ``offsets`` int64 (n + 1,), ``special_ids`` and
        ``eos_ids`` int64 (sorted), ``meta`` a 0-d unicode array holding a JSON header."""
        blob, offsets = _pack(self.token_bytes)
        meta = {"format": _FORMAT_VERSION, "fingerprint": self.fingerprint, "prefix_space": self.prefix_space}
        return {
            "blob": blob,
            "offsets": offsets,
            "special_ids": np.array(sorted(self.special_ids), dtype=np.int64),
            "eos_ids": np.array(sorted(self.eos_ids), dtype=np.int64),
            "meta": np.array(json.dumps(meta)),
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> TokenVocab:
        """Inverse of ``to_arrays``; recomputes the fingerprint and checks it against the stored one.

        Raises:
            ValueError: missing array, unknown format version, inconsistent offsets, or fingerprint
                mismatch (corrupt or tampered data), naming the problem.
        """
        missing = {"blob", "offsets", "special_ids", "eos_ids", "meta"} - set(arrays)
        if missing:
            raise ValueError(f"TokenVocab arrays: missing {sorted(missing)}")
        meta = json.loads(str(arrays["meta"]))
        if meta.get("format") != _FORMAT_VERSION:
            raise ValueError(f"TokenVocab arrays: format {meta.get('format')!r}, expected {_FORMAT_VERSION}")
        blob = np.asarray(arrays["blob"], dtype=np.uint8).tobytes()
        offsets = np.asarray(arrays["offsets"], dtype=np.int64)
        if offsets.ndim != 1 or offsets[0] != 0 or offsets[-1] != len(blob) or np.any(np.diff(offsets) < 0):
            raise ValueError("TokenVocab arrays: offsets do not partition the blob")
        bounds = offsets.tolist()
        table = tuple(blob[bounds[i]:bounds[i + 1]] for i in range(len(bounds) - 1))
        vocab = cls.build(table, arrays["special_ids"].tolist(), arrays["eos_ids"].tolist(),
                          bool(meta["prefix_space"]))
        if vocab.fingerprint != meta["fingerprint"]:
            raise ValueError(
                f"TokenVocab arrays: fingerprint mismatch (stored {meta['fingerprint'][:16]}…, "
                f"computed {vocab.fingerprint[:16]}…)"
            )
        return vocab

    def to_bytes(self) -> bytes:
        """``to_arrays`` as one ``.npz`` blob (numpy's zip of ``.npy`` files; no object arrays)."""
        buffer = io.BytesIO()
        # numpy's stub types ``**kwds`` so that a str-keyed dict could also fill ``allow_pickle: bool``.
        np.savez(buffer, **self.to_arrays())  # type: ignore[arg-type]
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> TokenVocab:
        """Inverse of ``to_bytes``. Loads with ``allow_pickle=False``: untrusted input cannot run code.

        Raises:
            ValueError: not an npz of the expected arrays, or a check in ``from_arrays`` fails.
        """
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as npz:
                arrays = {name: npz[name] for name in npz.files}
        except (OSError, ValueError, EOFError) as exc:
            raise ValueError(f"TokenVocab bytes: not a readable npz archive ({exc})") from exc
        return cls.from_arrays(arrays)
