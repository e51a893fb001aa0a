"""Tenants without a model: policies applied to requests, keys and their storage (embedded files and the real
Redis), rate limits (the ``limits`` library on memory and on Redis), and the bounded metrics label."""

from __future__ import annotations

import json

import pytest
import redis
from pydantic import ValidationError

from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION, OFF, Obfuscation
from service.stores.store import WriteConflict
from service.tenants.keys import KEY_PREFIX, is_tenant_key, key_hash, key_id, new_key
from service.tenants.labels import OTHER, TenantLabels
from service.tenants.policy import ANONYMOUS_POLICY, PolicyViolation, TenantPolicy
from service.tenants.ratelimit import RateLimits
from service.tenants.store import EmbeddedTenantStore, RedisTenantStore, TenantChange, TenantRecord

# -- policies ------------------------------------------------------------------------------------


def test_a_request_naming_no_list_gets_the_policys_default_then_the_servers():
    assert TenantPolicy(default_wordlists=["house"]).wordlists(None, ["en"]) == ["house"]
    assert ANONYMOUS_POLICY.wordlists(None, ["en"]) == ["en"]
    assert TenantPolicy(default_wordlists=[]).wordlists(None, ["en"]) == []


def test_required_lists_are_always_enforced_and_allowed_lists_bound_what_a_request_names():
    policy = TenantPolicy(allowed_wordlists=["en", "de"], required_wordlists=["house"])
    assert policy.wordlists(["de"], ["en"]) == ["house", "de"]
    assert policy.wordlists([], ["en"]) == ["house"]
    assert policy.wordlists(["house", "en"], ["en"]) == ["house", "en"]
    with pytest.raises(PolicyViolation) as refused:
        policy.wordlists(["en", "fr"], ["en"])
    assert refused.value.param == "wordlists.1"


def test_a_default_list_outside_the_allowed_ones_is_refused_when_the_policy_is_made():
    with pytest.raises(ValidationError, match="not in allowed_wordlists"):
        TenantPolicy(default_wordlists=["fr"], allowed_wordlists=["en"])


def test_request_terms_can_be_forbidden():
    TenantPolicy().check_request_terms(3)
    TenantPolicy(request_terms=False).check_request_terms(0)
    with pytest.raises(PolicyViolation) as refused:
        TenantPolicy(request_terms=False).check_request_terms(1, "bad_words")
    assert refused.value.param == "bad_words"


@pytest.mark.parametrize(("floor", "asked", "allowed"), [
    ("substring", None, "substring"), ("substring", "edit", "edit"), ("substring", "substring", "substring"),
    ("substring", "off", None), ("edit", "substring", None), (None, "off", "off"),
])
def test_the_evasion_guard_of_a_policy_is_its_default_and_floor(floor, asked, allowed):
    policy = TenantPolicy(evasion_guard=floor)
    if allowed is None:
        with pytest.raises(PolicyViolation, match="weaker") as refused:
            policy.evasion_guard_for(asked, "substring")
        assert refused.value.param == "evasion_guard"
    else:
        assert policy.evasion_guard_for(asked, "substring") == allowed


@pytest.mark.parametrize(("floor", "asked", "allowed"), [
    ("leet", None, "leet"), ("leet", "masked", "masked"), ("leet", "homoglyphs", None),
    ("spaced+markup", "spaced", None), ("spaced", "spaced+markup", "spaced+markup"), (None, "off", "off"),
])
def test_the_obfuscation_of_a_policy_is_its_default_and_floor(floor, asked, allowed):
    policy = TenantPolicy(obfuscation=floor)
    typed = None if asked is None else Obfuscation.parse(asked)
    if allowed is None:
        with pytest.raises(PolicyViolation, match="weaker"):
            policy.obfuscation_for(typed, DEFAULT_OBFUSCATION)
    else:
        assert policy.obfuscation_for(typed, DEFAULT_OBFUSCATION) == Obfuscation.parse(allowed)


def test_max_tokens_of_a_policy_stays_within_the_servers():
    assert TenantPolicy(max_tokens=64).max_tokens_limit(4096) == 64
    assert TenantPolicy(max_tokens=64).default_max_tokens(256) == 64
    assert TenantPolicy(max_tokens=9999).max_tokens_limit(4096) == 4096
    assert ANONYMOUS_POLICY.default_max_tokens(256) == 256


# -- keys ----------------------------------------------------------------------------------------


def test_keys_are_random_prefixed_and_stored_as_their_sha256():
    first, second = new_key(), new_key()
    assert first != second and first.startswith(KEY_PREFIX) and len(first) == len(KEY_PREFIX) + 43
    assert is_tenant_key(first) and not is_tenant_key("unused") and not is_tenant_key("sk-x")
    assert len(key_hash(first)) == 64 and first not in key_hash(first)
    assert key_id(key_hash(first)) == key_hash(first)[:12]


