"""Regenerate ``guardrail/matching/data/obfuscation.json``: the character tables of obfuscation-robust matching.

The output is deterministic for given package versions (sorted keys, ``ensure_ascii=False``, one entry a
line) and is checked in; rerun this script after upgrading one of the sources and review the diff.

Tables (every key and value is in the project's normalised form, NFKC + ``str.casefold``, because the
matcher applies that normalisation before these tables):

- ``confusables`` ``{char: letter}``: letters that look like an ASCII letter a–z, from Unicode's
  confusables data (UTS #39 ``confusables.txt``) as shipped by the PyPI package ``confusable-homoglyphs``.
  A source character is kept when it is one non-ASCII code point, ``isalpha()``, and its prototype is one
  ASCII letter (case-folded: Cyrillic ``А``/``а`` → ``a``) or, failing that, one ASCII letter followed only
  by combining marks (``ƒ`` → ``f`` + U+0326, ``ø`` → ``o`` + U+0338, ``ł``, ``đ``, ``ħ``, ``η`` → ``n`` +
  U+0329; ``--strict-prototypes`` leaves these out). The key stored is the source's NFKC + casefold, which
  must be one non-ASCII letter that does not itself decompose into an ASCII letter + marks (those are
  ``diacritics``: ``ö`` stays out of this table); sources that NFKC already folds to ASCII (``ｆ``, ``𝐟``,
  ``ſ``) are left out, the project's normalisation handles them. When several sources fold to the same key
  with different prototypes (``Ν`` → ``N`` but ``ν`` → ``v``), the key's own mapping wins (the lowercase
  glyph is what casefolded text shows); otherwise the majority, then the alphabetically first prototype.
  Digits and symbols never appear on either side (``0``/``O``, ``1``/``l`` are not here).
- ``diacritics`` ``{letter: "letters"}``: for each ASCII letter, every non-ASCII letter of Python's
  ``unicodedata`` (the whole code space) whose NFKC + casefold is one character whose NFD is that ASCII
  letter followed only by combining marks (category Mn); the folded forms, deduplicated and sorted.
- ``default_ignorable`` ``[[lo, hi], ...]``: inclusive code-point ranges of the Unicode property
  Default_Ignorable_Code_Point, as the ``regex`` package reports it (its own Unicode version).
- ``leet`` ``{letter: "chars"}``: common single-character leetspeak substitutions (digits and symbols,
  and the one letter ``v`` for ``u``; never whitespace); sources in ``leet_source``.
- ``symbols`` ``{letter: "chars"}``: punctuation and symbols that look like an ASCII letter, read like its
  leetspeak (``b¡tch``): a single non-ASCII code point of category P* or S* whose confusables prototype is
  that letter (``∣`` → ``l``, ``×`` → ``x``, ``∪`` → ``u``), or a Latin-1 Supplement symbol (U+00A1–U+00BF,
  U+00D7, U+00F7: the ones keyboards type) whose transliteration by the ``anyascii`` package is one of the
  letter's leetspeak characters (``¡`` → ``!`` → ``i``, ``¦`` → ``|`` → ``i``, ``l``). Characters NFKC folds
  to ASCII are left out (the normalisation already reads them).
- ``vocalization_marks`` ``[[lo, hi], ...]``: the nonspacing marks (category Mn) of the Arabic and Hebrew
  scripts (Script_Extensions, so the harakat shared with Syriac count; none also used by Latin), as the ``regex``
  package reports them: harakat, shadda, sukun, Hebrew points and cantillation.
  Words are written with or without them (``سَكس`` is ``سكس``), so the normalisation drops them, like
  default-ignorable code points.

Usage: python scripts/gen_obfuscation_data.py [--output PATH] [--check]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.resources
import json
import re
import string
import sys
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path

import regex

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "guardrail" / "matching" / "data" / "obfuscation.json"
LETTERS = string.ascii_lowercase
#: Bidi marks that ``confusables.txt`` puts around right-to-left characters in its comments, which
#: ``confusable-homoglyphs`` keeps in its keys.
BIDI_MARKS = str.maketrans("", "", "\u200e\u200f")

#: Single-character leetspeak substitutions. Core from the ``obscenity`` library's leet transformer
#: (a @4, c (, e 3, g 6, i 1|!, o 0, s $5, t 7, z 2; its l → / is left out: "/" separates words);
#: the basic tier of Omni Calculator's leet-speak table (a 4, b 8, e 3, g 6 9, i 1, o 0, s 5, t 7);
#: Microsoft's parents' primer on leetspeak (l 1, s $, a 4, t 7, o 0); plus widely used forms
#: b 6, c <, i |, l |, t +; and one letter, u → v (the Latin V for U: ``fvck``, ``svck``; the most frequent letter
#: swap in the human-written tune data, bench/data/noisyhate — leet classes need two real letters besides it).
LEET = {
    "a": "4@",
    "b": "86",
    "c": "(<",
    "e": "3",
    "g": "96",
    "i": "1!|",
    "l": "1|",
    "o": "0",
    "s": "5$",
    "t": "7+",
    "u": "v",
    "z": "2",
}
LEET_SOURCE = (
    "obscenity (npm, MIT) src/transformer/resolve-leetspeak/dictionary.ts at jo3-l/obscenity@21d34a3 "
    "(a @4, c (, e 3, g 6, i 1|!, o 0, s $5, t 7, z 2; its l → / left out); "
    "https://www.omnicalculator.com/what-letters-look-like-numbers basic tier (a 4, b 8, e 3, g 6 9, i 1, "
    "o 0, s 5, t 7); Microsoft 'Key points for learning leetspeek' (2005: l 1, s $, a 4, t 7, o 0); "
    "added as widely used single characters: b 6, c <, i |, l |, t +; the letter u → v (fvck), from the tune part "
    "of bench/data/noisyhate"
)


def fold(char: str) -> str:
    """The project's normalisation of one character (NFKC, then casefold)."""
    return unicodedata.normalize("NFKC", char).casefold()


