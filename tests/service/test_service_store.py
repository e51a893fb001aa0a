"""The word-list stores (embedded files, real Redis) honour one contract: versions, preconditions,
audit records, persistence, atomic concurrent updates; and the catalog follows the store."""

from __future__ import annotations

import threading

import pytest
import redis
from helpers.service import delete_namespace
from helpers.wait import wait_until

from guardrail.wordlists.wordlist import MatchMode, Term, bundled_wordlist, format_wordlist, wordlist_from_terms
from service.catalog import UnknownWordList, WordListCatalog
from service.metrics import ServiceMetrics
from service.settings import Settings
from service.stores.embedded import EmbeddedStore
from service.stores.redis_store import RedisStore
from service.stores.store import (
    Precondition,
    PreconditionFailed,
    WordListNotFound,
    WriteConflict,
    content_digest,
    deletion,
    patched,
    replacement,
    seed,
)


@pytest.fixture(params=["embedded", "redis"])
def open_store(request, tmp_path):
    """A factory of stores over the same data (so a second call is a 'restart' or another replica)."""
    if request.param == "embedded":
        return lambda **kw: EmbeddedStore(tmp_path / "data", audit_max_records=50, **kw)
    prefix = request.getfixturevalue("redis_prefix")
    url = request.getfixturevalue("redis_url")
    return lambda **kw: RedisStore(url, prefix, audit_max_records=50, **kw)


def put(store, name, terms, precondition=None, token="tok"):
    wordlist = wordlist_from_terms(terms, name=name)
    return store.write(name, lambda current: replacement(current, wordlist), precondition, token)


def test_every_change_gets_the_next_version_and_an_etag(open_store):
    store = open_store()
    first = put(store, "pets", ["cat"])
    second = put(store, "pets", ["cat", "dog"])
    assert (first.version, second.version) == (1, 2)
    assert second.etag == f'"v2-{content_digest(format_wordlist(second.wordlist))}"'
    assert store.versions() == {"pets": 2}
    assert [t.text for t in store.get("pets").wordlist.terms] == ["cat", "dog"]


def test_a_stale_if_match_is_refused_and_the_previous_version_keeps_serving(open_store):
    store = open_store()
    put(store, "pets", ["cat"])
    put(store, "pets", ["dog"])
    with pytest.raises(PreconditionFailed) as failure:
        put(store, "pets", ["eel"], Precondition.if_match('"v1"'))
    assert failure.value.current == 2
    assert [t.text for t in store.get("pets").wordlist.terms] == ["dog"]
    assert put(store, "pets", ["eel"], Precondition.if_match('W/"v2"')).version == 3


def test_if_none_match_star_only_creates(open_store):
    store = open_store()
    put(store, "pets", ["cat"], Precondition(absent=True))
    with pytest.raises(PreconditionFailed):
        put(store, "pets", ["dog"], Precondition(absent=True))


def test_lists_survive_a_restart_of_the_store(open_store):
    store = open_store()
    put(store, "pets", [Term("Cat", MatchMode.PREFIX, case_sensitive=True), "dog"])
    store.close()
    reopened = open_store()
    stored = reopened.get("pets")
    assert stored.version == 1
    assert stored.wordlist.terms == (Term("Cat", MatchMode.PREFIX, True), Term("dog", MatchMode.WORD, False))


def test_a_deleted_name_keeps_counting_versions(open_store):
    store = open_store()
    put(store, "pets", ["cat"])
    store.write("pets", lambda current: deletion(current), None, "tok")
    assert store.get("pets") is None and "pets" not in store.versions()
    assert put(store, "pets", ["dog"]).version == 3  # an ETag of the old list can never match again


def test_the_latest_versions_are_kept_newest_first_and_readable(open_store):
    store = open_store(history_max=3)
    for terms in (["cat"], ["cat", "dog"], ["dog"], ["dog", "eel"]):
        put(store, "pets", terms)
    assert [(v.version, v.terms) for v in store.history("pets")] == [(4, 2), (3, 1), (2, 2)]
    assert store.get_version("pets", 1) is None  # fell out of the history
    second = store.get_version("pets", 2)
    assert second.version == 2 and [t.text for t in second.wordlist.terms] == ["cat", "dog"]
    assert second.updated_at == store.history("pets")[-1].updated_at
    assert store.get_version("pets", 4).wordlist == store.get("pets").wordlist
    assert store.history("never") == [] and store.get_version("never", 1) is None


