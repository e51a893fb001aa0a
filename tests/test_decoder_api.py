"""The public Python API (``Guard``) and the ``guardrail generate`` command, on SmolLM2."""

import json

import pytest

from guardrail.api import Completion, Guard
from guardrail.engines.transformers.decoder import generation_eos_ids
from guardrail.guard.events import Finish, Rollback, TextDelta
from guardrail.matching.compiler import compile_artefact
from guardrail.matching.textmatch import TextMatcher
from guardrail.matching.vocab import TokenVocab
from guardrail.wordlists.wordlist import wordlist_from_terms
from service.cli.main import main

pytestmark = pytest.mark.slow

SORRY = [{"role": "user", "content": "Repeat after me: I am sorry."}]


@pytest.fixture(scope="module")
def guard(smollm2_model, smollm2_tokenizer):
    vocab = TokenVocab.from_tokenizer(smollm2_tokenizer, eos_ids=generation_eos_ids(smollm2_model))
    lists = [wordlist_from_terms(["sorry"])]
    return Guard(smollm2_model, smollm2_tokenizer, vocab, lists, compile_artefact(vocab, lists))


def test_generate_returns_the_whole_guarded_completion(guard):
    done = guard.generate(messages=SORRY, temperature=0, max_tokens=12)
    assert isinstance(done, Completion)
    assert guard.check(done.text) == []
    assert done.rollbacks and all(isinstance(r, Rollback) for r in done.rollbacks)
    assert done.usage.rollbacks == len(done.rollbacks)
    assert done.finish_reason in ("stop", "length")


def test_stream_yields_deltas_then_one_finish(guard):
    events = list(guard.stream(messages=SORRY, temperature=0, max_tokens=12))
    assert isinstance(events[-1], Finish)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == events[-1].text


def test_bad_parameters_are_rejected_before_generating(guard):
    with pytest.raises(ValueError, match="max_new_tokens"):
        guard.generate(messages=SORRY, max_new_tokens=3)
    with pytest.raises(ValueError, match="top_p"):
        guard.generate(messages=SORRY, top_p=2.0)
    with pytest.raises(ValueError, match="exactly one"):
        guard.generate()


def test_cli_generate_prints_one_json_object(capsys):
    code = main(["generate", "--model", "smollm2", "--wordlist", "en", "--banned", "sorry",
                 "--chat", SORRY[0]["content"], "--temperature", "0", "--max-tokens", "12", "--json"])
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    assert set(payload) == {"text", "finish_reason", "usage", "rollbacks"}
    assert TextMatcher([wordlist_from_terms(["sorry"])]).scan(payload["text"]) == []
    assert payload["rollbacks"] and payload["usage"]["rollbacks"] == len(payload["rollbacks"])
    assert {"position", "list_name", "tokens_discarded"} <= set(payload["rollbacks"][0])


def test_cli_generate_streams_text(capsys):
    code = main(["generate", "--banned", "sorry", "--chat", SORRY[0]["content"], "--temperature", "0",
                 "--max-tokens", "8", "--stream", "--logit-bias", "0:-100"])
    assert code == 0
    captured = capsys.readouterr()
    assert captured.out.strip() and "finish_reason=" in captured.err


def test_cli_rejects_a_malformed_logit_bias(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--chat", "hi", "--logit-bias", "12"])
    assert "--logit-bias" in capsys.readouterr().err


def test_from_model_runs_the_rollback_decoder_on_an_already_loaded_model(smollm2_model, smollm2_tokenizer,
                                                                         tmp_path):
    guard = Guard.from_model(smollm2_model, smollm2_tokenizer, wordlists=(), banned_terms=("sorry",),
                             cache_dir=tmp_path)
    assert guard.model is smollm2_model and guard.artefact is not None
    done = guard.generate(messages=SORRY, temperature=0, max_tokens=12)
    assert guard.check(done.text) == []
    assert done.rollbacks  # the model does say "sorry": the decoder rolled it back


def test_from_model_rejects_what_is_not_a_model_in_eval_mode(smollm2_model, smollm2_tokenizer):
    with pytest.raises(ValueError, match="model"):
        Guard.from_model(object(), smollm2_tokenizer, banned_terms=("sorry",))
    smollm2_model.train()
    try:
        with pytest.raises(ValueError, match="eval"):
            Guard.from_model(smollm2_model, smollm2_tokenizer, banned_terms=("sorry",))
    finally:
        smollm2_model.eval()
