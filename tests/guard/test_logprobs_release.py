"""The release rule of logprobs (guardrail/guard/logprobs.py, docs/design.md "Logprobs: the release rule"):
which token records go out with which text, driven by hand on the real guard session (SmolLM2's tokenizer
for the vocab; no model: the picks' logprobs are made-up numbers, each token's own id as a marker)."""

from __future__ import annotations

import pytest

from guardrail.guard.events import Finish, Rollback, TextDelta
from guardrail.guard.holdback import TextBuffer
from guardrail.guard.logprobs import LogprobLedger, PickLogprobs
from guardrail.guard.session import KEEP, ROLLBACK, GuardSession
from guardrail.matching.compiler import compile_artefact
from guardrail.wordlists.wordlist import MatchMode, Term, wordlist_from_terms


@pytest.fixture(scope="module")
def hello(smollm2_vocab):
    return compile_artefact(smollm2_vocab, [wordlist_from_terms(["hello", "good morning"], name="greetings")])


def pick(token_id: int) -> PickLogprobs:
    """A pick whose logprob names its token (-token_id / 1000), to check which record is which."""
    return PickLogprobs(-token_id / 1000, ((token_id, -token_id / 1000),))


def session(artefact, vocab, **kwargs) -> GuardSession:
    return GuardSession(artefact, vocab, eos_ids=vocab.eos_ids | {2}, logprobs=True, **kwargs)


def feed(s: GuardSession, ids: list[int]) -> list:
    events: list = []
    for token_id in ids:
        step = s.accept(token_id, pick(token_id))
        events.extend(step.events)
        if step.kind not in (KEEP, ROLLBACK):
            break
    return events


def records(events):
    return [r for e in events if isinstance(e, TextDelta) for r in e.logprobs]


def text(events):
    return "".join(e.text for e in events if isinstance(e, TextDelta))


# -- the ledger alone: bytes to records -------------------------------------------------------------------------


def ledger_over(token_bytes: list[bytes]) -> tuple[LogprobLedger, TextBuffer]:
    ledger, buffer = LogprobLedger(token_bytes), TextBuffer(token_bytes)
    for token_id in range(len(token_bytes)):
        buffer.append(token_id)
        ledger.keep(PickLogprobs(-float(token_id)))
    return ledger, buffer


def test_a_character_split_across_tokens_belongs_to_the_token_that_completes_it():
    euro = "€".encode()  # 3 bytes
    ledger, buffer = ledger_over([b"a" + euro[:1], euro[1:2], euro[2:] + b"b"])
    out = ledger.release(range(3), buffer.ends, buffer.data, 3)
    assert [r.token for r in out] == ["a", "", "€b"]
    assert [r.bytes for r in out] == [b"a" + euro[:1], euro[1:2], euro[2:] + b"b"]
    assert "".join(r.token for r in out) == bytes(buffer.data).decode()


def test_records_are_released_once_in_order_and_never_past_the_count():
    ledger, buffer = ledger_over([b"x", b"y", b"z"])
    assert [r.logprob for r in ledger.release(range(3), buffer.ends, buffer.data, 2)] == [0.0, -1.0]
    assert ledger.release(range(3), buffer.ends, buffer.data, 2) == ()
    assert [r.token for r in ledger.release(range(3), buffer.ends, buffer.data, 3)] == ["z"]
    with pytest.raises(RuntimeError, match="retract released logprobs"):
        ledger.truncate(2)


def test_at_the_end_a_token_cut_by_a_stop_string_keeps_only_its_bytes_before_the_cut():
    ledger, buffer = ledger_over([b"one", b" two.", b"STOP"])
    out = ledger.finish(range(3), buffer.ends, buffer.data, cut=len(b"one two"))
    assert [(r.token, r.bytes) for r in out] == [("one", b"one"), (" two", b" two")]


def test_at_the_end_a_dangling_partial_character_is_written_as_the_answer_writes_it():
    ledger, buffer = ledger_over([b"a", "é".encode()[:1]])
    out = ledger.finish(range(2), buffer.ends, buffer.data, cut=2)
    assert "".join(r.token for r in out) == bytes(buffer.data).decode("utf-8", "replace") == "a\ufffd"


# -- the session: records follow the released text ---------------------------------------------------------------