def test_kept_versions_survive_a_delete_and_a_restart(open_store):
    store = open_store(history_max=3)
    put(store, "pets", [Term("Cat", MatchMode.PREFIX, case_sensitive=True)])
    put(store, "pets", ["dog"])
    store.write("pets", lambda current: deletion(current), None, "tok")
    store.close()
    reopened = open_store(history_max=3)
    assert [v.version for v in reopened.history("pets")] == [2, 1]
    first = reopened.get_version("pets", 1).wordlist.terms[0]
    assert (first.text, first.match, first.case_sensitive) == ("Cat", MatchMode.PREFIX, True)
    put(reopened, "pets", ["eel"])  # re-created: version 4 joins the kept ones
    assert [v.version for v in reopened.history("pets")] == [4, 2, 1]


def test_a_redis_list_written_before_versions_were_kept_starts_its_history_with_its_current_version(
        redis_url, redis_prefix):
    store = RedisStore(redis_url, redis_prefix)
    put(store, "pets", ["cat"])
    client = redis.Redis.from_url(redis_url)
    client.delete(f"{redis_prefix}wordlist-history:pets", f"{redis_prefix}wordlist-bodies:pets")  # older data
    assert [v.version for v in store.history("pets")] == [1]
    put(store, "pets", ["dog"])
    assert [v.version for v in store.history("pets")] == [2, 1]
    assert [t.text for t in store.get_version("pets", 1).wordlist.terms] == ["cat"]


def test_embedded_store_removes_the_file_of_a_version_that_falls_out_of_the_history(tmp_path):
    store = EmbeddedStore(tmp_path, history_max=2)
    for terms in (["cat"], ["dog"], ["eel"]):
        put(store, "pets", terms)
    assert sorted(p.name for p in (tmp_path / "wordlists").glob("pets.v*.txt")) == ["pets.v2.txt", "pets.v3.txt"]


def test_every_change_is_audited_newest_first(open_store):
    store = open_store()
    put(store, "pets", ["cat", "dog"], token="alice")
    store.write("pets", lambda current: patched(current, ["eel"], ["cat"]), None, "bob")
    store.write("pets", lambda current: deletion(current), None, "bob")
    records = store.audit(10)
    assert [(r.action, r.version, r.token_id, r.added, r.removed) for r in records] == [
        ("delete", 3, "bob", 0, 2),
        ("update", 2, "bob", 1, 1),
        ("create", 1, "alice", 2, 0),
    ]
    assert all(r.list == "pets" and r.time > 0 for r in records)


def test_the_audit_log_is_capped(open_store):
    store = open_store()
    for i in range(120):
        put(store, "pets", [f"pet{i}"])
    records = store.audit(1000)
    assert 50 <= len(records) <= 100
    assert records[0].version == 120


def test_patch_removes_case_insensitively_and_skips_duplicates(open_store):
    store = open_store()
    put(store, "pets", ["cat", "dog"])
    stored = store.write("pets", lambda current: patched(current, ["dog", "eel"], ["CAT"]), None, "tok")
    assert [t.text for t in stored.wordlist.terms] == ["dog", "eel"]


