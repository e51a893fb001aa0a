"""Obfuscation settings as lists, terms, requests and the server write them: ``LEVEL`` or ``LEVEL+markup``.

What each level reads is :mod:`guardrail.matching.obfuscation`'s (docs/matching.md, "Obfuscation"); the
setting itself belongs with the word lists, which carry it (``@obfuscation``, ``| obfuscation=``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ObfuscationLevel(IntEnum):
    """The levels, each catching what the previous one does and more (docs/matching.md, "Obfuscation")."""

    OFF = 0
    HOMOGLYPHS = 1
    LEET = 2
    SPACED = 3
    MASKED = 4


@dataclass(frozen=True)
class Obfuscation:
    """An obfuscation setting: a level and the ``markup`` switch. Written ``LEVEL`` or ``LEVEL+markup``.

    Example:
        >>> Obfuscation.parse("spaced+markup")
        Obfuscation(level=<ObfuscationLevel.SPACED: 3>, markup=True)
        >>> str(Obfuscation.parse("off"))
        'off'
    """

    level: ObfuscationLevel
    markup: bool = False

    #: The level names, weakest first.
    LEVELS = tuple(level.name.lower() for level in ObfuscationLevel)

    @classmethod
    def parse(cls, text: str | Obfuscation) -> Obfuscation:
        """Parse ``LEVEL`` or ``LEVEL+markup`` (case-insensitive, surrounding spaces ignored).

        Raises:
            ValueError: naming the bad value and the accepted ones.
        """
        if isinstance(text, Obfuscation):
            return text
        name, plus, extra = str(text).strip().lower().partition("+")
        if name not in cls.LEVELS or (plus and extra.strip() != "markup"):
            raise ValueError(f"invalid obfuscation {text!r}: expected one of {', '.join(cls.LEVELS)}, "
                             "optionally followed by '+markup' (e.g. 'masked+markup')")
        return cls(ObfuscationLevel[name.upper()], bool(plus))

    def __str__(self) -> str:
        return self.level.name.lower() + ("+markup" if self.markup else "")

    @property
    def off(self) -> bool:
        return self.level is ObfuscationLevel.OFF


#: An obfuscation setting as written (``LEVEL`` or ``LEVEL+markup``), for schemas and settings.
OBFUSCATION_PATTERN = r"^(off|homoglyphs|leet|spaced|masked)(\+markup)?$"

#: The level of a list, term or request that sets none: every form in the table above, markup included.
#: Chosen from ``bench/obfuscation.py`` (docs/matching.md: catch rate 100% of the project's set but the
#: leet forms that keep fewer than two real letters; new false positives within the issue's floors).
DEFAULT_OBFUSCATION = Obfuscation(ObfuscationLevel.MASKED, markup=True)
OFF = Obfuscation(ObfuscationLevel.OFF)