def marked_base(text: str) -> str | None:
    """The ASCII letter (case-folded) of a text whose NFD is one ASCII letter followed only by combining
    marks (category Mn), at least one; else None."""
    decomposed = unicodedata.normalize("NFD", text)
    base, marks = decomposed[:1], decomposed[1:]
    if base.isascii() and base.isalpha() and marks and all(unicodedata.category(m) == "Mn" for m in marks):
        return base.casefold()
    return None


def package_version(name: str) -> str:
    return importlib.metadata.version(name)


def confusables(marked: bool = True) -> tuple[dict[str, str], list[str]]:
    """``{folded source: prototype letter}`` and a list of the resolved conflicts (for the log)."""
    text = importlib.resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8")
    data = json.loads(text)
    # The package stores each confusables.txt line "source → prototype" in both directions. ASCII
    # letters are never the source of a line with a non-ASCII prototype, so an ASCII letter listed under a
    # non-ASCII key is that key's prototype.
    candidates: dict[str, list[tuple[bool, str, str]]] = defaultdict(list)
    for raw_key, entries in data.items():
        source = raw_key.translate(BIDI_MARKS)
        if len(source) != 1 or source.isascii() or not source.isalpha():
            continue
        prototypes = {e["c"].translate(BIDI_MARKS) for e in entries}
        letters = {p.casefold() for p in prototypes if len(p) == 1 and p.isascii() and p.isalpha()}
        if not letters and marked and unicodedata.name(source, "").startswith("LATIN "):
            # A Latin letter whose prototype is an ASCII letter plus combining marks (ƒ → f + U+0326, ø → o +
            # U+0338, ł → l + U+0338) reads as that letter, as an accented letter does in ``diacritics``. Only
            # Latin ones: in other scripts such pairs are weak look-alikes that collide with words (Cyrillic
            # б → b + mark would read the Russian "бук", beech, as the ru list's Latin term "byk").
            letters = {base for p in prototypes if (base := marked_base(p))}
        if not letters:
            continue
        if len(letters) > 1:
            raise SystemExit(f"{source!r} U+{ord(source):04X} lists several ASCII letters: {sorted(letters)}")
        key = fold(source)
        if len(key) != 1 or key.isascii() or not key.isalpha() or marked_base(key):
            continue  # a key that decomposes to an ASCII letter + marks belongs to ``diacritics``
        candidates[key].append((source == key, letters.pop(), source))
    table, conflicts = {}, []
    for key, found in candidates.items():
        direct = {letter for is_direct, letter, _ in found if is_direct}
        if len(direct) > 1:
            raise SystemExit(f"{key!r} maps directly to several letters: {sorted(direct)}")
        if direct:
            letter = direct.pop()
        else:
            counts = Counter(letter for _, letter, _ in found)
            letter = min(counts, key=lambda c: (-counts[c], c))
        if len({letter for _, letter, _ in found}) > 1:
            others = ", ".join(f"{s} U+{ord(s):04X} → {p}" for _, p, s in sorted(found, key=lambda f: f[2]))
            conflicts.append(f"{key} U+{ord(key):04X} → {letter} (from {others})")
        table[key] = letter
    return dict(sorted(table.items())), sorted(conflicts)


