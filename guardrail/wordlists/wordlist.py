"""Word lists: the terms a request bans, their match modes, and the text format they are written in.

A word list is parsed once into an immutable :class:`WordList`; the matchers (``textmatch.py``,
``compiler.py``) normalise the terms, this module stores them exactly as written (surrounding
whitespace stripped). The file format is documented with examples in ``docs/wordlists.md``.

Bundled lists (the 28 LDNOOBW languages, CC-BY-4.0, see ``wordlists/NOTICE``) live in the
top-level ``wordlists/`` directory next to the package; ``GUARDRAIL_WORDLISTS_DIR`` points
elsewhere when the package is installed without it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path

from guardrail.wordlists.obfuscation import Obfuscation, ObfuscationLevel
from guardrail.wordlists.regex_syntax import REGEX_PREFIX, RegexError, parse_regex

__all__ = [
    "MAX_TERMS",
    "MAX_TERM_CHARS",
    "MatchMode",
    "REGEX_PREFIX",
    "Term",
    "WordList",
    "WordListError",
    "bundled_names",
    "bundled_wordlist",
    "default_match_mode",
    "format_wordlist",
    "load_wordlist",
    "parse_wordlist",
    "split_regex_prefix",
    "wordlist_digest",
    "wordlist_from_terms",
    "written_term",
]

MAX_TERM_CHARS = 256
MAX_TERMS = 100_000  # terms plus allow-terms in one list

WORDLISTS_DIR_ENV = "GUARDRAIL_WORDLISTS_DIR"


class MatchMode(str, Enum):
    """Where a term may occur in the (normalised) text.

    ``WORD``: bounded by non-word characters or the text edges on both sides.
    ``PREFIX``: starts at a word boundary and may continue ("idiot" bans "idiots").
    ``SUBSTRING``: anywhere (the only sensible mode for scripts written without spaces).
    """

    WORD = "word"
    PREFIX = "prefix"
    SUBSTRING = "substring"


@dataclass(frozen=True)
class Term:
    """One banned term.

    ``text`` is the term as written in the list (surrounding whitespace stripped, not
    normalised); ``match`` its :class:`MatchMode`; ``case_sensitive`` disables case folding.
    ``regex``: ``text`` is a regular expression (Python ``re`` syntax, the subset in
    :mod:`guardrail.wordlists.regex_syntax`) without its ``re:`` prefix, matched against the
    normalised text under the same match mode and case rule (docs/matching.md, "Regex terms").
    Build one in code as ``Term("s[o0]rry", MatchMode.WORD, regex=True)``; pass it through
    :func:`wordlist_from_terms` to have the pattern checked then (compiling checks it too).
    """

    text: str
    match: MatchMode
    case_sensitive: bool = False
    regex: bool = False
    #: The term's own obfuscation level (parsed where it was written: ``| obfuscation=LEVEL`` or a request's
    #: term object); ``None``: the list's, else the request's or the server's.
    obfuscation: Obfuscation | None = None


@dataclass(frozen=True)
class WordList:
    """A named list of banned terms plus allow-terms.

    ``allow``: an occurrence of a ``SUBSTRING`` term lying inside an occurrence of an
    allow-term is not a match (``性`` inside ``女性``, "cunt" inside "Scunthorpe").
    """

    name: str
    terms: tuple[Term, ...]
    allow: tuple[str, ...] = ()
    #: The list's obfuscation level (``@obfuscation`` header), for terms without their own; ``None``: the
    #: request's or the server's setting applies (:func:`with_obfuscation`, which every path calls with
    #: its setting, ``DEFAULT_OBFUSCATION`` when none is named; a list compiled without it: ``off``).
    obfuscation: Obfuscation | None = None


class WordListError(ValueError):
    """A word list or a term is invalid.

    ``source`` names the file (or ``"<string>"``, ``"<request>"``, a bundled list's name) and
    ``line`` is the 1-based line (for :func:`wordlist_from_terms`: the 1-based index of the
    term), or ``None`` when the error concerns the list as a whole. Both appear in the message.
    """

    def __init__(self, message: str, source: str, line: int | None = None) -> None:
        where = source if line is None else f"{source}:{line}"
        super().__init__(f"{where}: {message}")
        self.source = source
        self.line = line
        self.reason = message


# Scripts written without spaces between words: a whole-word rule cannot work there, so terms
# written in them default to SUBSTRING. Korean is written with spaces and defaults to WORD.
_NO_SPACE_SCRIPT_RANGES: tuple[tuple[int, int], ...] = (
    (0x0E00, 0x0E7F),  # Thai
    (0x0E80, 0x0EFF),  # Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3021, 0x3029),  # Hangzhou numerals
    (0x3031, 0x303C),  # kana repeat marks, 〻 〼
    (0x3040, 0x30FF),  # Hiragana, Katakana (incl. ー)
    (0x3100, 0x312F),  # Bopomofo
    (0x31A0, 0x31BF),  # Bopomofo extended
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA9E0, 0xA9FF),  # Myanmar extended-B
    (0xAA60, 0xAA7F),  # Myanmar extended-A
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # halfwidth Katakana
    (0x1B000, 0x1B16F),  # kana supplement / extended
    (0x20000, 0x323AF),  # CJK extensions B–H (zh uses 𨳒 and friends)
)


def _in_no_space_script(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in _NO_SPACE_SCRIPT_RANGES)


def default_match_mode(text: str) -> MatchMode:
    """The mode a term gets when neither a ``@match`` directive nor an option sets one.

    ``SUBSTRING`` when ``text`` contains a character of a script written without spaces
    (Han, Hiragana, Katakana, Bopomofo, Thai, Lao, Khmer, Myanmar); ``WORD`` otherwise
    (Korean Hangul is written with spaces and gets ``WORD``).
    """
    if any(_in_no_space_script(c) for c in text):
        return MatchMode.SUBSTRING
    return MatchMode.WORD


def _check_text(text: str, source: str, line: int | None, what: str = "term", regex: bool = False) -> None:
    """Raise :class:`WordListError` unless ``text`` (already stripped) is a valid term, or a valid
    pattern of a regex term (``regex``: no letter-or-digit rule, the pattern is parsed instead)."""
    if not text:
        raise WordListError(f"empty {what}", source, line)
    if len(text) > MAX_TERM_CHARS:
        raise WordListError(
            f"{what} {text[:40]!r}... is {len(text)} characters long (limit {MAX_TERM_CHARS})",
            source,
            line,
        )
    for char in text:
        category = unicodedata.category(char)
        # A line break cannot be written in the one-term-per-line format, and a lone
        # surrogate (possible in a JSON request) cannot be encoded as UTF-8.
        if (category == "Cc" and char != "\t") or category in ("Zl", "Zp", "Cs"):
            raise WordListError(
                f"{what} {text!r} contains the control character U+{ord(char):04X}", source, line
            )
    if regex:
        try:
            parse_regex(text)
        except RegexError as exc:
            raise WordListError(f"term {REGEX_PREFIX + text!r}: {exc.reason}", source, line) from None
        return
    if not any(c.isalnum() for c in text):
        raise WordListError(f"{what} {text!r} has no letter or digit", source, line)


def with_obfuscation(wordlists: Sequence[WordList], default: Obfuscation) -> list[WordList]:
    """``wordlists`` with ``default`` as the obfuscation level of each list that sets none (a request's or
    the server's setting, else ``DEFAULT_OBFUSCATION``: a list's own ``@obfuscation`` and a term's own option
    take precedence).

    Raises:
        TypeError: ``default`` is not an :class:`~guardrail.wordlists.obfuscation.Obfuscation` (a setting is
            parsed once where it enters, with ``Obfuscation.parse``, and passed on typed).
    """
    if not isinstance(default, Obfuscation):
        raise TypeError(f"obfuscation: expected an Obfuscation (Obfuscation.parse at the edge), got {default!r}")
    return [wl if wl.obfuscation is not None else replace(wl, obfuscation=default) for wl in wordlists]


_OPTION_VALUES: dict[str, dict[str, object]] = {
    "match": {m.value: m for m in MatchMode},
    "case": {"sensitive": True, "insensitive": False},
    "obfuscation": {str(Obfuscation(level, markup)): Obfuscation(level, markup)
                    for level in ObfuscationLevel for markup in (False, True)},
}

# The options part starts at the last "|" that stands alone (whitespace or a line edge on both
# sides), so a term may contain "a|b"; a term containing " | " is written with a trailing " |".
_OPTION_SEPARATOR = re.compile(r"(?:^|\s)\|(?=\s|$)")

# A leading backslash makes the rest of the line literal, for terms starting with # @ ! \ or |.
_ESCAPED_LEADERS = ("#", "@", "!", "\\", "|")


def _parse_option_value(key: str, value: str, source: str, line: int | None) -> object:
    values = _OPTION_VALUES.get(key)
    if key == "obfuscation":
        value = "".join(value.split()).lower()
    if values is None:
        raise WordListError(
            f"unknown option {key!r} (expected one of {sorted(_OPTION_VALUES)})", source, line
        )
    if value not in values:
        raise WordListError(
            f"invalid value {value!r} for option {key!r} (expected one of {sorted(values)})",
            source,
            line,
        )
    return values[value]


def _parse_options(text: str, source: str, line: int) -> dict[str, object]:
    options: dict[str, object] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise WordListError(f"option {item!r} is not of the form name=value", source, line)
        if key in options:
            raise WordListError(f"option {key!r} given twice", source, line)
        options[key] = _parse_option_value(key, value, source, line)
    return options


def _split_options(entry: str) -> tuple[str, str | None]:
    """Split ``term | options`` into the raw term and the options text (``None``: no options)."""
    last = None
    for last in _OPTION_SEPARATOR.finditer(entry):  # noqa: B007 - keep the last separator
        pass
    if last is None:
        return entry, None
    return entry[: last.start()], entry[last.end() :]


def _unescape(term: str) -> str:
    if term.startswith("\\"):
        return term[1:]
    return term


def split_regex_prefix(written: str) -> tuple[str, bool]:
    """A term as written in a request or on the command line -> ``(text, regex)``.

    ``re:PATTERN`` is the regex term ``PATTERN``; a backslash before ``re:`` (``\\re:...``) makes the
    rest literal text, one backslash removed (``\\\\re:`` is the literal ``\\re:``); anything else is
    literal text as is. The inverse of :func:`written_term`.
    """
    if written.startswith(REGEX_PREFIX):
        return written[len(REGEX_PREFIX):].strip(), True
    if written.startswith("\\") and written.lstrip("\\").startswith(REGEX_PREFIX):
        return written[1:], False
    return written, False


def written_term(term: Term) -> str:
    """``term``'s text as a request or a list line writes it: ``re:`` before a pattern, a backslash
    before a literal text that would read as one (``\\re:...``). Inverse of :func:`split_regex_prefix`."""
    if term.regex:
        return REGEX_PREFIX + term.text
    if term.text.lstrip("\\").startswith(REGEX_PREFIX):
        return "\\" + term.text
    return term.text


class _Collector:
    """Accumulates terms and allow-terms in order, collapsing exact duplicates, enforcing limits."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.terms: dict[Term, None] = {}
        self.allow: dict[str, None] = {}

    def _check_size(self, line: int | None) -> None:
        if len(self.terms) + len(self.allow) >= MAX_TERMS:
            raise WordListError(f"more than {MAX_TERMS} terms in one list", self.source, line)

    def add_term(self, term: Term, line: int | None) -> None:
        if term not in self.terms:
            self._check_size(line)
            self.terms[term] = None

    def add_allow(self, text: str, line: int | None) -> None:
        if text not in self.allow:
            self._check_size(line)
            self.allow[text] = None

    def build(self, name: str) -> WordList:
        return WordList(name=name, terms=tuple(self.terms), allow=tuple(self.allow))


def parse_wordlist(text: str, name: str, source: str = "<string>") -> WordList:
    """Parse the word-list format (``docs/wordlists.md``) into a :class:`WordList`.

    ``text`` is the whole list; lines are separated by ``"\\n"`` (a trailing ``"\\r"`` is
    stripped with the other surrounding whitespace). ``source`` only labels errors.

    Raises :class:`WordListError` naming ``source`` and the 1-based line for: an empty term, a
    term without a letter or digit, a term over 256 characters, a control character in a
    term, more than 100,000 terms, an unknown option or option value, an unknown directive.
    """
    collector = _Collector(source)
    obfuscation: Obfuscation | None = None
    match_default: MatchMode | None = None  # None: default_match_mode(term)
    case_default = False
    if text.startswith("\ufeff"):
        text = text[1:]
    for line_no, raw in enumerate(text.split("\n"), start=1):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        if entry.startswith("@"):
            directive, value = (entry[1:].split(maxsplit=1) + ["", ""])[:2]
            if directive not in _OPTION_VALUES:
                raise WordListError(
                    f"unknown directive @{directive} (expected @match, @case or @obfuscation)", source, line_no
                )
            parsed = _parse_option_value(directive, value, source, line_no)
            if directive == "obfuscation":
                if collector.terms or obfuscation is not None:
                    raise WordListError("@obfuscation sets the level of the whole list: write it once, before "
                                        "the first term (a term takes its own with '| obfuscation=LEVEL')",
                                        source, line_no)
                obfuscation = parsed  # type: ignore[assignment]
            elif directive == "match":
                match_default = parsed  # type: ignore[assignment]
            else:
                case_default = bool(parsed)
            continue
        if entry.startswith("!"):
            allow = entry[1:].strip()
            _check_text(allow, source, line_no, what="allow-term")
            collector.add_allow(allow, line_no)
            continue
        raw_term, options_text = _split_options(entry)
        options = _parse_options(options_text, source, line_no) if options_text else {}
        raw_term = raw_term.strip()
        regex = raw_term.startswith(REGEX_PREFIX)
        term_text = raw_term[len(REGEX_PREFIX):].strip() if regex else _unescape(raw_term).strip()
        _check_text(term_text, source, line_no, regex=regex)
        match = options.get("match", match_default or default_match_mode(term_text))
        case_sensitive = options.get("case", case_default)
        term_obfuscation = options.get("obfuscation")
        collector.add_term(Term(term_text, MatchMode(match), bool(case_sensitive), regex,
                                term_obfuscation), line_no)  # type: ignore[arg-type]
    return replace(collector.build(name), obfuscation=obfuscation)


def load_wordlist(path: str | Path) -> WordList:
    """Read and parse a UTF-8 word-list file; the list's name is the file stem.

    Raises :class:`WordListError` (source = the path) for invalid UTF-8, naming the line
    holding the bad bytes, and for everything :func:`parse_wordlist` rejects; ``OSError``
    when the file cannot be read.
    """
    path = Path(path)
    data = path.read_bytes()
    lines: list[str] = []
    # Decoded line by line so that an invalid byte is reported with its line number.
    for line_no, raw in enumerate(data.split(b"\n"), start=1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise WordListError(
                f"invalid UTF-8 at byte {exc.start} of the line ({raw[exc.start:exc.end]!r})",
                str(path),
                line_no,
            ) from None
    return parse_wordlist("\n".join(lines), name=path.stem, source=str(path))


def _bundled_dir() -> Path:
    # guardrail/wordlists/wordlist.py -> the repository root's wordlists/ (an editable or source install).
    beside_package = Path(__file__).resolve().parents[2] / "wordlists"
    if beside_package.is_dir():
        return beside_package
    configured = os.environ.get(WORDLISTS_DIR_ENV)
    if configured and Path(configured).is_dir():
        return Path(configured)
    raise WordListError(
        f"bundled word lists not found at {beside_package}; set {WORDLISTS_DIR_ENV}",
        source="<bundled>",
    )


def bundled_names() -> list[str]:
    """The bundled lists' names (LDNOOBW codes: ``"en"``, ``"fr-CA-u-sd-caqc"``), sorted."""
    return sorted(p.stem for p in _bundled_dir().glob("*.txt"))


@functools.cache
def bundled_wordlist(name: str) -> WordList:
    """The bundled list ``name`` (one of :func:`bundled_names`), parsed once and cached.

    Raises :class:`WordListError` (source = ``name``) for an unknown name.
    """
    names = bundled_names()
    if name not in names:
        raise WordListError(f"unknown bundled word list (available: {', '.join(names)})", name)
    return load_wordlist(_bundled_dir() / f"{name}.txt")


def wordlist_from_terms(terms: Iterable[str | Term], name: str = "request") -> WordList:
    """Build a list from terms given in a request (``banned_terms``) or on the command line.

    Strings get :func:`default_match_mode` and case-insensitive matching; a string written
    ``re:PATTERN`` is a regex term, ``\\re:...`` the literal text (:func:`split_regex_prefix`).
    :class:`Term` objects keep their options, ``regex`` included (their text is never read for a
    prefix). Surrounding whitespace is stripped, exact duplicates are collapsed. Raises
    :class:`WordListError` with source ``"<request>"`` and ``line`` = the 1-based index of the
    offending term, under the same rules as :func:`parse_wordlist`.
    """
    source = "<request>"
    collector = _Collector(source)
    for index, item in enumerate(terms, start=1):
        collector.add_term(_request_term(item, source, index), index)
    return collector.build(name)


def _request_term(item: object, source: str, index: int) -> Term:
    """Validate one item of :func:`wordlist_from_terms` into a :class:`Term`."""
    text: object  # a caller's item: checked to be a str below
    if isinstance(item, Term):
        text, match, case_sensitive = item.text, item.match, bool(item.case_sensitive)
        regex = bool(item.regex)
    else:
        text, match, case_sensitive, regex = item, None, False, False
    if not isinstance(text, str):
        raise WordListError(
            f"term must be a string, got {type(text).__name__}", source, index
        )
    if not isinstance(item, Term):
        text, regex = split_regex_prefix(text.strip())
    text = text.strip()
    _check_text(text, source, index, regex=regex)
    obfuscation = item.obfuscation if isinstance(item, Term) else None
    if obfuscation is not None and not isinstance(obfuscation, Obfuscation):
        raise WordListError(f"term {text!r}: obfuscation must be an Obfuscation (Obfuscation.parse), got "
                            f"{obfuscation!r}", source, index)
    if match is None:
        return Term(text, default_match_mode(text), regex=regex, obfuscation=obfuscation)
    try:
        return Term(text, MatchMode(match), case_sensitive, regex, obfuscation)
    except ValueError:
        raise WordListError(
            f"invalid match mode {match!r} for term {text!r}", source, index
        ) from None


def _format_term(term: Term) -> str:
    text = written_term(term)
    if not term.regex and text.startswith(_ESCAPED_LEADERS) and text == term.text:
        text = "\\" + text
    options = []
    if term.match != default_match_mode(term.text):
        options.append(f"match={MatchMode(term.match).value}")
    if term.case_sensitive:
        options.append("case=sensitive")
    if term.obfuscation is not None:
        options.append(f"obfuscation={term.obfuscation}")
    if options:
        return f"{text} | {', '.join(options)}"
    if _OPTION_SEPARATOR.search(text):
        # The term itself contains " | ": an empty options part keeps it whole.
        return f"{text} |"
    return text


def format_wordlist(wordlist: WordList) -> str:
    """Write ``wordlist`` in the word-list format, so that ``parse_wordlist(format_wordlist(wl),
    wl.name) == wl`` for every valid list (no directives; options only where they differ from
    the defaults)."""
    lines = [f"# {wordlist.name}"]
    if wordlist.obfuscation is not None:
        lines.append(f"@obfuscation {wordlist.obfuscation}")
    lines.extend(_format_term(term) for term in wordlist.terms)
    lines.extend(f"!{allow}" for allow in wordlist.allow)
    return "\n".join(lines) + "\n"


def wordlist_digest(wordlists: Sequence[WordList]) -> str:
    """sha256 hex of the identity of ``wordlists``: names, terms with their options (regex-ness
    included: ``re:ab`` and the literal ``ab`` differ), allow-terms.

    Independent of the order of the lists, of the terms and of the allow-terms, so the
    compiled-artefact key only changes when the content does.
    """
    canonical = sorted(
        (
            {
                "name": wl.name,
                "terms": sorted(
                    {(t.text, MatchMode(t.match).value, bool(t.case_sensitive), bool(t.regex),
                      "" if t.obfuscation is None else str(t.obfuscation))
                     for t in wl.terms}
                ),
                "allow": sorted(set(wl.allow)),
                "obfuscation": "" if wl.obfuscation is None else str(wl.obfuscation),
            }
            for wl in wordlists
        ),
        key=lambda d: json.dumps(d, ensure_ascii=False, sort_keys=True),
    )
    payload = json.dumps(
        {"format": "guardrail-wordlists/3", "lists": canonical},
        ensure_ascii=False,
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()
