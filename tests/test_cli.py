"""The ``guardrail`` console script: compile and check print one JSON object with ``--json``."""

from __future__ import annotations

import json

from service.cli.main import main


def run_json(capsys, *argv):
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_check_reports_spans_and_exits_zero_with_or_without_matches(capsys):
    code, out = run_json(capsys, "check", "Oh FUCK  you, listen", "--wordlist", "en", "--banned", "listen,talk")
    assert code == 0
    spans = {(m["term"], m["start"], m["end"]) for m in out["matches"]}
    assert ("fuck", 3, 7) in spans and ("listen", 14, 20) in spans
    code, out = run_json(capsys, "check", "a classic assessment", "--wordlist", "en")
    assert code == 0 and out["matches"] == []


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