def diacritics() -> dict[str, str]:
    found: dict[str, set[str]] = {letter: set() for letter in LETTERS}
    for code in range(0x110000):
        char = chr(code)
        if char.isascii() or not char.isalpha():
            continue
        folded = fold(char)
        if len(folded) != 1 or folded.isascii():
            continue
        base = marked_base(folded)
        if base:
            found[base].add(folded)
    return {letter: "".join(sorted(chars)) for letter, chars in found.items() if chars}


def default_ignorable() -> list[list[int]]:
    pattern = regex.compile(r"\p{Default_Ignorable_Code_Point}")
    everything = "".join(map(chr, range(0x110000)))
    ranges: list[list[int]] = []
    for match in pattern.finditer(everything):
        code = match.start()
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return ranges


def regex_unicode_version() -> str | None:
    description = importlib.metadata.metadata("regex").get_payload() or ""
    found = re.search(r"supports Unicode (\d+(?:\.\d+)*)", description)
    return found.group(1) if found else None


def symbols() -> dict[str, str]:
    """Look-alike punctuation and symbols per ASCII letter (module docstring, ``symbols``)."""
    from anyascii import anyascii

    text = importlib.resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8")
    found: dict[str, set[str]] = defaultdict(set)
    for raw_key, entries in json.loads(text).items():
        source = raw_key.translate(BIDI_MARKS)
        if len(source) != 1 or source.isascii() or unicodedata.category(source)[0] not in "PS":
            continue
        letters = {e["c"].casefold() for e in entries if len(e["c"]) == 1 and e["c"].isascii() and e["c"].isalpha()}
        for letter in letters:
            found[letter].add(source)
    latin1 = [chr(c) for c in range(0xA1, 0xC0)] + ["\u00d7", "\u00f7"]
    for char in latin1:
        if unicodedata.category(char)[0] not in "PS":
            continue
        for letter, chars in LEET.items():
            if anyascii(char) in chars:
                found[letter].add(char)
    return {letter: "".join(sorted(c for c in chars if fold(c) == c and not fold(c).isascii()))
            for letter, chars in sorted(found.items()) if any(fold(c) == c for c in chars)}


#: The nonspacing marks of the Arabic and Hebrew scripts, none that Latin uses too (``regex`` V1 set syntax).
VOCALIZATION_MARKS = (r"[[\p{Script_Extensions=Arabic}\p{Script_Extensions=Hebrew}]&&\p{Mn}"
                      r"--\p{Script_Extensions=Latin}]")


def vocalization_marks() -> list[list[int]]:
    pattern = regex.compile(VOCALIZATION_MARKS, regex.V1)
    everything = "".join(map(chr, range(0x110000)))
    ranges: list[list[int]] = []
    for match in pattern.finditer(everything):
        code = match.start()
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return ranges


#: The only letters leetspeak may write for another letter (each is a look-alike people use for it).
LETTER_LEET = {("u", "v")}


def check_leet() -> None:
    for letter, chars in LEET.items():
        for char in chars:
            if ((char.isalpha() and (letter, char) not in LETTER_LEET) or char.isspace() or len(fold(char)) != 1
                    or fold(char) != char):
                raise SystemExit(f"leet {letter!r}: {char!r} is not a plain non-letter character")


