"""The shipped ``\\w \\d \\s`` tables (guardrail/matching/data/unicode_categories.json) are what this Python's
``re`` matches: a table that disagreed would change which characters end a word."""

import unicodedata

import pytest

from guardrail.matching import charset


@pytest.mark.parametrize("category", [r"\w", r"\d", r"\s"])
def test_the_shipped_table_is_what_re_matches(category):
    shipped = charset._shipped()
    assert shipped, f"no table for Unicode {unicodedata.unidata_version}: run scripts/gen_unicode_categories.py"
    assert tuple(tuple(r) for r in shipped[category]) == charset.scan_category(category).ranges
    assert charset._category(category).ranges == charset.scan_category(category).ranges
