"""Token-level drivers of the compiled automaton, shared by the token tests of tests/matching/: encodings
(canonical and split), the first hit, every term a token path reports, the hold-back property."""

from __future__ import annotations

from guardrail.matching.token_matcher import TokenMatcher


def encode(tokenizer, text):
    return tokenizer.encode(text, add_special_tokens=False)


def encode_split(tokenizer, text, cuts):
    """Encode ``text`` as independently tokenized pieces: a non-canonical tokenization of the same text."""
    ids, last = [], 0
    for cut in sorted(cuts) + [len(text)]:
        if cut > last:
            ids += encode(tokenizer, text[last:cut])
            last = cut
    return ids


def terms_by_tokens(artefact, ids) -> set[str]:
    """The terms reported when every token is followed (never stopping at a hit), and at the end of text."""
    from guardrail.matching.artefact import ROOT_STATE

    state, found = ROOT_STATE, set()
    for token in ids:
        transition = artefact.transition(state, token)
        found |= {artefact.terms[t].text for t, _, _ in transition.hits}
        state = transition.state
    return found | {artefact.terms[t].text for t, _, _ in artefact.finish(state).hits}


def first_hit(artefact, ids):
    matcher = TokenMatcher(artefact)
    for index, token in enumerate(ids):
        hit = matcher.push(token)
        if hit:
            return index, hit
    hit = matcher.finish()
    return (len(ids), hit) if hit else (None, None)


def byte_start_of_token(vocab, ids, index):
    return sum(len(vocab.token_bytes[t]) for t in ids[:index])


def hits_after_hold_back(tokenizer, vocab, artefact, fragments, pieces, rng) -> int:
    """Decode 300 random texts of ``pieces`` fragments, each split at a random point, through a
    :class:`TokenMatcher`; assert that no hit starts in a token ``releasable()`` already released and that
    no released prefix ends inside a UTF-8 character. Returns the hits seen (so a caller can check that the
    texts do exercise hits)."""
    hits = 0
    for _ in range(300):
        text = "".join(rng.choice(fragments) for _ in range(pieces))
        ids = encode_split(tokenizer, text, [rng.randrange(len(text) + 1)])
        matcher, released = TokenMatcher(artefact), 0
        for token in ids:
            hit = matcher.push(token)
            if hit is not None:
                assert hit.start_token >= released, (text, hit, released)
                hits += 1
                break
            released = max(released, matcher.releasable())
            # A released prefix never ends inside a UTF-8 character.
            b"".join(vocab.token_bytes[t] for t in matcher.tokens[:released]).decode("utf-8")
        else:
            hit = matcher.finish()
            assert hit is None or hit.start_token >= released
    return hits
