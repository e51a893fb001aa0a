"""A banned term as a request gives it: a plain string or ``{text, match, case_sensitive}``."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from guardrail.wordlists.wordlist import MAX_TERM_CHARS, MatchMode, Term, default_match_mode, split_regex_prefix
from service.schemas.obfuscation import ObfuscationSetting as ObfuscationSetting
from service.schemas.text import Text

# Pydantic checks the length (so the schema documents it); the core (wordlist_from_terms) checks the
# rest and names the term.


class TermIn(BaseModel):
    """A term with options (docs/wordlists.md): ``match`` defaults by script (word, or substring for
    scripts written without spaces), ``case_sensitive`` to false. ``text`` written ``re:PATTERN`` is a
    regex term (``\\re:`` for the literal text), as in a plain string item."""

    model_config = ConfigDict(extra="forbid")

    text: Text = Field(min_length=1, max_length=MAX_TERM_CHARS, examples=["darn", "re:d[a4]rn"],
                       description="The term, or re:PATTERN for a regular expression (docs/wordlists.md).")
    match: MatchMode | None = None
    case_sensitive: bool = False
    obfuscation: ObfuscationSetting | None = None

    def to_term(self) -> Term:
        text, regex = split_regex_prefix(self.text.strip())
        return Term(text, self.match or default_match_mode(text), self.case_sensitive, regex, self.obfuscation)


TermText = Annotated[Text, Field(min_length=1, max_length=MAX_TERM_CHARS)]
TermItem = TermText | TermIn


def to_terms(items: list[TermItem]) -> list[str | Term]:
    """Request items as what ``guardrail.wordlists.wordlist.wordlist_from_terms`` takes."""
    return [item.to_term() if isinstance(item, TermIn) else item for item in items]
