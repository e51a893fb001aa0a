"""Shared fixtures: the real bundled tokenizers and models, and the real Redis.

Everything is session-scoped and built on first use, so a test run pays for each tokenizer or model at
most once (first run on a machine: tokenizers ~10-30 s, model ~30-60 s from gguf; afterwards ~1 s each
from guardrail's disk cache, see guardrail/models.py).

The ``slow`` marker (``pytest -m "not slow"``, ``make test-fast``): a test is slow when it loads a real
model. :func:`pytest_collection_modifyitems` marks every test that uses, directly or through other fixtures,
one of :data:`MODEL_FIXTURES` (the model weights, the shared service, which loads SmolLM2, or vLLM);
tests that load a model without such a fixture (``load_model`` in the test, a service or CLI in a
subprocess) carry an explicit ``@pytest.mark.slow``, and so do the two modules whose brute-force vocab
sweeps and property searches take minutes (``test_mask.py``, ``test_regex_tokens.py``), and the few tests
that compile a full list twice or build automata up to their size limits. Tokenizers are not
slow: other tests that use only ``smollm2_tokenizer``, ``gemma3_tokenizer`` or a vocab run in
``make test-fast``.
"""

import os

# Before transformers is imported anywhere: the bundled models are local files and a test must never
# reach for the Hugging Face Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import uuid  # noqa: E402

import pytest  # noqa: E402
import redis  # noqa: E402
from hypothesis import settings  # noqa: E402

from guardrail.matching.vocab import TokenVocab  # noqa: E402
from guardrail.models import load_model, load_tokenizer  # noqa: E402

REDIS_URL = "redis://127.0.0.1:6379/0"

# Hypothesis derandomised suite-wide: every run draws the same cases (seeded from each test's name), so a
# failure in CI reproduces on a laptop, and no example database carries cases from one run to the next.
# Registered before the test modules are imported: their @settings(...) inherit these fields. A module must
# not set derandomize=False (tests/test_hypothesis_profile.py checks). HYPOTHESIS_PROFILE=dev draws new cases
# on every run, for hunting bugs locally.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("dev", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The service's server fixtures (`service`, `openai_client`), shared by the tests/service/ modules.
pytest_plugins = ["helpers.service_fixtures"]

# Fixtures that load model weights (see the module's docstring): a test using any of them is marked slow.
# driver and run_plain_vllm: the vLLM engine on SmolLM2, in this process or another (tests/engines/vllm/).
MODEL_FIXTURES = frozenset({"smollm2_model", "smollm2_decoder", "gemma3_model", "service", "openai_client", "driver", "run_plain_vllm"})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    return load_tokenizer("smollm2")


@pytest.fixture(scope="session")
def gemma3_tokenizer():
    return load_tokenizer("gemma3")


@pytest.fixture(scope="session")
def smollm2_vocab(smollm2_tokenizer):
    return TokenVocab.from_tokenizer(smollm2_tokenizer)


@pytest.fixture(scope="session")
def gemma3_vocab(gemma3_tokenizer):
    return TokenVocab.from_tokenizer(gemma3_tokenizer)


@pytest.fixture(scope="session")
def tok(smollm2_tokenizer):
    """``tok(" hello")`` -> the single SmolLM2 token id of that text (asserts it is one token)."""
    def one(text):
        ids = smollm2_tokenizer.encode(text, add_special_tokens=False)
        assert len(ids) == 1, (text, ids)
        return ids[0]
    return one


@pytest.fixture(scope="session")
def smollm2_model():
    """SmolLM2-135M-Instruct, float32, eval mode. Tests using it are slow (marked at collection)."""
    return load_model("smollm2")


@pytest.fixture(scope="module")
def smollm2_decoder(smollm2_model, smollm2_tokenizer):
    """The rollback decoder on SmolLM2 with the model's generation EOS ids (one per test module, as each
    module's decoder always was: it keeps no state between streams, but a module owns its own)."""
    from guardrail.engines.transformers.decoder import StreamingDecoder, generation_eos_ids

    vocab = TokenVocab.from_tokenizer(smollm2_tokenizer, eos_ids=generation_eos_ids(smollm2_model))
    return StreamingDecoder(smollm2_model, smollm2_tokenizer, vocab)


@pytest.fixture(scope="session")
def gemma3_model():
    """Gemma 3 270M base, float32, eval mode (sliding-window layers: window 512). Tests using it are slow."""
    return load_model("gemma3")


@pytest.fixture(scope="session")
def redis_url():
    """The real Redis CI starts (.ci/run). Not answering is a failure, never a skip: a skipped Redis
    test proves nothing."""
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis at {REDIS_URL} does not answer ({exc}); start it: redis-server --port 6379", pytrace=False)
    finally:
        client.close()
    return REDIS_URL


@pytest.fixture
def redis_prefix(redis_url):
    """A key prefix of this test's own (``guardrail-test:<uuid>:``); its keys are deleted afterwards."""
    prefix = f"guardrail-test:{uuid.uuid4().hex}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()