# -- stores --------------------------------------------------------------------------------------


@pytest.fixture(params=["embedded", "redis"])
def tenant_store(request, tmp_path, redis_url, redis_prefix):
    if request.param == "embedded":
        return EmbeddedTenantStore(tmp_path)
    return RedisTenantStore(redis.Redis.from_url(redis_url, decode_responses=True), redis_prefix)


def _create(name: str, key: str, policy: TenantPolicy | None = None):
    def compute(current):
        assert current is None
        return TenantChange(TenantRecord(name, policy or TenantPolicy(), key_hash(key)), "create")
    return compute


def test_a_store_finds_a_tenant_by_its_keys_hash_until_the_key_is_rotated_or_revoked(tenant_store):
    old, new = new_key(), new_key()
    created = tenant_store.write("app", _create("app", old, TenantPolicy(max_tokens=8)), "tok1")
    assert created.version == 1 and created.key_id == key_id(key_hash(old))
    assert tenant_store.by_key_hash(key_hash(old)).policy.max_tokens == 8
    tenant_store.write("app", lambda cur: TenantChange(TenantRecord("app", cur.policy, key_hash(new)), "rotate"), "tok1")
    assert tenant_store.by_key_hash(key_hash(old)) is None
    assert tenant_store.by_key_hash(key_hash(new)).version == 2
    revoked = tenant_store.write("app", lambda cur: TenantChange(TenantRecord("app", cur.policy, None), "revoke"), None)
    assert revoked.key_hash is None and tenant_store.by_key_hash(key_hash(new)) is None
    assert [r.name for r in tenant_store.all()] == ["app"]
    tenant_store.write("app", lambda cur: TenantChange(None, "delete"), "tok2")
    assert tenant_store.get("app") is None and tenant_store.all() == []
    audit = tenant_store.audit(10)
    assert [r.action for r in audit] == ["delete", "revoke", "rotate", "create"]
    assert audit[0].token_id == "tok2" and audit[2].key_id == key_id(key_hash(new))
    assert audit[1].key_id == key_id(key_hash(new))  # the key that was revoked


def test_stored_records_and_audit_hold_no_key(tenant_store, tmp_path, redis_url, redis_prefix):
    key = new_key()
    tenant_store.write("app", _create("app", key), "tok")
    if isinstance(tenant_store, EmbeddedTenantStore):
        stored = "".join(p.read_text() for p in tmp_path.iterdir() if p.is_file())
    else:
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        read = {"string": client.get, "hash": client.hgetall, "list": lambda k: client.lrange(k, 0, -1)}
        stored = json.dumps({k: read[client.type(k)](k) for k in client.scan_iter(f"{redis_prefix}*")})
    assert "app" in stored
    assert key not in stored and key[len(KEY_PREFIX):] not in stored


def test_the_embedded_store_keeps_tenants_across_a_restart(tmp_path):
    key = new_key()
    EmbeddedTenantStore(tmp_path).write("app", _create("app", key, TenantPolicy(request_terms=False)), None)
    again = EmbeddedTenantStore(tmp_path)
    assert again.by_key_hash(key_hash(key)).policy.request_terms is False


def test_the_embedded_store_cuts_an_audit_record_a_crash_tore_and_keeps_the_rest(tmp_path):
    EmbeddedTenantStore(tmp_path).write("app", _create("app", new_key()), None)
    with (tmp_path / "tenant-audit.jsonl").open("a", encoding="utf-8") as handle:
        handle.write('{"action": "rot')  # an append cut short by a crash: no newline
    again = EmbeddedTenantStore(tmp_path)
    assert [(r.action, r.tenant) for r in again.audit(10)] == [("create", "app")]
    again.write("other", _create("other", new_key()), None)
    assert [r.tenant for r in again.audit(10)] == ["other", "app"]


def test_an_aborted_write_changes_nothing(tenant_store):
    tenant_store.write("app", _create("app", new_key()), None)

    def refuse(current):
        raise WriteConflict("no")

    with pytest.raises(WriteConflict):
        tenant_store.write("app", refuse, None)
    assert tenant_store.get("app").version == 1 and len(tenant_store.audit(10)) == 1


# -- rate limits -----------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "redis"])
def rate_limits(request, redis_url, redis_prefix):
    if request.param == "memory":
        return RateLimits(None)
    return RateLimits(redis.Redis.from_url(redis_url, decode_responses=True), redis_prefix)


def test_requests_over_the_limit_are_refused_with_a_wait(rate_limits):
    assert rate_limits.hit_request("a", 2) is None
    assert rate_limits.hit_request("a", 2) is None
    wait = rate_limits.hit_request("a", 2)
    assert wait is not None and 1 <= wait <= 60
    assert rate_limits.hit_request("b", 2) is None  # tenants count apart