def build(marked: bool = True) -> tuple[dict, list[str]]:
    check_leet()
    table, conflicts = confusables(marked)
    data = {
        "_doc": "Generated by scripts/gen_obfuscation_data.py; do not edit by hand (see its docstring).",
        "confusables": table,
        "confusables_source": {
            "package": "confusable-homoglyphs",
            "version": package_version("confusable-homoglyphs"),
            "file": "confusable_homoglyphs/confusables.json",
            "upstream": "https://www.unicode.org/Public/security/latest/confusables.txt (UTS #39)",
            "unicode_version": None,  # the package does not say which release of confusables.txt it ships
            "prototype_rule": "one ASCII letter" + (", or one ASCII letter + combining marks (Mn)" if marked else ""),
        },
        "diacritics": diacritics(),
        "diacritics_source": {"python_unicodedata": unicodedata.unidata_version},
        "default_ignorable": default_ignorable(),
        "default_ignorable_source": {"package": "regex", "version": package_version("regex"),
                                     "unicode_version": regex_unicode_version(),
                                     "property": "Default_Ignorable_Code_Point"},
        "leet": dict(sorted(LEET.items())),
        "leet_source": LEET_SOURCE,
        "symbols": symbols(),
        "symbols_source": {"confusables": package_version("confusable-homoglyphs"),
                           "anyascii": package_version("anyascii"),
                           "rule": "P*/S* confusables of one ASCII letter; Latin-1 Supplement symbols whose "
                                   "anyascii transliteration is a leet character of the letter"},
        "vocalization_marks": vocalization_marks(),
        "vocalization_marks_source": {"package": "regex", "version": package_version("regex"),
                                      "unicode_version": regex_unicode_version(),
                                      "property": VOCALIZATION_MARKS},
    }
    return data, conflicts


def render(data: dict) -> str:
    """One table entry a line, so that a regeneration diffs readably."""
    lines = ["{"]
    items = sorted(data.items())
    for index, (key, value) in enumerate(items):
        comma = "," if index < len(items) - 1 else ""
        if isinstance(value, dict) and value:
            lines.append(f" {json.dumps(key)}: {{")
            inner = sorted(value.items())
            for j, (k, v) in enumerate(inner):
                lines.append(f"  {json.dumps(k, ensure_ascii=False)}: {json.dumps(v, ensure_ascii=False)}"
                             + ("," if j < len(inner) - 1 else ""))
            lines.append(" }" + comma)
        elif isinstance(value, list) and value:
            lines.append(f" {json.dumps(key)}: [")
            for j, item in enumerate(value):
                lines.append(f"  {json.dumps(item, ensure_ascii=False)}" + ("," if j < len(value) - 1 else ""))
            lines.append(" ]" + comma)
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if the output file is not up to date")
    parser.add_argument("--verbose", action="store_true", help="also list the resolved confusable conflicts")
    parser.add_argument("--strict-prototypes", action="store_true",
                        help="confusables: only prototypes that are one ASCII letter (drops ƒ ø ł đ ħ η б …)")
    args = parser.parse_args()
    data, conflicts = build(marked=not args.strict_prototypes)
    text = render(data)
    assert json.loads(text) == json.loads(json.dumps(data)), "render() must be plain JSON of the data"
    summary = (f"confusables: {len(data['confusables'])} entries ({len(conflicts)} keys with conflicting "
               f"prototypes resolved); diacritics: {len(data['diacritics'])} letters, "
               f"{sum(map(len, data['diacritics'].values()))} characters; default_ignorable: "
               f"{len(data['default_ignorable'])} ranges, "
               f"{sum(hi - lo + 1 for lo, hi in data['default_ignorable'])} code points; "
               f"leet: {len(data['leet'])} letters")
    print(summary, file=sys.stderr)
    if args.verbose:
        for line in conflicts:
            print("  conflict:", line, file=sys.stderr)
    if args.check:
        current = args.output.read_text("utf-8") if args.output.exists() else None
        if current != text:
            print(f"{args.output} is out of date: run scripts/gen_obfuscation_data.py", file=sys.stderr)
            raise SystemExit(1)
        return
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, "utf-8")
    print(f"wrote {args.output} ({len(text.encode('utf-8'))} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
