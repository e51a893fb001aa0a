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
    def parse(cls, text: str) -> Obfuscation:
        """Parse ``LEVEL`` or ``LEVEL+markup`` (case-insensitive, spaces ignored). The one parser of the setting:
        each edge (an HTTP field, a CLI option, ``GUARDRAIL_OBFUSCATION``, a list's ``@obfuscation``, a term's
        ``obfuscation=``, vLLM's per-request ``extra_args``) calls it once and passes the value on typed.

        Raises:
            ValueError: its level or its switch is unknown; the message names the bad part and the accepted
                values.
            TypeError: ``text`` is not a ``str`` (an :class:`Obfuscation` needs no parsing).
        """
        if not isinstance(text, str):
            raise TypeError(f"obfuscation: expected a string to parse, got {type(text).__name__}")
        name, plus, switch = "".join(text.split()).lower().partition("+")
        expected = f"expected LEVEL or LEVEL+markup, LEVEL one of {', '.join(cls.LEVELS)} (e.g. 'masked+markup')"
        if name not in cls.LEVELS:
            raise ValueError(f"invalid obfuscation {text!r}: unknown level {name!r}; {expected}")
        if plus and switch != "markup":
            raise ValueError(f"invalid obfuscation {text!r}: unknown switch {switch!r} after '+'; {expected}")
        return cls(ObfuscationLevel[name.upper()], bool(plus))

    def covers(self, floor: Obfuscation) -> bool:
        """Whether this setting catches every form ``floor`` catches (a level at least ``floor``'s, and
        ``+markup`` where ``floor`` has it): the test of a tenant's floor."""
        return self.level >= floor.level and (self.markup or not floor.markup)

    def __str__(self) -> str:
        return self.level.name.lower() + ("+markup" if self.markup else "")

    @property
    def off(self) -> bool:
        return self.level is ObfuscationLevel.OFF


#: An obfuscation setting as written (``LEVEL`` or ``LEVEL+markup``), for schemas and settings.
OBFUSCATION_PATTERN = r"^(off|homoglyphs|leet|spaced|masked)(\+markup)?$"

#: The level of a list, term or request that sets none, on every path (the service, ``Guard``, the CLI,
#: ``TextMatcher``, the vLLM processor and driver): every form in the table above, markup included.
#: Chosen from ``bench/obfuscation.py`` (docs/matching.md: catch rate 100% of the project's set but the
#: leet forms that keep fewer than two real letters; new false positives within the issue's floors).
DEFAULT_OBFUSCATION = Obfuscation(ObfuscationLevel.MASKED, markup=True)
OFF = Obfuscation(ObfuscationLevel.OFF)