def test_a_held_back_token_gets_its_record_with_the_delta_that_releases_its_text(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab)
    first = feed(s, [tok(" hi")])
    assert (text(first), [r.token for r in records(first)]) == (" hi", [" hi"])
    assert feed(s, [tok(" good")]) == []  # " good" may begin "good morning": held back, no record yet
    released = feed(s, [tok(" day")])
    assert (text(released), [r.token for r in records(released)]) == (" good day", [" good", " day"])
    assert [r.logprob for r in records(released)] == [-tok(" good") / 1000, -tok(" day") / 1000]


def test_a_rolled_back_token_never_gets_a_record_and_the_records_spell_the_answer(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab)
    events = feed(s, [tok(" hi"), tok(" hello"), tok(" world")])  # " world" completes "hello": back to 1
    assert any(isinstance(e, Rollback) for e in events)
    events += feed(s, [tok(" there"), tok("!")])
    events += s.finish("stop")
    finish = events[-1]
    assert isinstance(finish, Finish)
    delivered = records(events)
    assert [r.token_id for r in delivered] == list(finish.token_ids)
    assert tok(" hello") not in [r.token_id for r in delivered]
    assert "".join(r.token for r in delivered) == finish.text == " hi there!"
    assert all(r.top[0].token_id == r.token_id for r in delivered)  # each record kept its own pick


def test_a_stop_string_inside_a_token_cuts_its_record_and_drops_the_tokens_after_it(smollm2_vocab, tok):
    s = GuardSession(None, smollm2_vocab, eos_ids={2}, stop=["wor"], logprobs=True)
    events = feed(s, [tok(" hi"), tok(" world")])
    events += s.finish("stop")
    assert [(r.token, r.bytes) for r in records(events)] == [(" hi", b" hi"), (" ", b" ")]
    assert "".join(r.token for r in records(events)) == events[-1].text == " hi "


def test_a_session_that_reports_logprobs_needs_every_picks_logprobs(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab)
    with pytest.raises(ValueError, match="PickLogprobs"):
        s.accept(tok(" hi"))


def test_without_logprobs_asked_no_delta_carries_records(hello, smollm2_vocab, tok):
    s = GuardSession(hello, smollm2_vocab, eos_ids={2})
    events = [e for t in (" hi", " there") for e in s.accept(tok(t), pick(tok(t))).events] + list(s.finish("stop"))
    assert text(events) == " hi there"
    assert records(events) == [] and not s.wants_logprobs


def test_alternatives_that_would_show_a_term_after_the_kept_text_are_left_out(hello, smollm2_vocab, tok):
    s = session(hello, smollm2_vocab)
    feed(s, [tok(" good")])
    candidates = [(tok(t), -float(i)) for i, t in enumerate([" morning", " day", " hello", " hi", " world"])]
    # " good morning" (the phrase, ending there) and " hello" (a word at the end of the text) are terms.
    assert s.shown_alternatives(candidates, 2) == ((tok(" day"), -1.0), (tok(" hi"), -3.0))
    assert s.shown_alternatives(candidates, 5) == ((tok(" day"), -1.0), (tok(" hi"), -3.0), (tok(" world"), -4.0))
    assert s.accept(tok(" day"), pick(tok(" day"))).kind == KEEP  # the probes left the matcher as it was


def test_padded_and_always_banned_ids_are_never_alternatives(smollm2_vocab, tok):
    artefact = compile_artefact(smollm2_vocab, [wordlist_from_terms([Term("ell", MatchMode.SUBSTRING)])])
    s = GuardSession(artefact, smollm2_vocab, eos_ids={2}, num_logits=len(smollm2_vocab) + 8, logprobs=True)
    padded = len(smollm2_vocab) + 3
    assert s.shown_alternatives([(padded, 0.0), (tok(" hello"), -1.0), (tok(" hi"), -2.0), (2, -3.0)], 5) == (
        (tok(" hi"), -2.0), (2, -3.0))


def test_the_gateway_refuses_logprobs_naming_the_field():
    from guardrail.engines.base import check_request
    from guardrail.engines.remote.engine import UNSUPPORTED
    from guardrail.params import SamplingParams

    with pytest.raises(ValueError, match=r"^logprobs: not supported on the remote engine"):
        check_request([1, 2], SamplingParams(logprobs=0), num_logits=10, max_model_len=100, unsupported=UNSUPPORTED,
                      engine="remote engine")
    assert check_request([1, 2], SamplingParams(), num_logits=10, max_model_len=100, unsupported=UNSUPPORTED,
                         engine="remote engine") == [1, 2]
