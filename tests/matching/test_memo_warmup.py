"""Warming an artefact's memo from the bundled corpus (guardrail/matching/memo_warmup.py): the greedy tokens spell
the corpus, warming computes every pair once, changes no result, and the corpus is innocent prose."""

from __future__ import annotations

import collections

import pytest

from guardrail.matching.artefact import ROOT_STATE, Artefact, DenseRow
from guardrail.matching.combined import CombinedArtefact
from guardrail.matching.compiler import compile_artefact, compile_request_artefact
from guardrail.matching.memo_warmup import CORPUS_PATH, GreedyTokenizer, paragraphs, warm_memo
from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION, Obfuscation
from guardrail.matching.textmatch import TextMatcher
from guardrail.matching.token_matcher import TokenMatcher
from guardrail.wordlists.wordlist import bundled_wordlist, with_obfuscation, wordlist_from_terms

CORPUS = CORPUS_PATH.read_text(encoding="utf-8")
LEVELS = [Obfuscation.parse("off"), DEFAULT_OBFUSCATION]
# Text the corpus does not hold, with terms the model might write (hits, rollbacks, allow-terms, split words).
OTHER = ("Honestly, what the fuck is this? I cannot assess the bass of Scunthorpe. Sh!t happens, "
         "said the f u c k i n g parrot.\n\nNo problem: here is a list.\n- one\n- two ass\n\nDas ist Scheiße. ")


@pytest.fixture(scope="module", params=LEVELS, ids=str)
def en_artefact(request, smollm2_vocab) -> Artefact:
    return compile_artefact(smollm2_vocab, with_obfuscation([bundled_wordlist("en")], request.param))


@pytest.mark.parametrize("vocab", ["smollm2_vocab", "gemma3_vocab"])
def test_greedy_tokens_spell_the_corpus(vocab, request):
    vocab = request.getfixturevalue(vocab)
    tokenizer = GreedyTokenizer(vocab)
    chunks = paragraphs(CORPUS)
    assert "".join(chunks) == CORPUS and len(chunks) > 50
    for chunk in chunks:
        ids = tokenizer.encode(chunk)
        assert b"".join(vocab.token_bytes[i] for i in ids) == chunk.encode(), chunk
        assert not vocab.special_ids.intersection(ids)


def test_paragraphs_end_after_their_blank_lines_and_keep_the_next_ones_indentation():
    assert paragraphs("Intro:\n\n    code()\n \t\n\nEnd.\nMore.") == ["Intro:\n\n", "    code()\n \t\n\n", "End.\nMore."]
    assert paragraphs("") == []


def test_greedy_tokens_take_a_piece_over_gemmas_byte_fallback(gemma3_vocab, gemma3_tokenizer):
    """Gemma 3 spells each ASCII byte twice (``<0x21>`` and ``!``): the model's tokenizer writes the piece, and
    so does the greedy tokenizer (every duplicate the model's tokenizer writes as one token)."""
    ids_of = collections.defaultdict(list)
    for token_id, data in enumerate(gemma3_vocab.token_bytes):
        ids_of[data].append(token_id)
    tokenizer = GreedyTokenizer(gemma3_vocab)
    checked = 0
    for data, ids in ids_of.items():
        if len(ids) < 2 or not data:
            continue
        try:
            text = data.decode()
        except UnicodeDecodeError:
            continue
        model = gemma3_tokenizer.encode(text, add_special_tokens=False)
        if len(model) == 1:
            checked += 1
            assert tokenizer.encode(text) == model, (text, ids)
    assert checked > 90  # "\n", " ", "!", ... (109 of Gemma 3's 110 duplicates decode alone)


def test_greedy_tokens_drop_a_byte_the_vocab_cannot_spell(smollm2_vocab):
    assert not any(data == b"\x04" for data in smollm2_vocab.token_bytes)
    ids = GreedyTokenizer(smollm2_vocab).encode("a\x04b")
    assert b"".join(smollm2_vocab.token_bytes[i] for i in ids) == b"ab"


