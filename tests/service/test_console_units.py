"""The console's parts that need no model or browser: the streaming in-process transport, CSRF tokens and the
same-site check, the check playground's highlighting, the version diff, and the policy form."""

from __future__ import annotations

import asyncio

import httpx
from starlette.datastructures import Headers, ImmutableMultiDict
from starlette.requests import Request

from service.console.api import api_path
from service.console.pages.check import Segment, segments
from service.console.pages.lists import _version_of, term_diff
from service.console.pages.tenants import policy_of
from service.console.session import Session, same_origin
from service.console.transport import ASGIStreamTransport


def test_the_transport_hands_each_chunk_on_as_it_is_sent_and_tells_the_app_when_the_reader_leaves():
    seen: list[str] = []

    async def app(scope, receive, send):
        assert (await receive())["body"] == b"ping"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        seen.append("sent first")
        message = await receive()  # waits until the client goes away
        seen.append(message["type"])

    async def run():
        async with httpx.AsyncClient(transport=ASGIStreamTransport(app), base_url="http://x") as client:
            async with client.stream("POST", "/stream", content=b"ping") as response:
                async for chunk in response.aiter_raw():
                    seen.append(chunk.decode())
                    break  # the reader leaves before the app ends its answer
        return response.status_code

    assert asyncio.run(run()) == 200
    assert seen == ["sent first", "first", "http.disconnect"]


def test_api_paths_keep_a_browser_given_name_in_one_segment():
    assert api_path("admin", "wordlists", "a?b", "versions", 3) == "/admin/wordlists/a%3Fb/versions/3"
    assert api_path("admin", "tenants", "x/rotate") == "/admin/tenants/x%2Frotate"


def test_a_csrf_token_is_bound_to_the_credential_and_the_sign_in():
    session = Session("tok-" + "a" * 40, "0" * 32)
    assert session.csrf == Session("tok-" + "a" * 40, "0" * 32).csrf
    assert session.csrf != Session("tok-" + "a" * 40, "1" * 32).csrf  # a new sign-in, a new token
    assert session.csrf != Session("tok-" + "b" * 40, "0" * 32).csrf
    assert session.admin and not Session("grk_" + "a" * 43, "0" * 32).admin


def request(**headers: str) -> Request:
    return Request({"type": "http", "method": "POST", "path": "/console/lists", "headers": Headers(headers).raw})


def test_a_post_from_another_site_is_refused():
    assert same_origin(request(host="console.example:8000", origin="http://console.example:8000"))
    assert same_origin(request(host="internal:8000", origin="https://console.example",
                               **{"x-forwarded-host": "console.example"}))
    assert same_origin(request(host="console.example"))  # no Origin: not a cross-site request from a browser
    assert not same_origin(request(host="console.example", origin="https://evil.example"))
    assert not same_origin(request(host="console.example", origin="null"))
    assert not same_origin(request(host="console.example", **{"sec-fetch-site": "cross-site"}))


def test_overlapping_matches_are_highlighted_run_by_run():
    matches = [{"start": 2, "end": 7}, {"start": 5, "end": 9}]
    assert segments("a bcdefgh i", matches) == [
        Segment("a "), Segment("bcd", (1,)), Segment("ef", (1, 2)), Segment("gh", (2,)), Segment(" i")]


def test_the_version_a_conflict_was_seen_at_is_read_from_either_etag_form():
    assert [_version_of(tag) for tag in ('"v3"', '"v12-1f2e3d4c5b6a"', 'W/"v4"', "*", None)] == [3, 12, 4, None, None]


def test_a_diff_counts_options_as_part_of_a_term():
    def term(text, match="word", case=False, obfuscation=None):
        return {"text": text, "match": match, "case_sensitive": case, "obfuscation": obfuscation}

    old = {"terms": [term("fig"), term("kiwi")], "allow": ["figs"], "obfuscation": None}
    new = {"terms": [term("fig", match="prefix"), term("kiwi"), term("lime")], "allow": [], "obfuscation": "leet"}
    changes = term_diff(old, new)
    assert [t["text"] for t in changes["added"]] == ["fig", "lime"] and [t["text"] for t in changes["removed"]] == ["fig"]
    assert (changes["kept"], changes["allow_removed"], changes["obfuscation"]) == (1, ["figs"], (None, "leet"))


def test_a_policy_form_leaves_blank_fields_out_and_reads_a_dash_as_no_list():
    form = ImmutableMultiDict({"default_wordlists": "-", "allowed_wordlists": "en, shop", "required_wordlists": "",
                               "own_wordlists": "shop", "request_terms": "on", "evasion_guard": "",
                               "obfuscation": "leet", "max_tokens": "512", "requests_per_minute": "",
                               "tokens_per_minute": "lots"})
    assert policy_of(form) == {"default_wordlists": [], "allowed_wordlists": ["en", "shop"],
                               "own_wordlists": ["shop"], "request_terms": True, "obfuscation": "leet",
                               "max_tokens": 512, "tokens_per_minute": "lots"}  # the API names the bad field