def test_tokens_over_the_limit_are_refused_and_a_refused_hit_consumes_nothing(rate_limits):
    assert rate_limits.hit_tokens("a", 100, 60) is None
    wait = rate_limits.hit_tokens("a", 100, 60)
    assert wait is not None and 1 <= wait <= 120
    assert rate_limits.hit_tokens("a", 100, 40) is None  # the refused 60 were not counted


def test_redis_counters_are_shared_by_every_replicas_limiter(redis_url, redis_prefix):
    one, two = (RateLimits(redis.Redis.from_url(redis_url, decode_responses=True), redis_prefix) for _ in range(2))
    assert one.hit_request("a", 2) is None and two.hit_request("a", 2) is None
    assert one.hit_request("a", 2) is not None and two.hit_request("a", 2) is not None


def test_while_redis_is_known_down_limits_are_counted_in_memory(redis_url, redis_prefix):
    up = {"value": False}
    limits = RateLimits(redis.Redis.from_url(redis_url, decode_responses=True), redis_prefix, lambda: up["value"])
    assert limits.hit_request("a", 1) is None and limits.hit_request("a", 1) is not None
    client = redis.Redis.from_url(redis_url)
    assert list(client.scan_iter(f"{redis_prefix}ratelimit*")) == []  # nothing went to Redis
    up["value"] = True
    assert limits.hit_request("a", 1) is None  # Redis's own counter, empty so far


# -- metrics label ---------------------------------------------------------------------------------


def test_the_tenant_label_names_the_first_tenants_and_folds_the_rest_into_other():
    labels = TenantLabels(cap=2)
    assert [labels.label(n) for n in ("a", "b", "c", "a", "b", "d")] == ["a", "b", OTHER, "a", "b", OTHER]
    assert TenantLabels(cap=0).label("a") == OTHER


# -- who is calling --------------------------------------------------------------------------------


def _tenants(redis_url: str, redis_prefix: str, up=lambda: True, **settings):
    from service.settings import Settings
    from service.stores.redis_store import RedisStore
    from service.tenants.access import Tenants

    config = Settings(redis_url=redis_url, redis_prefix=redis_prefix, **settings)
    return Tenants(config, RedisStore(redis_url, redis_prefix), up)


def test_a_live_key_names_its_tenant_and_any_other_token_is_anonymous_or_401(redis_url, redis_prefix):
    from service.errors import ApiError

    tenants = _tenants(redis_url, redis_prefix)
    key = new_key()
    tenants.store.write("app", _create("app", key, TenantPolicy(max_tokens=5)), None)
    assert tenants.identify(key).tenant == "app" and tenants.identify(key).policy.max_tokens == 5
    assert tenants.identify(None).anonymous and tenants.identify("unused").anonymous
    with pytest.raises(ApiError) as unknown:
        tenants.identify(new_key())
    assert unknown.value.status == 401 and unknown.value.code == "invalid_api_key"

    closed = _tenants(redis_url, redis_prefix, allow_anonymous=False)
    assert closed.identify(key).tenant == "app"
    for token in (None, "unused"):
        with pytest.raises(ApiError) as refused:
            closed.identify(token)
        assert refused.value.status == 401

    shared = _tenants(redis_url, redis_prefix, api_keys=["shared-key"])
    assert shared.identify("shared-key").anonymous and shared.identify(key).tenant == "app"
    with pytest.raises(ApiError):
        shared.identify("unused")


def test_while_the_store_is_known_down_a_tenant_key_is_a_503_and_anonymous_goes_on(redis_url, redis_prefix):
    from service.errors import ApiError

    up = {"value": True}
    tenants = _tenants(redis_url, redis_prefix, lambda: up["value"])
    key = new_key()
    tenants.store.write("app", _create("app", key), None)
    up["value"] = False
    with pytest.raises(ApiError) as refused:
        tenants.identify(key)
    assert refused.value.status == 503 and refused.value.headers["Retry-After"] == "1"
    assert tenants.identify("unused").anonymous


def test_the_admin_token_is_a_client_that_reads_every_list(redis_url, redis_prefix):
    from service.tenants.access import may_read_list

    admin_token = "a" * 40
    tenants = _tenants(redis_url, redis_prefix, admin_token=admin_token, api_keys=["shared-key"])
    caller = tenants.identify(admin_token)
    assert caller.admin and not caller.anonymous and caller.label == "admin"
    assert may_read_list(caller, "anyone's", admin=False)


