"""Obfuscated forms through the real service at its default settings (default list ``en``, no request options,
``GUARDRAIL_OBFUSCATION`` left at its default): a user who pastes a banned term written with dots, spaces,
underscores, hyphens, a star, leetspeak or look-alike letters and gets the model to repeat it never sees the
term, in the final text or in any streamed prefix (docs/matching.md, "Obfuscation")."""

from __future__ import annotations

import pytest
from helpers.service import CLIENT_KEY, MODEL
from helpers.service_client import check, unique_name

from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION
from guardrail.matching.textmatch import TextMatcher
from guardrail.wordlists.wordlist import bundled_wordlist

pytestmark = pytest.mark.slow

#: The forms of the issue's acceptance (dots, spaces, underscores, hyphens, a star, leetspeak, a look-alike
#: letter), each of which SmolLM2 repeats when a completion prompt lists it (checked by the test itself).
#: Every other form goes through the decoder in tests/engines/transformers/test_decoder_obfuscation.py.
FORMS = ["f.u.c.k", "f u c k", "f_u_c_k", "f-u-c-k", "f*ck", "sh1t", "fսck",
         # issue 28: a one-letter word before the form, two censor characters
         "It is a b!tch.", "what a f u c k", "f**k and sh**t"]
VERIFIER = TextMatcher([bundled_wordlist("en")], obfuscation=DEFAULT_OBFUSCATION)


def word_list_prompt(form: str) -> str:
    return f"Word list: {form}, {form}, {form}, {form},"


@pytest.mark.parametrize("form", FORMS)
def test_a_repeated_obfuscated_term_never_reaches_the_client(openai_client, form):
    prompt = word_list_prompt(form)
    unguarded = openai_client.completions.create(model=MODEL, prompt=prompt, temperature=0, max_tokens=16,
                                                 extra_body={"wordlists": []}).choices[0].text
    assert VERIFIER.scan(unguarded), unguarded  # the model does repeat it...
    stream = openai_client.completions.create(model=MODEL, prompt=prompt, temperature=0, max_tokens=16, stream=True,
                                              stream_options={"include_usage": True})
    sent, usage = "", None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            sent += choice.text
            assert VERIFIER.scan(sent) == [], sent  # ...but no prefix the client received holds it
    assert usage is not None and usage.model_extra["rollbacks"] >= 1


def test_a_request_can_turn_obfuscation_off_and_get_the_literal_contract(openai_client):
    prompt = word_list_prompt("f.u.c.k")
    answer = openai_client.completions.create(model=MODEL, prompt=prompt, temperature=0, max_tokens=16,
                                              extra_body={"obfuscation": "off"})
    assert answer.usage.model_extra["rollbacks"] == 0
    assert VERIFIER.scan(answer.choices[0].text)


def test_check_reads_obfuscated_forms_at_the_default_level_and_the_request_level(service):
    headers = {"Authorization": f"Bearer {CLIENT_KEY}"}
    found = service.post("/v1/check", json={"text": "well f.u.c.k and sh1t"}, headers=headers).json()
    assert [(m["term"], m["text"]) for m in found["matches"]] == [("fuck", "f.u.c.k"), ("shit", "sh1t")]
    literal = service.post("/v1/check", json={"text": "well f.u.c.k and sh1t", "obfuscation": "off"},
                           headers=headers).json()
    assert literal["flagged"] is False
    own = service.post("/v1/check", json={"text": "r.a.i.n.b.o.w", "banned_terms": ["rainbow"]}, headers=headers)
    assert own.json()["matches"][0]["term"] == "rainbow"


@pytest.mark.parametrize("text,term", [("you're a f*ck.", "fuck"), ("I f-u-c-k up", "fuck"), ("f**k", "fuck"),
                                       ("u f*ck", "fuck"), ("it is a b!tch", "bitch"), ("BIITCH", "bitch"),
                                       ("masturbaton", "masturbation"), ("b\u00a1tch", "bitch")])
def test_check_flags_what_people_type_at_the_default_level(service, text, term):
    headers = {"Authorization": f"Bearer {CLIENT_KEY}"}
    found = service.post("/v1/check", json={"text": text}, headers=headers).json()
    assert [m["term"] for m in found["matches"]] == [term], found


@pytest.mark.parametrize("path,body", [
    ("/v1/check", {"text": "x", "obfuscation": "loud"}),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "obfuscation": "masked+bold"}),
])
def test_a_bad_obfuscation_value_is_a_400_naming_the_field(service, path, body):
    answer = service.post(path, json=body, headers={"Authorization": f"Bearer {CLIENT_KEY}"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "obfuscation"


def test_a_stored_list_keeps_its_own_level_and_its_terms_theirs(service):
    """The admin API takes the list's level (the ``@obfuscation`` header) and a term's; both survive a PATCH,
    and the check endpoint reads each term at its own level, whatever the request asks for."""
    name = unique_name()
    created = service.admin("PUT", f"/admin/wordlists/{name}", json={
        "terms": ["kumquat", {"text": "rambutan", "obfuscation": "spaced"}], "obfuscation": "off"})
    assert created.status_code in (200, 201), created.text
    patched = service.admin("PATCH", f"/admin/wordlists/{name}", json={"add": ["durian"]},
                            headers={"If-Match": created.headers["ETag"]})
    assert patched.status_code == 200, patched.text
    stored = service.admin("GET", f"/admin/wordlists/{name}").json()
    assert stored["obfuscation"] == "off"
    assert {t["text"]: t["obfuscation"] for t in stored["terms"]} == {"kumquat": None, "rambutan": "spaced",
                                                                       "durian": None}
    found = check(service, "k.u.m.q.u.a.t r.a.m.b.u.t.a.n d.u.r.i.a.n durian", wordlists=[name],
                  obfuscation="masked")
    assert [(m["term"], m["text"]) for m in found["matches"]] == [("rambutan", "r.a.m.b.u.t.a.n"),
                                                                   ("durian", "durian")]
    service.admin("DELETE", f"/admin/wordlists/{name}")
