"""Text normalisation shared by every matcher (the text matcher, the compiler, the verifier in tests).

The matching contract (docs/matching.md) is defined on normalised text. Normalisation is applied **per
character** so that the decoder can run it incrementally on a token stream:

1. ``NFKC`` of the character (Unicode TR #15), so full-width, ligature and compatibility forms fold
   to their plain letters (``ｆｕｃｋ`` → ``fuck``, ``ﬁ`` → ``fi``);
2. ``str.casefold`` unless the term is case-sensitive (Unicode default case folding, §3.13);
3. default-ignorable code points (Unicode's Default_Ignorable_Code_Point: zero-width characters, the soft
   hyphen, variation selectors, tag characters, U+034F, U+3164…) and NUL are dropped (they are invisible in
   rendered text and are a classic way to split a word);
4. every run of whitespace (space, tab, newline, NBSP, ideographic space, …) becomes one space.

Combining sequences are not composed across characters (``e`` + U+0301 stays two characters); models
emit precomposed characters, and per-character folding is what makes streaming exact.
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
    U+034F, U+180B, U+3164…): rendered as nothing, so a reader does not see it split a word. From the
    table in ``guardrail/matching/data/obfuscation.json`` (``scripts/gen_obfuscation_data.py``)."""
    from guardrail.matching.obfuscation import default_ignorable_chars

    return default_ignorable_chars()


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
    for index, char in enumerate(text):
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