def test_who_may_read_a_list(redis_url, redis_prefix):
    from service.tenants.access import Caller, may_read_list

    tenant = Caller("app", "app", TenantPolicy(own_wordlists=["house"]))
    anonymous = Caller("anonymous", "anonymous", ANONYMOUS_POLICY)
    for caller in (tenant, anonymous, None):
        assert may_read_list(caller, "en", admin=False) and may_read_list(caller, "request", admin=False)
        assert not may_read_list(caller, "private", admin=False)
        assert may_read_list(caller, "private", admin=True)
    assert may_read_list(tenant, "house", admin=False)
    assert not may_read_list(anonymous, "house", admin=False) and not may_read_list(None, "house", admin=False)


def test_a_generation_that_alone_exceeds_the_tokens_per_minute_is_a_400_not_a_429(redis_url, redis_prefix):
    from service.errors import ApiError
    from service.tenants.access import Caller

    tenants = _tenants(redis_url, redis_prefix)
    caller = Caller("app", "app", TenantPolicy(tokens_per_minute=100))
    with pytest.raises(ApiError) as refused:
        tenants.admit_tokens(caller, 101)
    assert refused.value.status == 400 and refused.value.param == "max_tokens"
    tenants.admit_tokens(caller, 100)
    with pytest.raises(ApiError) as limited:
        tenants.admit_tokens(caller, 1)
    assert limited.value.status == 429 and int(limited.value.headers["Retry-After"]) >= 1


# -- the anonymous policy and static keys (issue 31 item 3) ---------------------------------------------------


def test_the_anonymous_policy_is_built_from_the_settings_and_binds_static_keys_too(redis_url, redis_prefix):
    floors = {"anonymous_required_wordlists": ["en"], "anonymous_min_obfuscation": "leet",
              "anonymous_evasion_guard_off": False, "anonymous_request_terms": False, "evasion_guard": "substring"}
    for tenants, token in ((_tenants(redis_url, redis_prefix, **floors), None),
                           (_tenants(redis_url, redis_prefix, api_keys=["static-key"], **floors), "static-key")):
        policy = tenants.identify(token).policy
        assert tenants.identify(token).anonymous
        assert policy.wordlists([], ["en", "de"]) == ["en"]  # "wordlists": [] keeps the required list
        assert policy.wordlists(["de"], ["en"]) == ["en", "de"]
        with pytest.raises(PolicyViolation) as weaker:
            policy.obfuscation_for(Obfuscation.parse("off"), OFF)
        assert weaker.value.param == "obfuscation"
        assert policy.obfuscation_for(None, OFF) == Obfuscation.parse("leet")
        assert policy.obfuscation_for(Obfuscation.parse("masked"), OFF) == Obfuscation.parse("masked")
        with pytest.raises(PolicyViolation) as guard_off:
            policy.evasion_guard_for("off", "substring")
        assert guard_off.value.param == "evasion_guard"
        assert policy.evasion_guard_for("edit", "substring") == "edit"
        with pytest.raises(PolicyViolation) as terms:
            policy.check_request_terms(1, "bad_words")
        assert terms.value.param == "bad_words"
    # At the defaults the anonymous policy has no floor: any list (none too), any level, own terms.
    open_policy = _tenants(redis_url, redis_prefix).identify(None).policy
    assert open_policy.wordlists([], ["en"]) == [] and open_policy.evasion_guard_for("off", "substring") == "off"
    assert open_policy.obfuscation_for("off", "leet") == "off"
    open_policy.check_request_terms(3)


def test_a_bad_anonymous_floor_is_refused_at_start_naming_the_setting():
    from service.settings import Settings

    with pytest.raises(ValidationError, match="anonymous_min_obfuscation"):
        Settings(anonymous_min_obfuscation="leetish")
    with pytest.raises(ValidationError, match="anonymous_required_wordlists"):
        Settings(anonymous_required_wordlists="en,no such list")


def test_each_static_key_counts_in_a_bucket_of_its_own(redis_url, redis_prefix):
    from service.errors import ApiError

    tenants = _tenants(redis_url, redis_prefix, api_keys=["key-one", "key-two"], anonymous_requests_per_minute=2)
    one, two = tenants.identify("key-one"), tenants.identify("key-two")
    assert one.rate_key != two.rate_key and "key-one" not in one.rate_key  # a hash of the key, never the key
    for _ in range(2):
        tenants.admit_request(one)
    with pytest.raises(ApiError) as over:
        tenants.admit_request(one)
    assert over.value.status == 429 and int(over.value.headers["Retry-After"]) >= 1
    tenants.admit_request(two)  # the other key's bucket is untouched
    client = redis.Redis.from_url(redis_url)
    try:
        stored = [key.decode() for key in client.scan_iter(match=f"{redis_prefix}ratelimit*")]
    finally:
        client.close()
    assert stored and all("key-one" not in key and "key-two" not in key for key in stored)
    assert any(one.rate_key in key for key in stored) and any(two.rate_key in key for key in stored)
