"""``Text``: a request string that can be encoded as UTF-8.

JSON allows an escaped lone surrogate (``"a\\ud800"``) and Python's ``json`` decodes it into a ``str``
that no tokenizer, regex engine or UTF-8 writer accepts. Such strings are refused at validation, so
the answer is a 400 naming the field (``messages.0.content``) instead of a 500 deep in the tokenizer.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _encodable(value: str) -> str:
    found = _LONE_SURROGATE.search(value)
    if found is not None:
        raise ValueError(f"contains a lone UTF-16 surrogate (U+{ord(found.group()):04X}) at index {found.start()}; "
                         "text must be valid Unicode")
    return value


#: A string without lone surrogates (what UTF-8 can encode).
Text = Annotated[str, AfterValidator(_encodable)]
