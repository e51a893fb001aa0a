"""Regex terms in the token automaton, on the real tokenizers of both bundled models: for random patterns of
the supported subset and random tokenizations of random texts, the automaton reports exactly the matches
Python's ``re`` finds over the normalised text (one per end position, from the earliest start), whether the
terms are compiled with a vocab sweep, as request terms without one, or combined with a stored list; every
split and casing of a matching text is caught where the match began, split UTF-8 included; hold-back never
releases a token a regex match can still claim."""

from __future__ import annotations

import collections
import random
import re
from re import _constants as sre  # type: ignore[attr-defined]

import pytest
from helpers.regex_oracle import ReferenceRegex, patterns
from helpers.tokens import byte_start_of_token, encode, encode_split, first_hit, hits_after_hold_back
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from guardrail.matching.artefact import ROOT_STATE
from guardrail.matching.combined import CombinedArtefact
from guardrail.matching.compiler import compile_artefact, compile_request_artefact
from guardrail.matching.normalize import normalize, normalize_with_offsets
from guardrail.matching.obfuscation import OFF  # the artefacts here compile the lists as they are
from guardrail.matching.regex.term import normalize_pattern
from guardrail.matching.textmatch import TextMatcher
from guardrail.matching.token_matcher import TokenMatcher
from guardrail.wordlists.regex_syntax import RegexError, parse_regex
from guardrail.wordlists.wordlist import MatchMode, Term, WordList, WordListError, bundled_wordlist

# Out of the quick loop (make test-fast): property searches over both vocabs (~40 s); make test runs it.
pytestmark = pytest.mark.slow

TOKENIZERS = ["smollm2", "gemma3"]


@pytest.fixture(scope="module", params=TOKENIZERS)
def model(request):
    tokenizer = request.getfixturevalue(f"{request.param}_tokenizer")
    vocab = request.getfixturevalue(f"{request.param}_vocab")
    return tokenizer, vocab, compile_artefact(vocab, [bundled_wordlist("en")])


def compiled(vocab, stored_en, regex_list, how):
    if how == "request":
        return compile_request_artefact(vocab, [regex_list])
    if how == "combined":  # the stored English list swept and cached, the regex terms as a request's
        return CombinedArtefact(stored_en, compile_request_artefact(vocab, [regex_list], [bundled_wordlist("en")]))
    return compile_artefact(vocab, [regex_list])


def reported(artefact, ids):
    """Follow every token (never stopping at a hit): the regex hits as ``(term text, start)``, start in
    normalised characters of the whole text (the regex streams count normalised characters)."""
    state, found = ROOT_STATE, []
    cumulative = [0] * len(artefact.automata)

    def take(transition):
        for term_id, stream, start in transition.hits:
            spec = artefact.terms[term_id]
            if spec.regex:
                found.append((spec.text, cumulative[stream] + start))
        for stream, count in enumerate(transition.symbols):
            cumulative[stream] += count

    for token in ids:
        transition = artefact.transition(state, token)
        take(transition)
        state = transition.state
    take(artefact.finish(state))
    return collections.Counter(found)


def expected(terms, text):
    """The oracle: per regex term, one ``(term text, earliest start)`` per end position (Python ``re``)."""
    found = []
    for spec in terms:
        if spec.regex:
            norm = normalize(text, spec.case_sensitive)
            found += [(spec.text, start) for start, _ in ReferenceRegex(spec.normalized, spec.match).spans(norm)]
    return collections.Counter(found)


