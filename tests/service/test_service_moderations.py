"""``/v1/moderations`` (OpenAI's moderations shape over the word lists) with the official ``openai`` client against
the real service and its seeded lists: one result per input, the lists as categories, never the terms."""

from __future__ import annotations

import openai
import pytest
from helpers.service_client import error_of

pytestmark = pytest.mark.slow


def test_each_input_gets_a_result_with_the_lists_as_categories(openai_client):
    moderation = openai_client.moderations.create(
        input=["What the FUCK is that?", "Have a nice day.", "A dog barks."],
        extra_body={"wordlists": ["en", "de"], "banned_terms": ["dog"]})
    assert moderation.id.startswith("modr-") and moderation.model == "guardrail-wordlists"
    rude, nice, dog = (r.model_dump(exclude_unset=True) for r in moderation.results)
    assert (rude["flagged"], nice["flagged"], dog["flagged"]) == (True, False, True)
    assert rude["categories"] == {"en": True, "de": False, "request": False}
    assert nice["categories"] == {"en": False, "de": False, "request": False}
    assert dog["category_scores"] == {"en": 0.0, "de": 0.0, "request": 1.0}
    assert rude["category_applied_input_types"]["en"] == ["text"]
    assert "fuck" not in moderation.model_dump_json().lower()  # list names only: no term, no input text


def test_a_single_string_and_a_model_name_are_accepted(openai_client):
    moderation = openai_client.moderations.create(input="Have a nice day.", model="omni-moderation-latest")
    [result] = moderation.results
    assert moderation.model == "omni-moderation-latest" and result.flagged is False
    assert set(result.model_dump(exclude_unset=True)["categories"]) == {"en"}  # the server's default set


@pytest.mark.parametrize(("body", "param"), [({"input": []}, "input"),
                                             ({"input": [{"type": "image_url", "image_url": {"url": "x"}}]}, "input"),
                                             ({"input": "x", "wordlists": ["no-such-list"]}, "wordlists")])
def test_bad_input_is_a_4xx_naming_the_field(openai_client, body, param):
    with pytest.raises(openai.APIStatusError) as failure:
        openai_client.moderations.create(input=body.pop("input"), extra_body=body)
    assert failure.value.status_code in (400, 404)
    assert error_of(failure.value)["param"].startswith(param)
