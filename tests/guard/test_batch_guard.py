"""The batch-level guard step against the per-row sessions it must equal: random batches whose rows join,
leave, move, read tokens (terms completing after the fact, end ids, split UTF-8) and roll back (session rows),
checked at every step: each row's slice of the batch index, its after-the-fact hits, its tokens.

No model, no torch: SmolLM2's tokenizer for the vocab, as in test_guard_session.py.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from guardrail.guard.batch import BatchGuard, MaskRow, MaskTable, SessionRow, always_banned_ids
from guardrail.guard.session import FINISH, ROLLBACK, GuardSession, MaskSession, byte_tokens
from guardrail.matching.compiler import compile_artefact
from guardrail.wordlists.wordlist import MatchMode, Term, wordlist_from_terms

EOS = 2
WIDTH = 50  # logits columns past the vocab are padded ids: num_logits = len(vocab) + WIDTH


@pytest.fixture(scope="module")
def artefact(smollm2_vocab):
    """Word terms, a phrase and a substring term: prose from POOL completes them often."""
    terms = [Term("hello", MatchMode.WORD), Term("good morning", MatchMode.WORD), Term("cat", MatchMode.WORD),
             Term("é!", MatchMode.SUBSTRING)]
    return compile_artefact(smollm2_vocab, [wordlist_from_terms(terms, name="greetings")])


@pytest.fixture(scope="module")
def pool(smollm2_tokenizer, smollm2_vocab):
    """Token ids the rows read: words of the terms, their glue, an end id, and the bytes of "é" apart."""
    words = [" hello", "hello", " good", " morning", " cat", "cat", " the", "!", " ", "s", ",", " world"]
    ids = [smollm2_tokenizer.encode(w, add_special_tokens=False)[0] for w in words]
    singles = byte_tokens(smollm2_vocab)
    return ids + [singles[b] for b in "é".encode()] + [EOS]


def index_of(index, row):
    rows, cols, _ = index
    return np.unique(cols[rows == row])


def outcome(events):
    """The events of a finish without the wall-clock fields of their Usage."""
    done = events[-1]
    return events[:-1], done.reason, done.text, done.token_ids, done.filtered_by, done.usage.rollbacks


def reference_mask(session: MaskSession, always: np.ndarray, bans: dict, position: int) -> np.ndarray:
    parts = [session.mask_ids(), always]
    if position in bans:
        parts.append(bans[position])
    return np.unique(np.concatenate(parts))


def test_rows_in_one_state_share_its_mask_array(artefact, smollm2_vocab, tok):
    table = MaskTable.of(artefact, {EOS})
    first, second = [tok(" hello")], [tok(" hello")]
    a, b = MaskRow(table, first), MaskRow(table, second)
    a.advance(), b.advance()
    assert a.state == b.state and a.state_ids is b.state_ids  # no per-row array at steady state
    assert len(a.state_ids)  # " hello" pends on its word boundary: every non-word first character completes it
    assert MaskTable.of(artefact, {EOS}) is table  # shared by every row and request of the artefact


def test_a_batch_whose_masks_did_not_change_keeps_its_index(artefact, tok):
    table = MaskTable.of(artefact, {EOS})
    tokens = [tok(" the")]
    batch = BatchGuard()
    batch.add(3, MaskRow(table, tokens, always_banned_ids(artefact, 10, 12)))
    first = batch.step()
    assert first.rows.tolist() == [3, 3] and first.cols.tolist() == [10, 11]  # padded logits ids
    tokens.append(tok(" the"))
    assert batch.step() is first  # a new token, the same state: same arrays, same version
    tokens.append(tok(" hello"))
    moved = batch.step()
    assert moved.version != first.version and len(moved.rows) > 2


def test_two_batches_never_give_the_same_index_version(artefact, tok):
    """An engine that replaces its batch (rows joined or left) must not reuse tensors built for the old one."""
    table = MaskTable.of(artefact, {EOS})
    first, second = BatchGuard(), BatchGuard()
    first.add(0, MaskRow(table, [tok(" hello")]))
    second.add(0, MaskRow(table, [tok(" hello")]))
    assert first.step().version != second.step().version


def test_placeholder_ids_are_read_at_a_later_step(artefact, smollm2_vocab, tok):
    table = MaskTable.of(artefact, {EOS})
    tokens = [tok(" hello"), -1]  # vLLM's async scheduling: the second id is still on the device
    row = MaskRow(table, tokens)
    row.advance()
    assert row.position == 1
    tokens[1] = tok("!")
    row.advance()
    assert row.position == 2 and [h.term for h in row.missed] == ["hello"]


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_the_batch_step_gives_each_mask_only_row_what_its_session_gives(artefact, smollm2_vocab, pool, data):
    """Mask-only rows (vLLM's processor) join with a prefix (a resubmission's resumed tokens), position bans
    and ids of their own, read 0-3 ids per step, leave and move; the batch index, hits and tokens match
    :class:`MaskSession` fed the same ids."""
    vocab = smollm2_vocab
    eos = vocab.eos_ids | {EOS}
    table = MaskTable.of(artefact, eos)
    batch = BatchGuard()
    model: dict[int, tuple[MaskRow, MaskSession, list[int], np.ndarray, dict]] = {}
    slots = st.integers(0, 5)
    for _ in range(data.draw(st.integers(1, 12), label="steps")):
        for _ in range(data.draw(st.integers(0, 3), label="changes")):
            op = data.draw(st.sampled_from(["join", "leave", "move"]))
            if op == "join":
                index = data.draw(slots)
                prefix = data.draw(st.lists(st.sampled_from(pool), max_size=4))
                bans = {p: np.array(sorted(set(ids)), dtype=np.int64) for p, ids in data.draw(
                    st.dictionaries(st.integers(0, 6), st.lists(st.integers(0, 200), min_size=1, max_size=3),
                                    max_size=2)).items()}
                extra = tuple(data.draw(st.lists(st.integers(0, 200), max_size=2)))
                guarded = data.draw(st.booleans())
                always = always_banned_ids(artefact if guarded else None, len(vocab), len(vocab) + WIDTH, extra)
                tokens: list[int] = []
                row = MaskRow(table if guarded else None, tokens, always, bans=bans, prefix=prefix)
                session = MaskSession(artefact if guarded else None, vocab, eos_ids=eos)
                for token in prefix if guarded else ():
                    session.advance(token)
                batch.add(index, row)
                model[index] = (row, session, tokens, always, bans)
            elif op == "leave":
                index = data.draw(slots)
                assert (batch.remove(index) is None) == (model.pop(index, None) is None)
            else:
                source, target, swap = data.draw(slots), data.draw(slots), data.draw(st.booleans())
                batch.move(source, target, swap)
                moved, other = model.pop(source, None), model.pop(target, None)
                if moved is not None:
                    model[target] = moved
                if other is not None and swap:
                    model[source] = other
        for _, session, tokens, _, _ in model.values():
            for token in data.draw(st.lists(st.sampled_from(pool), max_size=3)):
                tokens.append(token)
                session.advance(token)
        index = batch.step()
        assert set(index.rows.tolist()) <= set(model)
        for at, (row, session, tokens, always, bans) in model.items():
            want = reference_mask(session, always, bans, len(tokens))
            assert np.array_equal(index_of(index, at), want)
            assert np.array_equal(row.mask_ids(), want)
            assert row.missed == session.missed
            assert row.token_ids == tuple(tokens)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_the_batch_index_follows_session_rows_through_rollbacks(artefact, smollm2_vocab, pool, data):
    """Rollback rows (the embedded engines: the engine drives ``accept``) beside mask-only rows: after every
    step, each session row's slice of the index is its session's :meth:`GuardSession.mask_ids` (bans of a
    rolled-back position, escalations' always-banned ids included), and the session's steps, rollbacks and
    text are those of a twin session fed the same ids without a batch."""
    vocab = smollm2_vocab
    eos = vocab.eos_ids | {EOS}
    batch = BatchGuard()
    rows: dict[int, tuple[GuardSession, GuardSession]] = {}
    for index in range(data.draw(st.integers(1, 4), label="rows")):
        kwargs = {"eos_ids": eos, "max_tokens": 12, "num_logits": len(vocab) + WIDTH}
        driven, twin = GuardSession(artefact, vocab, **kwargs), GuardSession(artefact, vocab, **kwargs)
        batch.add(index, SessionRow(driven))
        rows[index] = (driven, twin)
    mask_tokens: list[int] = []
    batch.add(9, MaskRow(MaskTable.of(artefact, eos), mask_tokens))
    for _ in range(data.draw(st.integers(1, 20), label="steps")):
        for index, (driven, twin) in list(rows.items()):
            token = data.draw(st.sampled_from(pool))
            step = driven.accept(token)
            assert step == twin.accept(token)
            if step.kind == ROLLBACK:
                event("a session row rolled back")
            if step.kind == FINISH:
                assert outcome(driven.finish(step.finish_reason)) == outcome(twin.finish(step.finish_reason))
                batch.remove(index)
                del rows[index]
        mask_tokens.append(data.draw(st.sampled_from(pool)))
        index = batch.step()
        for at, (driven, twin) in rows.items():
            assert np.array_equal(index_of(index, at), np.unique(twin.mask_ids()))
            assert driven.text.text == twin.text.text
        if not rows:
            break