def test_a_second_warm_up_computes_no_pair(en_artefact):
    fresh = Artefact(table=en_artefact.table)
    first = warm_memo(fresh)
    tokens = sum(len(GreedyTokenizer(fresh.vocab).encode(chunk)) for chunk in paragraphs(CORPUS))
    assert first.tokens == tokens and first.paragraphs == len(paragraphs(CORPUS))
    assert 0 < first.pairs <= first.tokens
    second = warm_memo(fresh)
    assert (second.tokens, second.pairs, second.hits) == (first.tokens, 0, 0)


def test_a_combined_artefact_is_warmed_too(smollm2_vocab):
    stored = [bundled_wordlist("en")]
    combined = CombinedArtefact(compile_artefact(smollm2_vocab, stored),
                                compile_request_artefact(smollm2_vocab, [wordlist_from_terms(["lighthouse"])], stored))
    first = warm_memo(combined)
    assert first.pairs > 0 and first.hits > 0  # the corpus' lighthouse story holds the request's term
    assert warm_memo(combined).pairs == 0


def steps(artefact, ids: list[int]) -> list[tuple]:
    """What pushing ``ids`` does, independent of state numbering (warming interns states in another order):
    per token the hit or the transition's symbols, leads and next stream states, and the releasable count."""
    matcher, seen = TokenMatcher(artefact), []
    for token_id in ids:
        transition = artefact.transition(matcher.state, token_id)
        hit = matcher.push(token_id)
        if hit is not None:
            seen.append(("hit", hit.term, hit.start_token, hit.first_token, hit.depth))
            matcher.rollback_to(hit.start_token)
            continue
        seen.append((transition.symbols, transition.lead, artefact.stream_states(transition.state),
                     matcher.releasable()))
    end = matcher.finish()
    seen.append(None if end is None else (end.term, end.start_token))
    return seen


def test_warming_changes_no_result(en_artefact, smollm2_tokenizer):
    texts = [OTHER, CORPUS[:2000], OTHER.upper()]
    sequences = [smollm2_tokenizer.encode(text, add_special_tokens=False) for text in texts]
    fresh = [steps(Artefact(table=en_artefact.table), ids) for ids in sequences]
    warmed = Artefact(table=en_artefact.table)
    warm_memo(warmed)
    assert [steps(warmed, ids) for ids in sequences] == fresh
    assert any(step[0] == "hit" for step in fresh[0] if step)  # the text does reach the rollback path


def test_a_hit_in_the_corpus_is_rolled_back_and_skipped(smollm2_vocab):
    artefact = compile_artefact(smollm2_vocab, [bundled_wordlist("en")])
    stats = warm_memo(artefact, corpus="Oh fuck, the fucking printer.\n\nA nice day.\n")
    assert stats.hits == 2 and stats.paragraphs == 2
    assert stats.tokens == len(GreedyTokenizer(smollm2_vocab).encode("Oh fuck, the fucking printer.\n\nA nice day.\n"))


def test_max_tokens_bounds_the_tokens_pushed(en_artefact):
    assert warm_memo(Artefact(table=en_artefact.table), max_tokens=100).tokens == 100
    assert warm_memo(Artefact(table=en_artefact.table), max_tokens=0).pairs == 0
    with pytest.raises(ValueError, match="max_tokens"):
        warm_memo(en_artefact, max_tokens=-1)


def test_the_corpus_holds_no_banned_term_of_en(en_artefact):
    """The warm-up is about innocent prose: no term of ``en`` on the text (the contract) nor on the tokens."""
    assert TextMatcher([bundled_wordlist("en")], DEFAULT_OBFUSCATION).scan(CORPUS) == []
    assert warm_memo(Artefact(table=en_artefact.table)).hits == 0


def test_memoised_tells_a_visited_pair_from_a_new_one(en_artefact):
    artefact = Artefact(table=en_artefact.table)
    matcher = TokenMatcher(artefact)
    assert matcher.state == ROOT_STATE
    for token_id in GreedyTokenizer(artefact.vocab).encode("Hello there, friend"):
        assert not artefact.memoised(matcher.state, token_id)
        artefact.transition(matcher.state, token_id)
        assert artefact.memoised(matcher.state, token_id)
        assert matcher.push(token_id) is None