def sample_match(items, rng):
    """A random string the parse tree ``items`` of a rewritten pattern spells (assertions ignored: the text
    may then not match, which the reference decides)."""
    out = []
    for op, av in items:
        if op is sre.LITERAL:
            out.append(chr(av))
        elif op is sre.NOT_LITERAL:
            out.append(rng.choice([c for c in "xé- 1" if ord(c) != av]))
        elif op is sre.ANY:
            out.append(rng.choice("aé -1傻"))
        elif op is sre.IN:
            candidates = [c for c in "abcxyzABC01é ß-_.傻" if re.fullmatch(_class(av), c)]
            out.append(rng.choice(candidates or ["?"]))
        elif op is sre.BRANCH:
            out.append(sample_match(list(rng.choice(av[1])), rng))
        elif op is sre.SUBPATTERN:
            out.append(sample_match(list(av[3]), rng))
        elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            out += [sample_match(list(av[2]), rng) for _ in range(rng.randint(av[0], av[1]))]
    return "".join(out)


def _class(items):
    """Rebuild a class's pattern from its parse items (enough for the members the tests use)."""
    body, negate = [], False
    escapes = {sre.CATEGORY_WORD: r"\w", sre.CATEGORY_NOT_WORD: r"\W", sre.CATEGORY_DIGIT: r"\d",
               sre.CATEGORY_NOT_DIGIT: r"\D", sre.CATEGORY_SPACE: r"\s", sre.CATEGORY_NOT_SPACE: r"\S"}
    for op, av in items:
        if op is sre.NEGATE:
            negate = True
        elif op is sre.LITERAL:
            body.append(re.escape(chr(av)))
        elif op is sre.RANGE:
            body.append(f"{re.escape(chr(av[0]))}-{re.escape(chr(av[1]))}")
        elif op is sre.CATEGORY:
            body.append(escapes[av])
    return "[" + ("^" if negate else "") + "".join(body) + "]"


FILLER = ["a", "b", "A", " ", "  ", "-", "1", "é", "ß", "x", "\u200b", "\t", "傻", ".", "ab", " sorry", "SS"]


