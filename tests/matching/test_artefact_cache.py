"""The artefact cache: content-addressed keys, a real Redis round trip, corrupt blobs recompiled."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import redis

from guardrail.matching.cache import ArtefactCache
from guardrail.matching.codec import ArtefactFormatError, decode_artefact, encode_artefact
from guardrail.matching.compiler import COMPILER_VERSION, artefact_key, compile_artefact
from guardrail.matching.token_matcher import TokenMatcher
from guardrail.wordlists.wordlist import WordListError, bundled_wordlist, parse_wordlist, wordlist_from_terms


@pytest.fixture
def lists():
    return [bundled_wordlist("en"), wordlist_from_terms(["listen", "sorry"])]


def test_codec_round_trip_preserves_behaviour(smollm2_vocab, smollm2_tokenizer, lists):
    artefact = compile_artefact(smollm2_vocab, lists)
    key = artefact_key(smollm2_vocab, lists)
    decoded = decode_artefact(encode_artefact(artefact, key, COMPILER_VERSION), smollm2_vocab, key, COMPILER_VERSION)
    for name in ("node", "symbols", "flags", "pending_bytes", "always_banned"):
        assert np.array_equal(getattr(decoded.sweep, name), getattr(artefact.sweep, name)), name
    ids = smollm2_tokenizer.encode("Sorry, I am not listening, LISTEN", add_special_tokens=False)
    hits = []
    for a in (artefact, decoded):
        m = TokenMatcher(a)
        hits.append([m.push(t) for t in ids] + [m.finish()])
    assert hits[0] == hits[1] and any(hits[0])


def test_codec_round_trip_of_regex_terms_rebuilds_the_same_automata(smollm2_vocab, smollm2_tokenizer, lists):
    regex = parse_wordlist("re:s[o0]rr(?:y|ies)\nre:NaN\\b | case=sensitive, match=substring\nre:l[i1]sten\n", "rx")
    artefact = compile_artefact(smollm2_vocab, [*lists, regex])
    key = artefact_key(smollm2_vocab, [*lists, regex])
    blob = encode_artefact(artefact, key, COMPILER_VERSION)
    decoded = decode_artefact(blob, smollm2_vocab, key, COMPILER_VERSION)
    assert [t.regex for t in decoded.terms] == [t.regex for t in artefact.terms] and decoded.terms[-1].regex
    assert [a.num_nodes for a in decoded.automata] == [a.num_nodes for a in artefact.automata]
    ids = smollm2_tokenizer.encode("S0rry NaN, I am not l1stening, L1STEN", add_special_tokens=False)
    hits = []
    for a in (artefact, decoded):
        m = TokenMatcher(a)
        hits.append([m.push(t) for t in ids] + [m.finish()])
    assert hits[0] == hits[1] and "re:s[o0]rr(?:y|ies)" in {h.term for h in hits[0] if h}
    # A blob whose regex automata would not rebuild the same (another construction) is refused.
    tampered = blob.replace(b'"regex_nodes":[', b'"regex_nodes":[9')
    assert tampered != blob
    with pytest.raises(ArtefactFormatError):
        decode_artefact(tampered, smollm2_vocab, key, COMPILER_VERSION)


def test_key_changes_with_the_list_or_the_tokenizer(smollm2_vocab, gemma3_vocab, lists):
    base = artefact_key(smollm2_vocab, lists)
    assert artefact_key(smollm2_vocab, list(reversed(lists))) == base
    assert artefact_key(gemma3_vocab, lists) != base
    changed = [lists[0], wordlist_from_terms(["listen", "sorry", "talk"])]
    assert artefact_key(smollm2_vocab, changed) != base
    as_regex = [lists[0], wordlist_from_terms(["re:listen", "sorry"])]
    assert artefact_key(smollm2_vocab, as_regex) != base


def test_redis_round_trip_then_memory(redis_url, redis_prefix, smollm2_vocab, lists, tmp_path):
    layers = []
    first = ArtefactCache(redis_url, None, key_prefix=redis_prefix, on_lookup=layers.append)
    _, layer = first.get(smollm2_vocab, lists)
    assert layer == "compile"
    assert first.get(smollm2_vocab, lists)[1] == "memory"
    second = ArtefactCache(redis_url, None, key_prefix=redis_prefix)  # another replica
    artefact, layer = second.get(smollm2_vocab, lists)
    assert layer == "redis" and len(artefact.terms) == sum(len(w.terms) for w in lists)
    assert layers == ["compile", "memory"]


def test_disk_layer(tmp_path, smollm2_vocab, lists):
    assert ArtefactCache(None, tmp_path).get(smollm2_vocab, lists)[1] == "compile"
    assert ArtefactCache(None, tmp_path).get(smollm2_vocab, lists)[1] == "disk"


def test_in_process_layer_weighs_each_artefact_by_its_blob_and_keeps_none_heavier_than_the_bound(
        tmp_path, smollm2_vocab, lists):
    # The weight is the encoded blob's length (known on every path without a walk over the tables).
    compiled = ArtefactCache(None, tmp_path)
    artefact, _ = compiled.get(smollm2_vocab, lists)
    blob_bytes = (tmp_path / "artefacts" / f"{artefact_key(smollm2_vocab, lists)}.bin").stat().st_size
    assert compiled.memory_bytes == blob_bytes
    loaded = ArtefactCache(None, tmp_path)
    assert loaded.get(smollm2_vocab, lists)[1] == "disk" and loaded.memory_bytes == blob_bytes
    small = ArtefactCache(None, tmp_path, max_memory_bytes=blob_bytes - 1)
    assert small.get(smollm2_vocab, lists)[1] == "disk"
    assert small.memory_bytes == 0 and small.get(smollm2_vocab, lists)[1] == "disk"  # served, not kept


def test_corrupted_blob_in_redis_is_recompiled(redis_url, redis_prefix, smollm2_vocab, lists):
    cache = ArtefactCache(redis_url, None, key_prefix=redis_prefix)
    cache.get(smollm2_vocab, lists)
    client = redis.Redis.from_url(redis_url)
    key = cache.redis_key(artefact_key(smollm2_vocab, lists))
    blob = bytearray(client.get(key))
    blob[-10] ^= 0xFF
    client.set(key, bytes(blob))
    artefact, layer = ArtefactCache(redis_url, None, key_prefix=redis_prefix).get(smollm2_vocab, lists)
    assert layer == "compile" and artefact.terms
    assert ArtefactCache(redis_url, None, key_prefix=redis_prefix).get(smollm2_vocab, lists)[1] == "redis"


@pytest.mark.parametrize("blob", [b"", b"\x80\x04pickle", b"GUARDRAIL-ARTEFACT\n\xff\xff\xff\xff{}"])
def test_foreign_blobs_are_rejected_not_executed(smollm2_vocab, blob):
    with pytest.raises(ArtefactFormatError):
        decode_artefact(blob, smollm2_vocab, "k", COMPILER_VERSION)


def test_artefact_for_another_vocab_is_rejected(smollm2_vocab, gemma3_vocab, lists):
    key = artefact_key(smollm2_vocab, lists)
    blob = encode_artefact(compile_artefact(smollm2_vocab, lists), key, COMPILER_VERSION)
    with pytest.raises(ArtefactFormatError, match="vocab"):
        decode_artefact(blob, gemma3_vocab, key, COMPILER_VERSION)


@pytest.mark.parametrize("terms, needle", [
    ([""], "<request>:1"), (["ok", "  "], "<request>:2"), (["!!!"], "<request>:1"), (["x" * 257], "256"),
])
def test_bad_terms_are_rejected_with_their_position(terms, needle):
    with pytest.raises(WordListError, match=needle):
        wordlist_from_terms(terms)


def test_term_that_normalises_to_nothing_fails_compile_and_caches_nothing(tmp_path, smollm2_vocab):
    bad = parse_wordlist("ok\n\u200b\u200bx\n", "zw")  # fine as written, but "x" survives: valid
    assert ArtefactCache(None, tmp_path).get(smollm2_vocab, [bad])[1] == "compile"
    with pytest.raises(WordListError):
        parse_wordlist("\u200b!\n", "zw2")
    assert len(list((tmp_path / "artefacts").iterdir())) == 1


def test_no_terms_compiles_to_an_artefact_that_never_matches(tmp_path, smollm2_vocab, smollm2_tokenizer):
    cache = ArtefactCache(None, tmp_path)
    artefact, _ = cache.get(smollm2_vocab, [])
    matcher = TokenMatcher(artefact)
    ids = smollm2_tokenizer.encode("anything at all", add_special_tokens=False)
    assert [matcher.push(t) for t in ids] == [None] * len(ids) and matcher.finish() is None
    assert matcher.releasable() == len(ids)
    assert ArtefactCache(None, tmp_path).get(smollm2_vocab, [])[1] == "disk"


def test_disk_layer_is_bounded_least_recently_used_out(smollm2_vocab, tmp_path):
    """Three artefacts, room for two: the one not used since it was written goes, the one read back stays."""
    lists = [[wordlist_from_terms([word])] for word in ("alpha", "bravo", "delta")]
    sizes = []
    for one in lists[:2]:
        ArtefactCache(None, tmp_path).get(smollm2_vocab, one)
        sizes.append(sum(p.stat().st_size for p in (tmp_path / "artefacts").glob("*.bin")))
    per_file = sizes[0]
    assert sizes[1] == 2 * per_file  # same vocab and stream count: same size
    names = [f"{artefact_key(smollm2_vocab, one)}.bin" for one in lists]
    now = time.time_ns()
    for name, age_s in ((names[0], 20), (names[1], 10)):  # written 20 s and 10 s ago
        os.utime(tmp_path / "artefacts" / name, ns=(now - age_s * 10**9,) * 2)
    cache = ArtefactCache(None, tmp_path, max_disk_bytes=2 * per_file)
    assert cache.get(smollm2_vocab, lists[0])[1] == "disk"  # read back: now the most recently used
    assert cache.get(smollm2_vocab, lists[2])[1] == "compile"
    kept = sorted(p.name for p in (tmp_path / "artefacts").glob("*.bin"))
    assert kept == sorted([names[0], names[2]])


def test_request_terms_are_combined_at_run_time_and_never_stored(redis_url, redis_prefix, smollm2_vocab,
                                                                 smollm2_tokenizer, tmp_path):
    stored = [bundled_wordlist("en")]
    own = [wordlist_from_terms(["zorblax", "listen"])]
    cache = ArtefactCache(redis_url, tmp_path, key_prefix=redis_prefix)
    artefact = cache.get_with_request(smollm2_vocab, stored, own)
    files = list((tmp_path / "artefacts").glob("*.bin"))
    assert [p.name for p in files] == [f"{artefact_key(smollm2_vocab, stored)}.bin"]
    client = redis.Redis.from_url(redis_url)
    assert [k.decode() for k in client.scan_iter(f"{redis_prefix}*")] == [
        cache.redis_key(artefact_key(smollm2_vocab, stored))]
    matcher = TokenMatcher(artefact)
    hits = [matcher.push(t) for t in smollm2_tokenizer.encode("I said zorblax now", add_special_tokens=False)]
    assert any(h is not None and h.term == "zorblax" and h.list_name == "request" for h in hits)
    assert cache.get_with_request(smollm2_vocab, stored, []) is cache.get(smollm2_vocab, stored)[0]
    assert cache.get_with_request(smollm2_vocab, [], []) is None