def _same_transition(one: Artefact, two: Artefact, state_one: int, state_two: int, token_id: int) -> None:
    a, b = one.transition(state_one, token_id), two.transition(state_two, token_id)
    assert (a.hits, a.symbols, a.lead, a.quiet) == (b.hits, b.symbols, b.lead, b.quiet), token_id
    assert one.stream_states(a.state) == two.stream_states(b.state), token_id


def test_memo_filled_in_bulk_is_what_each_token_computes(smollm2_vocab):
    """Every token of the vocab from each state a sweep reads the vocab from (the text start, after a word
    character, after a space): the bulk fill gives the transition a fresh artefact computes on that pair's first
    visit (level ``off``: only plain streams)."""
    lists = with_obfuscation([bundled_wordlist("en")], Obfuscation.parse("off"))
    filled, fresh = compile_artefact(smollm2_vocab, lists), compile_artefact(smollm2_vocab, lists)
    matcher = TokenMatcher(filled)
    for token_id in GreedyTokenizer(smollm2_vocab).encode("Hello there,  world"):  # reach the other quiet states
        assert matcher.push(token_id) is None
    states = filled.sweepable_states()
    flags = {(s.prev_word, s.prev_space) for state in states for s in filled.stream_states(state)}
    assert flags == {(False, False), (True, False), (False, True)}
    for state in states:
        added = filled.fill_memo([state])
        assert added > len(smollm2_vocab.token_bytes) // 2  # most transitions from a quiet state are exact
        assert filled.fill_memo([state]) == 0  # all memoised already
        twin = fresh._intern(filled._states[state])  # the same state in the fresh artefact
        for token_id in range(len(smollm2_vocab.token_bytes)):
            _same_transition(filled, fresh, state, twin, token_id)


def test_memo_fill_adds_nothing_where_no_sweep_reads_the_vocab(smollm2_vocab):
    """At the default level an obfuscation stream is not swept: no transition is exact, nothing is filled."""
    artefact = compile_artefact(smollm2_vocab, with_obfuscation([bundled_wordlist("en")], DEFAULT_OBFUSCATION))
    assert artefact.sweepable_states() == [ROOT_STATE]
    assert artefact.fill_memo([ROOT_STATE]) == 0
    assert not artefact.memoised(ROOT_STATE, 100)


def test_a_filled_state_keeps_a_dense_row_that_the_memo_bound_never_clears(smollm2_vocab):
    """A swept state's row holds a slot per token id: holes (tokens the sweep leaves to the first visit) are
    computed into it, outside the memo count, and clearing the memo (its bound) leaves the row as it was."""
    artefact = compile_artefact(smollm2_vocab, with_obfuscation([bundled_wordlist("en")], Obfuscation.parse("off")))
    matcher = TokenMatcher(artefact)
    for token_id in GreedyTokenizer(smollm2_vocab).encode("Hello there"):
        assert matcher.push(token_id) is None
    state = next(s for s in artefact.sweepable_states() if s != ROOT_STATE)
    assert not isinstance(artefact.memo_rows[state], DenseRow)
    assert artefact.fill_memo([state]) > 0
    row = artefact.memo_rows[state]
    assert isinstance(row, DenseRow) and len(row) == len(smollm2_vocab.token_bytes)
    hole = next(token_id for token_id, transition in enumerate(row) if transition is None)
    assert not artefact.memoised(state, hole) and artefact.memoised(state, 100)
    size = artefact._memo_size
    computed = artefact.transition(state, hole)
    assert row[hole] is computed and artefact.memoised(state, hole) and artefact._memo_size == size
    artefact._forget()
    assert artefact.memo_rows[state] is row and row[hole] is computed
    assert artefact._memo_size == len(artefact.memo_rows[ROOT_STATE])  # the root row (a dict here) stays too