@st.composite
def regex_cases(draw):
    """1-2 regex terms (random pattern, mode, case rule) and a text holding a sample match of each."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    terms, pieces = [], []
    for _ in range(draw(st.integers(1, 2))):
        pattern, case_sensitive = draw(patterns()), draw(st.booleans())
        try:
            normalized = normalize_pattern(pattern, case_sensitive)
        except RegexError:
            assume(False)
        terms.append(Term(pattern, draw(st.sampled_from(list(MatchMode))), case_sensitive, regex=True))
        pieces.append(sample_match(parse_regex(normalized), rng))
    filler = st.lists(st.sampled_from(FILLER), max_size=3).map("".join)
    text = draw(filler) + "".join(piece + draw(filler) for piece in pieces)
    if draw(st.booleans()):
        text = text.upper()
    return WordList("rx", tuple(dict.fromkeys(terms))), text


@pytest.mark.parametrize("how", ["request", "combined"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(case=regex_cases(), data=st.data())
def test_automaton_reports_what_python_re_finds_on_random_tokenizations(model, how, case, data):
    tokenizer, vocab, stored_en = model
    regex_list, text = case
    try:
        artefact = compiled(vocab, stored_en, regex_list, how)
    except WordListError as exc:  # the documented refusal of patterns with exponential automata
        assert "automaton states" in str(exc)
        assume(False)
    cuts = data.draw(st.lists(st.integers(0, max(len(text), 1)), max_size=6))
    ids = encode_split(tokenizer, text, cuts)
    assert b"".join(vocab.token_bytes[t] for t in ids).decode("utf-8", "replace") == text
    found = reported(artefact, ids)
    event(f"regex matches: {'some' if found else 'none'}")  # --hypothesis-show-statistics: ~3/4 have some
    assert found == expected(artefact.terms, text)
    # Where the matcher rolls back: the token holding the first byte of the earliest start among the
    # matches the first hitting token reports.
    index, hit = first_hit(artefact, ids)
    if hit is None:
        assert not expected(artefact.terms, text)
        return
    state, prefix = ROOT_STATE, ids[:index]
    for token in prefix:
        state = artefact.transition(state, token).state
    transition = artefact.transition(state, ids[index]) if index < len(ids) else artefact.finish(state)
    prefix_symbols = [0] * len(artefact.automata)
    walk = ROOT_STATE
    for token in prefix:
        step = artefact.transition(walk, token)
        prefix_symbols = [a + b for a, b in zip(prefix_symbols, step.symbols)]
        walk = step.state
    starts_in_bytes = []
    for term_id, stream, start in transition.hits:
        spec = artefact.terms[term_id]
        if not spec.regex:
            return  # a plain term of the stored list hit first: covered by test_compiler_tokens
        norm, offsets = normalize_with_offsets(text, spec.case_sensitive)
        char = offsets[prefix_symbols[stream] + start]
        starts_in_bytes.append(len(text[:char].encode()))
    first_byte = min(starts_in_bytes)
    assert byte_start_of_token(vocab, ids, hit.start_token) <= first_byte < byte_start_of_token(
        vocab, ids, hit.start_token + 1)


REGEX_LIST = WordList("rx", (
    Term("s[o0]rr(?:y|ies)", MatchMode.WORD, regex=True),
    Term("f[u*@]ck(?:ing)?", MatchMode.PREFIX, regex=True),
    Term("\\d{3}-\\d{4}", MatchMode.WORD, regex=True),
    Term("傻.", MatchMode.SUBSTRING, regex=True),
    Term("kill\\s(?:all|every)\\s?one", MatchMode.WORD, regex=True),
    Term("NaN\\b", MatchMode.SUBSTRING, case_sensitive=True, regex=True),
))

CASINGS = [str.lower, str.upper, str.title, lambda s: "".join(c.upper() if i % 2 else c for i, c in enumerate(s))]


@pytest.fixture(scope="module", params=["stored", "request", "combined"])
def regex_setup(model, request):
    tokenizer, vocab, stored_en = model
    return tokenizer, vocab, compiled(vocab, stored_en, REGEX_LIST, request.param)


@pytest.mark.parametrize("written", ["sorry", "s0rries", "f*cking", "fuck", "555-1234", "傻逼", "kill all one",
                                     "kill everyone"])
def test_every_split_and_casing_of_a_match_is_caught_where_it_begins(regex_setup, written):
    tokenizer, vocab, artefact = regex_setup
    for casing in CASINGS:
        match = casing(written)
        for before, after in (("Well, ", " today."), ("", ""), ("(", ")")):
            text = before + match + after
            start_byte = len(before.encode())
            for cut in range(1, len(match)):
                ids = encode_split(tokenizer, text, [len(before) + cut])
                _, hit = first_hit(artefact, ids)
                assert hit is not None, (text, cut)  # (combined: the stored list's "fuck" may be first)
                assert byte_start_of_token(vocab, ids, hit.start_token) <= start_byte, (text, cut, hit)
                assert start_byte < byte_start_of_token(vocab, ids, hit.start_token + 1), (text, cut, hit)


@pytest.mark.parametrize("text", ["sorryful", "so rry", "f-ck", "5551234", "傻", "NAN", "NaNa"])
def test_near_misses_are_not_caught(regex_setup, text):
    tokenizer, _, artefact = regex_setup
    for cut in range(len(text) + 1):
        _, hit = first_hit(artefact, encode_split(tokenizer, text, [cut]))
        assert hit is None or not hit.term.startswith("re:"), (text, cut, hit)


def test_a_regex_match_split_inside_utf8_characters_rolls_back_to_the_first_byte(regex_setup):
    _, vocab, artefact = regex_setup
    byte_token = {}
    for token_id, data in enumerate(vocab.token_bytes):
        if len(data) == 1 and token_id not in vocab.special_ids:
            byte_token.setdefault(data[0], token_id)
    for text, start in (("你是傻逼吗", "你是"), ("oh 傻x", "oh ")):
        ids = [byte_token[b] for b in text.encode()]
        _, hit = first_hit(artefact, ids)
        assert hit is not None and hit.term == "re:傻.", text
        assert byte_start_of_token(vocab, ids, hit.start_token) == len(start.encode())  # the first byte of 傻


def test_a_word_regex_at_the_very_end_matches_only_at_finish(regex_setup):
    tokenizer, _, artefact = regex_setup
    matcher = TokenMatcher(artefact)
    assert all(matcher.push(t) is None for t in encode(tokenizer, "I am SORRY"))
    hit = matcher.finish()
    assert hit is not None and hit.term == "re:s[o0]rr(?:y|ies)"


def test_a_hit_never_starts_in_a_released_token(regex_setup):
    """Hold-back: a token released by ``releasable()`` is never the start of a later regex hit."""
    tokenizer, vocab, artefact = regex_setup
    fragments = ["s", "o", "0", "rr", "y", "ies", " ", ".", "f", "*", "ck", "ing", "55", "5-", "12", "34", "傻",
                 "逼", "kill", " all", " every", "one", "NaN", "x", "Well"]
    assert hits_after_hold_back(tokenizer, vocab, artefact, fragments, 10, random.Random(11)) > 50


def test_lookback_bounds_where_a_regex_match_in_progress_began(regex_setup):
    tokenizer, _, artefact = regex_setup
    matcher = TokenMatcher(artefact)
    ids = encode(tokenizer, "Please call 555-12")
    for token in ids:
        assert matcher.push(token) is None
    held = len(ids) - matcher.releasable()
    text_held = tokenizer.decode(ids[matcher.releasable():])
    assert held >= 1 and "555" in text_held  # "555-12" may still become "555-1234"


def test_always_banned_regex_tokens_complete_a_match_by_themselves(model):
    _, vocab, _ = model
    lists = [WordList("rx", (Term("[bdl]uck", MatchMode.SUBSTRING, regex=True),
                             Term("\\d{2}%", MatchMode.SUBSTRING, regex=True),
                             Term("[bc]ucket", MatchMode.WORD, regex=True)))]  # " bucket" alone waits for the next
    for artefact in (compile_artefact(vocab, lists), compile_request_artefact(vocab, lists)):
        banned = artefact.always_banned.tolist()
        assert {encode_prefix(vocab, " luck"), encode_prefix(vocab, " duck")} <= set(banned)
        matcher = TextMatcher(lists, obfuscation=OFF)
        for token in banned:
            text = vocab.token_bytes[token].decode("utf-8", "replace")
            assert matcher.scan(text), text
            for prefix in ("x", " ", "1"):
                state = artefact.transition(ROOT_STATE, encode_prefix(vocab, prefix)).state
                assert artefact.transition(state, token).hits, (prefix, text)
    assert set(compile_artefact(vocab, lists).always_banned.tolist()) == set(
        compile_request_artefact(vocab, lists).always_banned.tolist())


def encode_prefix(vocab, text):
    """A token whose bytes are exactly ``text``."""
    return vocab.token_bytes.index(text.encode())


def test_a_match_that_can_begin_only_after_a_word_character_is_masked(model):
    """``\\Bx\\w`` matches at a token's first character only after a word character, which the root sweep
    (a non-word context) never shows: the mask must still hold those tokens, exactly."""
    tokenizer, vocab, _ = model
    lists = [WordList("rx", (Term("\\Bx\\w", MatchMode.SUBSTRING, regex=True),))]
    for artefact in (compile_artefact(vocab, lists), compile_request_artefact(vocab, lists)):
        state = ROOT_STATE
        for token in encode(tokenizer, "ab"):
            state = artefact.transition(state, token).state
        mask = artefact.completing_tokens(state).tolist()
        xy = encode_prefix(vocab, "xt")
        assert xy in mask and not artefact.transition(ROOT_STATE, xy).hits
        assert mask == [t for t in range(len(vocab.token_bytes)) if artefact.transition(state, t).hits]