def test_concurrent_patches_all_land(open_store):
    """No update is lost: Redis replicas retry their WATCH/MULTI transaction on conflict; the embedded
    store (one process per data directory) serialises its threads."""
    first = open_store()
    put(first, "pets", ["cat"])
    stores = [first] * 4 if isinstance(first, EmbeddedStore) else [open_store() for _ in range(4)]

    def add(store, index):
        for j in range(5):
            store.write("pets", lambda current, t=f"pet{index}x{j}": patched(current, [t], []), None, "tok")

    threads = [threading.Thread(target=add, args=(s, i)) for i, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for store in stores:
        store.close()  # the embedded store's data directory takes one open store at a time
    final = open_store().get("pets")
    assert len(final.wordlist.terms) == 21
    assert final.version == 21


def test_updating_a_missing_list_raises_not_found(open_store):
    store = open_store()

    def compute(current):
        if current is None:
            raise WordListNotFound("ghost")
        return patched(current, ["x1"], [])

    with pytest.raises(WordListNotFound):
        store.write("ghost", compute, None, "tok")


def test_seeding_adds_bundled_lists_once_and_never_resurrects_a_deleted_one(open_store):
    store = open_store()
    english = bundled_wordlist("en")
    assert seed(store, [english]) == ["en"]
    assert seed(store, [english]) == []
    store.write("en", lambda current: deletion(current), None, "tok")
    assert seed(store, [english]) == []
    assert store.get("en") is None


def test_embedded_store_ignores_a_list_file_whose_change_never_committed(tmp_path):
    store = EmbeddedStore(tmp_path)
    put(store, "pets", ["cat"])
    # A crash between writing the new version's file and the index leaves an orphan file.
    (tmp_path / "wordlists" / "pets.v2.txt").write_text("dog\n", encoding="utf-8")
    store.close()
    reopened = EmbeddedStore(tmp_path)
    assert reopened.get("pets").version == 1
    assert not (tmp_path / "wordlists" / "pets.v2.txt").exists()
    assert put(reopened, "pets", ["dog"]).version == 2


def test_catalog_follows_changes_made_by_another_replica(redis_url, redis_prefix):
    writer = RedisStore(redis_url, redis_prefix)
    metrics = ServiceMetrics(with_redis=True)
    catalog = WordListCatalog(RedisStore(redis_url, redis_prefix), metrics, lambda: [], poll_interval_s=30)
    catalog.start()  # long poll interval: only the pub/sub hint can make this fast
    try:
        put(writer, "pets", ["cat"])
        wait_until(lambda: catalog.get("pets") is not None, 5, "the catalog hearing of the new list", interval_s=0.05)
        assert catalog.resolve(["pets"])[0].version == 1
        assert metrics.wordlist_version.labels("pets")._value.get() == 1
        assert metrics.redis_up._value.get() == 1
        with pytest.raises(UnknownWordList):
            catalog.resolve(["pets", "ghost"])
    finally:
        catalog.stop()


def test_catalog_serves_its_copy_and_reports_down_when_redis_does_not_answer(redis_url, redis_prefix):
    put(RedisStore(redis_url, redis_prefix), "pets", ["cat"])
    metrics = ServiceMetrics(with_redis=True)
    catalog = WordListCatalog(RedisStore(redis_url, redis_prefix), metrics, lambda: [], poll_interval_s=30)
    catalog.refresh()
    assert catalog.healthy
    # Point the same catalog at a port where nothing listens: the copy stays, health drops.
    catalog.store = RedisStore("redis://127.0.0.1:1/0", redis_prefix, timeout_s=0.2)
    catalog.refresh()
    assert not catalog.healthy and "Redis" in catalog.last_error
    assert metrics.redis_up._value.get() == 0
    assert catalog.resolve(["pets"])[0].version == 1


def test_settings_read_comma_separated_lists_from_the_environment(monkeypatch):
    monkeypatch.setenv("GUARDRAIL_WORDLISTS", "en, de")
    monkeypatch.setenv("GUARDRAIL_API_KEYS", "k1,k2")
    monkeypatch.setenv("GUARDRAIL_REDIS_URL", "")
    settings = Settings()
    assert settings.wordlists == ["en", "de"]
    assert [k.get_secret_value() for k in settings.api_keys] == ["k1", "k2"]
    assert settings.redis_url is None
    assert "k1" not in repr(settings)


def test_the_evasion_guard_setting_defaults_on_and_reads_the_environment(monkeypatch):
    assert Settings().evasion_guard == "substring"
    monkeypatch.setenv("GUARDRAIL_EVASION_GUARD", "off")
    assert Settings().evasion_guard == "off"
    monkeypatch.setenv("GUARDRAIL_EVASION_GUARD", "edit")
    assert Settings().evasion_guard == "edit"
    monkeypatch.setenv("GUARDRAIL_EVASION_GUARD", "on")
    with pytest.raises(ValueError, match="evasion_guard"):
        Settings()


def test_settings_name_the_bad_variable(monkeypatch):
    monkeypatch.setenv("GUARDRAIL_MAX_QUEUE", "-1")
    with pytest.raises(ValueError, match="max_queue"):
        Settings()


def test_redis_keys_stay_inside_the_namespace(redis_url, redis_prefix):
    store = RedisStore(redis_url, redis_prefix)
    put(store, "pets", ["cat"])
    client = redis.Redis.from_url(redis_url)
    keys = {k.decode() for k in client.scan_iter(match=f"{redis_prefix}*")}
    assert keys == {f"{redis_prefix}wordlist:pets", f"{redis_prefix}wordlist-version:pets",
                    f"{redis_prefix}wordlist-history:pets", f"{redis_prefix}wordlist-bodies:pets",
                    f"{redis_prefix}wordlists", f"{redis_prefix}audit", f"{redis_prefix}store-epoch"}


# -- busy writers and a Redis that loses its data (issue 11, items 5 and 7) ------------------------------


def test_48_concurrent_patches_over_two_replicas_all_land(redis_url, redis_prefix):
    replicas = [RedisStore(redis_url, redis_prefix), RedisStore(redis_url, redis_prefix)]
    put(replicas[0], "busy", ["seed"])
    start = threading.Barrier(48)
    errors: list[Exception] = []

    def add(i: int) -> None:
        start.wait()
        try:
            replicas[i % 2].write("busy", lambda current: patched(current, [f"w{i}"], []), None, "tok")
        except Exception as exc:  # noqa: BLE001 - the test reports whatever a writer met
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(48)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []  # before: immediate retries, StoreUnavailable for some of them
    stored = replicas[0].get("busy")
    assert stored.version == 49 and len(stored.wordlist.terms) == 49


def test_a_write_that_always_collides_is_a_conflict_not_an_outage(redis_url, redis_prefix):
    store, other = RedisStore(redis_url, redis_prefix), redis.Redis.from_url(redis_url)
    put(store, "hot", ["a"])

    def compute(current):
        other.set(f"{redis_prefix}wordlist-version:hot", current.version)  # another writer, every time
        return patched(current, ["b"], [])

    with pytest.raises(WriteConflict):
        store.write("hot", compute, None, "tok")


def test_versions_keep_growing_after_redis_loses_its_data(redis_url, redis_prefix):
    store = RedisStore(redis_url, redis_prefix)
    old = put(store, "pets", ["cat"])
    assert old.etag.startswith('"v1-')
    delete_namespace(redis_url, redis_prefix)  # what a restart without persistence leaves: nothing
    store.versions()  # the poll notices
    assert store.resets == 1
    new = put(store, "pets", ["dog"])
    assert new.version > old.version
    with pytest.raises(PreconditionFailed):  # the ETag given before the loss never matches again
        put(store, "pets", ["eel"], Precondition.if_match(old.etag))


def test_a_replica_sees_the_loss_another_replica_noticed_first(redis_url, redis_prefix):
    first, second = RedisStore(redis_url, redis_prefix), RedisStore(redis_url, redis_prefix)
    put(first, "pets", ["cat"])
    second.versions()
    delete_namespace(redis_url, redis_prefix)
    put(first, "pets", ["dog"])  # the first notices at its write and starts a new epoch
    second.versions()
    assert (first.resets, second.resets) == (1, 1)
    assert second.get("pets").version > 1


def test_the_catalog_reseeds_and_counts_a_loss_of_the_data(redis_url, redis_prefix):
    metrics = ServiceMetrics(with_redis=True)
    catalog = WordListCatalog(RedisStore(redis_url, redis_prefix), metrics, lambda: [bundled_wordlist("en")],
                              poll_interval_s=30)
    catalog.refresh()
    before = catalog.get("en").version
    delete_namespace(redis_url, redis_prefix)
    catalog.refresh()
    assert metrics.store_resets._value.get() == 1
    assert catalog.get("en") is not None and catalog.get("en").version > before


def test_a_version_number_given_again_after_a_partial_loss_is_another_etag(redis_url, redis_prefix):
    store = RedisStore(redis_url, redis_prefix)
    put(store, "pets", ["cat"])
    second = put(store, "pets", ["dog"])
    # What a Redis restored from a snapshot older than the last write leaves: the epoch survived, the list and
    # its counter are back at version 1, so the next write is version 2 again, with other content.
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.set(f"{redis_prefix}wordlist-version:pets", 1)
    client.hset(f"{redis_prefix}wordlist:pets", "version", 1)
    again = put(store, "pets", ["eel"])
    assert again.version == second.version and again.etag != second.etag
    with pytest.raises(PreconditionFailed):  # the tag of the lost version 2 does not match the new version 2
        put(store, "pets", ["fox"], Precondition.if_match(second.etag))
    assert [t.text for t in store.get("pets").wordlist.terms] == ["eel"]
