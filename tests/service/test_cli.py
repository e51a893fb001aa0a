"""The ``guardrail`` console script: compile and check print one JSON object with ``--json``."""

from __future__ import annotations

import argparse
import io
import json

import pytest
from helpers.wait import wait_until

from guardrail.models import progress
from service.cli.main import build_parser, main


def run_json(capsys, *argv):
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_check_reports_spans_and_exits_1_with_matches_0_without(capsys):
    code, out = run_json(capsys, "check", "Oh FUCK  you, listen", "--wordlist", "en", "--banned", "listen,talk")
    assert code == 1
    spans = {(m["term"], m["start"], m["end"]) for m in out["matches"]}
    assert ("fuck", 3, 7) in spans and ("listen", 14, 20) in spans
    code, out = run_json(capsys, "check", "a classic assessment", "--wordlist", "en")
    assert code == 0 and out["matches"] == []


def test_banned_regex_terms_keep_their_commas_and_bad_ones_are_a_clear_error(capsys):
    code, out = run_json(capsys, "check", "I am S0RRY, so sorry", "--wordlist", "en", "--banned", "talk,re:s[o0]r{1,2}y")
    assert code == 1
    assert [(m["term"], m["text"]) for m in out["matches"]] == [("re:s[o0]r{1,2}y", "S0RRY"), ("re:s[o0]r{1,2}y", "sorry")]
    assert main(["check", "x", "--wordlist", "en", "--banned", "re:so+rry"]) == 2
    error = capsys.readouterr().err
    assert "'re:so+rry'" in error and "unbounded repetition" in error


@pytest.mark.slow  # two full compiles of en x SmolLM2's vocab
def test_compile_reports_cache_layers(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("GUARDRAIL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("GUARDRAIL_REDIS_URL", raising=False)
    code, first = run_json(capsys, "compile", "--model", "smollm2", "--wordlist", "en", "--banned", "sorry")
    assert code == 0 and first["cache_layer"] == "none"
    assert first["terms"] > 400 and first["vocab_size"] == 49152 and first["automaton_states"] > 1000
    code, second = run_json(capsys, "compile", "--model", "smollm2", "--wordlist", "en", "--banned", "sorry")
    assert second["cache_layer"] == "disk"


def test_unknown_list_is_a_clear_error(capsys):
    assert main(["check", "x", "--wordlist", "nosuchlist"]) == 2
    assert "nosuchlist" in capsys.readouterr().err


def test_check_exits_1_on_a_match_and_0_without_like_grep(capsys):
    assert main(["check", "Oh FUCK you", "--wordlist", "en"]) == 1
    assert main(["check", "a classic assessment", "--wordlist", "en"]) == 0


def test_check_reads_standard_input_when_no_text_is_given(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("first line\nthen a shitty one\n"))
    code, out = run_json(capsys, "check", "--wordlist", "en")
    assert code == 1 and [m["text"] for m in out["matches"]] == ["shitty"]
    assert out["matches"][0]["start"] == len("first line\nthen a ")


def test_version_prints_the_package_version(capsys):
    import guardrail

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"guardrail {guardrail.__version__}"


def subcommand_parsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {"guardrail": parser, **actions[0].choices}


@pytest.mark.parametrize("command", ["guardrail", "compile", "check", "generate", "serve"])
def test_every_flag_has_help_and_shows_its_default(command):
    parser = subcommand_parsers()[command]
    required = {a for group in parser._mutually_exclusive_groups if group.required for a in group._group_actions}
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
            continue
        name = action.option_strings[0] if action.option_strings else action.dest
        assert action.help, f"{command} {name} has no help"
        shown = parser.formatter_class(command)._get_help_string(action) % {"default": action.default}
        if isinstance(action, argparse._StoreTrueAction) or action in required:
            continue  # a switch (off unless given), or one of a choice the user must make
        assert "default" in shown, f"{command} {name}: no default in {shown!r}"


def test_progress_shows_a_ticking_line_on_a_terminal_only(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    with progress("converting a model", refresh_s=0.05):
        # The line drawn at the start, then ticking: redrawn at least twice while the work goes on.
        wait_until(lambda: terminal.getvalue().count("guardrail: converting a model: 00:") >= 3, 30,
                   "the progress line ticking", interval_s=0.01)
    assert "guardrail: converting a model: 00:00" in terminal.getvalue()
    piped = io.StringIO()
    monkeypatch.setattr("sys.stderr", piped)
    with progress("converting a model", refresh_s=0.05):
        pass  # nothing to wait for: a line would be drawn at once (and again when it closes)
    assert piped.getvalue() == ""
