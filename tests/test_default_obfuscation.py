"""One matching contract on every path (issue 28): a path given no obfuscation level uses DEFAULT_OBFUSCATION,
and the same lists reach the compiler with the same digest (so the same artefact key) on every path.

The paths: ``TextMatcher``, ``Guard`` (load, load_lists, from_model), the CLI (compile, check, serve), the
service (settings, the anonymous policy, request bodies), the vLLM processor's per-request arguments and
``VLLMDriver``. The vLLM ones need no vLLM here: their arguments live in ``guardrail/engines/vllm/args.py``
and the driver imports vLLM only when it starts an engine.
"""

from __future__ import annotations

import inspect

import pytest
from pydantic import ValidationError

from guardrail.api import Guard
from guardrail.engines.vllm.args import GuardArgs, parse_guard_args
from guardrail.engines.vllm.driver import VLLMDriver
from guardrail.matching.cache import ArtefactCache
from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION, OFF, Obfuscation, effective
from guardrail.matching.textmatch import TextMatcher
from guardrail.wordlists.selection import select_wordlists
from guardrail.wordlists.wordlist import with_obfuscation, wordlist_digest, wordlist_from_terms
from service.cli.main import build_parser
from service.cli.options import selected_wordlists
from service.schemas.check import CheckRequest
from service.settings import Settings
from service.tenants.policy import ANONYMOUS_POLICY


def default_of(function, name: str = "obfuscation"):
    return inspect.signature(function).parameters[name].default


def test_the_default_is_masked_with_markup():
    assert DEFAULT_OBFUSCATION == Obfuscation.parse("masked+markup")


def test_text_matcher_defaults_to_it():
    assert default_of(TextMatcher.__init__) == DEFAULT_OBFUSCATION
    lists = [wordlist_from_terms(["shit"])]
    text = "s h i t and sh*t"
    assert TextMatcher(lists).scan(text) == TextMatcher(lists, obfuscation=DEFAULT_OBFUSCATION).scan(text) != []
    assert TextMatcher(lists, obfuscation=OFF).scan(text) == []


def test_guard_defaults_to_it():
    for method in (Guard.load, Guard.load_lists, Guard.from_model):
        assert default_of(method) == DEFAULT_OBFUSCATION, method.__name__


@pytest.mark.parametrize("command", ["compile", "check"])
def test_the_cli_defaults_to_it(command):
    args = build_parser().parse_args([command])
    assert args.obfuscation == DEFAULT_OBFUSCATION
    assert {wl.obfuscation for wl in selected_wordlists(args)} == {DEFAULT_OBFUSCATION}


def test_the_cli_parses_the_option_once_and_names_the_bad_part(capsys):
    assert build_parser().parse_args(["check", "--obfuscation", "spaced"]).obfuscation == Obfuscation.parse("spaced")
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["check", "--obfuscation", "maskd"])
    assert exit_info.value.code == 2
    assert "unknown level 'maskd'" in capsys.readouterr().err


def test_serve_leaves_it_to_the_settings_which_default_to_it(tmp_path):
    assert build_parser().parse_args(["serve"]).obfuscation is None  # GUARDRAIL_OBFUSCATION, else the default
    settings = Settings(data_dir=tmp_path)
    assert settings.obfuscation == DEFAULT_OBFUSCATION
    assert ANONYMOUS_POLICY.obfuscation_for(None, settings.obfuscation) == DEFAULT_OBFUSCATION
    assert Settings(data_dir=tmp_path, obfuscation="leet").obfuscation == Obfuscation.parse("leet")
    with pytest.raises(ValidationError, match="unknown switch 'bold'"):
        Settings(data_dir=tmp_path, obfuscation="leet+bold")


def test_a_request_body_parses_it_once_and_a_bad_value_names_the_field():
    assert CheckRequest.model_validate({"text": "x"}).obfuscation is None  # the key's, else the server's
    assert CheckRequest.model_validate({"text": "x", "obfuscation": "spaced+markup"}).obfuscation == \
        Obfuscation.parse("spaced+markup")
    with pytest.raises(ValidationError) as info:
        CheckRequest.model_validate({"text": "x", "obfuscation": "maskd"})
    (error,) = info.value.errors()
    assert error["loc"] == ("obfuscation",) and "unknown level 'maskd'" in error["msg"]
    schema = CheckRequest.model_json_schema()["properties"]["obfuscation"]["anyOf"][0]
    assert schema["type"] == "string" and schema["pattern"].startswith("^(off|")  # OpenAPI keeps the string form


def test_the_vllm_processor_defaults_to_it():
    assert GuardArgs().obfuscation == DEFAULT_OBFUSCATION
    args = parse_guard_args({"guardrail": {"wordlists": ["en"], "banned_terms": ["kumquat"]}})
    assert args.obfuscation == DEFAULT_OBFUSCATION
    assert {wl.obfuscation for wl in args.selected_wordlists()} == {DEFAULT_OBFUSCATION}
    named = parse_guard_args({"guardrail": '{"wordlists": ["en"], "obfuscation": "off"}'})  # vllm_xargs: JSON
    assert named.obfuscation == OFF
    assert parse_guard_args(named.to_extra_args()) == named  # written back as it is read
    with pytest.raises(ValueError, match=r"\['obfuscation'\]: invalid obfuscation 'loud': unknown level"):
        parse_guard_args({"guardrail": {"wordlists": ["en"], "obfuscation": "loud"}})


def test_the_vllm_driver_defaults_to_it(smollm2_vocab, tmp_path):
    assert default_of(VLLMDriver.artefact) == default_of(VLLMDriver.stream) == DEFAULT_OBFUSCATION
    # VLLMDriver.artefact reads only the vocab and the artefact cache; a driver without a vLLM engine (not
    # installed here) is built around the real vocab and a real disk cache to run it.
    driver = VLLMDriver.__new__(VLLMDriver)
    driver.vocab, driver._cache = smollm2_vocab, ArtefactCache(cache_dir=tmp_path)
    artefact = driver.artefact(banned_terms=["kumquat"])
    assert [t.obfuscation for t in artefact.terms] == [effective(DEFAULT_OBFUSCATION, "kumquat")] == \
        [DEFAULT_OBFUSCATION]


def test_every_path_hands_the_compiler_the_same_lists(tmp_path):
    """The same selection reaches the compiler with one digest, so one artefact key, on every path."""
    names, terms = ["en"], ["kumquat"]
    service = with_obfuscation(select_wordlists(names, terms), Settings(data_dir=tmp_path).obfuscation)
    cli = selected_wordlists(build_parser().parse_args(["compile", "--wordlist", "en", "--banned", "kumquat"]))
    vllm = parse_guard_args({"guardrail": {"wordlists": names, "banned_terms": terms}}).selected_wordlists()
    guard = with_obfuscation(select_wordlists(names, terms), default_of(Guard.load))
    digests = {wordlist_digest(lists) for lists in (service, cli, vllm, guard)}
    assert len(digests) == 1
    assert wordlist_digest(with_obfuscation(select_wordlists(names, terms), OFF)) not in digests
