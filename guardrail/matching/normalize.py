"""Text normalisation shared by every matcher (the text matcher, the compiler, the verifier in tests).

The matching contract (docs/matching.md) is defined on normalised text. Normalisation is applied **per
character** so that the decoder can run it incrementally on a token stream:

1. ``NFKC`` of the character (Unicode TR #15), so full-width, ligature and compatibility forms fold
   to their plain letters (``ｆｕｃｋ`` → ``fuck``, ``ﬁ`` → ``fi``);
2. ``str.casefold`` unless the term is case-sensitive (Unicode default case folding, §3.13);
3. default-ignorable code points (Unicode's Default_Ignorable_Code_Point: zero-width characters, the soft
   hyphen, variation selectors, tag characters, U+034F, U+3164…) and NUL are dropped (they are invisible in
   rendered text and are a classic way to split a word), and so are the Arabic and Hebrew vowel marks
   (harakat, points, cantillation: words are written with or without them, and a reader reads ``سَكس`` as
   ``سكس``);
4. every run of whitespace (space, tab, newline, NBSP, ideographic space, …) becomes one space.

Combining sequences are composed only where a stream can afford to wait for the next character: a
halfwidth katakana that takes a halfwidth voiced mark (``ﾊ`` + ``ﾟ`` → ``パ``) is held until the next
character (:func:`compose_held`, used by the text matcher and by the token automaton's incremental
decoder). Elsewhere ``e`` + U+0301 stays two characters (per-character folding is what keeps streaming
exact and hold-back short): the obfuscation levels read such a mark after a letter through
(docs/matching.md).
"""

from __future__ import annotations

import functools
import unicodedata
from functools import lru_cache

#: Characters removed before matching besides the default-ignorable ones (:func:`_ignorable`): NUL, and U+180E
#: (Mongolian vowel separator, default-ignorable before Unicode 6.3 and still rendered as nothing).
ZERO_WIDTH = frozenset("\x00\u00ad\u180e\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff")


@functools.cache
def _ignorable() -> frozenset[str]:
    """Every Default_Ignorable_Code_Point (Unicode; ZWJ, soft hyphen, variation selectors, tag characters,
    U+034F, U+180B, U+3164…): rendered as nothing, so a reader does not see it split a word; and the Arabic
    and Hebrew vowel marks. From the tables in ``guardrail/matching/data/obfuscation.json``
    (``scripts/gen_obfuscation_data.py``)."""
    from guardrail.matching.obfuscation import default_ignorable_chars, vocalization_marks

    return default_ignorable_chars() | vocalization_marks()


#: Halfwidth voiced sound marks (U+FF9E, U+FF9F): NFKC composes them with the halfwidth katakana before them
#: only when both are normalised together.
HALFWIDTH_VOICED_MARKS = frozenset("\uff9e\uff9f")


@functools.cache
def _held() -> frozenset[str]:
    """The halfwidth katakana that compose with a following halfwidth voiced mark (``ﾊ`` + ``ﾟ`` → ``パ``)."""
    return frozenset(c for c in map(chr, range(0xFF66, 0xFF9E))
                     if any(len(unicodedata.normalize("NFKC", c + m)) == 1 for m in HALFWIDTH_VOICED_MARKS))


def holds_for_composition(char: str) -> bool:
    """Whether ``char`` may still compose with the next character (:func:`compose_held`)."""
    return char in _held()


def composed_chars(text: str) -> list[tuple[int, str]]:
    """The characters of ``text`` with their indices, every held character (:func:`holds_for_composition`)
    composed with the voiced mark right after it (``ﾊﾟ`` → ``パ`` at the index of ``ﾊ``)."""
    out: list[tuple[int, str]] = []
    for index, c in enumerate(text):
        if c in HALFWIDTH_VOICED_MARKS and out and out[-1][0] == index - 1 and holds_for_composition(out[-1][1]):
            out[-1] = (index - 1, unicodedata.normalize("NFKC", out[-1][1] + c))
        else:
            out.append((index, c))
    return out


def compose_held(text: str) -> str:
    """``text`` with every held character composed with the voiced mark after it (:func:`composed_chars`)."""
    if not any(c in HALFWIDTH_VOICED_MARKS for c in text):
        return text
    return "".join(c for _, c in composed_chars(text))


def is_word_char(char: str) -> bool:
    """Python's ``re`` ``\\w`` for one character: letters, digits (any script) and ``_``."""
    return char.isalnum() or char == "_"


@lru_cache(maxsize=65536)
def fold_char(char: str, case_sensitive: bool = False) -> str:
    """Normalise one character; returns 0, 1 or more characters.

    Whitespace is mapped to ``" "`` but runs are not collapsed here (that needs the previous character;
    see :func:`normalize`).
    """
    if char in _ignorable():
        return ""
    folded = unicodedata.normalize("NFKC", char)
    if not case_sensitive:
        folded = folded.casefold()
    out = []
    for c in folded:
        if c in ZERO_WIDTH or c in _ignorable():
            continue
        out.append(" " if c.isspace() else c)
    return "".join(out)


class FoldedChars(dict[str, tuple[tuple[str, bool], ...]]):
    """Memo of one case mode: input character -> its normalised characters (:func:`fold_char`), each with
    its word-character flag. The automata's streams read it once per decoded character, so a hit is one
    dict lookup (``memo.get(char)`` on their hot loops, ``memo[char]`` fills a miss)."""

    def __init__(self, case_sensitive: bool):
        super().__init__()
        self.case_sensitive = case_sensitive

    def __missing__(self, char: str) -> tuple[tuple[str, bool], ...]:
        folded = self[char] = tuple((c, is_word_char(c)) for c in fold_char(char, self.case_sensitive))
        return folded


def normalize_with_offsets(text: str, case_sensitive: bool = False) -> tuple[str, list[int]]:
    """Normalise ``text`` and map every output character back to the index of its source character.

    Returns:
        ``(normalised, offsets)`` with ``len(offsets) == len(normalised)``; ``offsets[i]`` is the index
        in ``text`` of the character that produced ``normalised[i]``.
    """
    out: list[str] = []
    offsets: list[int] = []
    prev_space = False
    chars = composed_chars(text) if any(c in HALFWIDTH_VOICED_MARKS for c in text) else enumerate(text)
    for index, char in chars:
        for c in fold_char(char, case_sensitive):
            if c == " ":
                if prev_space:
                    continue
                prev_space = True
            else:
                prev_space = False
            out.append(c)
            offsets.append(index)
    return "".join(out), offsets


def normalize(text: str, case_sensitive: bool = False) -> str:
    """Normalise ``text`` (see the module docstring)."""
    return normalize_with_offsets(text, case_sensitive)[0]


def normalize_term(text: str, case_sensitive: bool = False) -> str:
    """Normalise a word-list term: as :func:`normalize`, then strip the surrounding space."""
    return normalize(text, case_sensitive).strip(" ")
