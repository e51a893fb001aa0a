"""The service's vLLM-named metrics match the installed vLLM's: same name after the prefix, same buckets
(docs/metrics.md, "vLLM names")."""

import re
from pathlib import Path

import pytest

pytest.importorskip("vllm.v1.metrics.loggers")

from helpers.paths import ROOT
from vllm.v1.metrics import buckets as vllm_buckets  # noqa: E402

from service import metrics  # noqa: E402

DOC = ROOT / "docs" / "metrics.md"


def test_the_latency_buckets_are_vllms():
    assert metrics.VLLM_TTFT_BUCKETS == tuple(vllm_buckets.TIME_TO_FIRST_TOKEN_BUCKETS)
    assert metrics.VLLM_TOKEN_LATENCY_BUCKETS == tuple(vllm_buckets.INTER_TOKEN_LATENCY_BUCKETS)
    assert metrics.VLLM_REQUEST_LATENCY_BUCKETS == tuple(vllm_buckets.REQUEST_LATENCY_BUCKETS)


def test_the_token_buckets_are_vllms_1_2_5_series():
    cap = 131072  # vLLM stops at max_model_len; the service at 10**6 for every model
    ours = metrics.token_count_buckets()
    assert [b for b in ours if b <= cap] == list(vllm_buckets.build_1_2_5_buckets(cap))


#: Rows of the mapping table whose guardrail name is not vLLM's after the prefix (why: the table's note).
OTHER_NAMES = {
    "vllm:prompt_tokens_cached_total": "guardrail_prompt_cached_tokens_total",
    "vllm:spec_decode_num_draft_tokens_total": "guardrail_draft_tokens_total",
}


def test_every_vllm_name_of_the_mapping_table_exists_in_vllm_and_keeps_its_name_after_the_prefix():
    import vllm.v1

    sources = "".join(p.read_text(encoding="utf-8") for p in Path(vllm.v1.__file__).parent.rglob("*.py"))
    declared = set(re.findall(r'"(vllm:[a-z0-9_]+)"', sources))
    table = DOC.read_text(encoding="utf-8").split("## vLLM names", 1)[1]
    rows = [row for row in table.splitlines() if row.startswith("| `vllm:")]
    assert len(rows) >= 12
    for row in rows:
        name = re.match(r"\| `(vllm:[a-z0-9_]+)[`{]", row).group(1)  # {labels} may follow
        assert re.sub(r"_total$", "", name) in declared, name  # prometheus_client adds a counter's _total
        ours = re.search(r"\| `(guardrail_[a-z0-9_]+)[`{]", row).group(1)
        assert ours == OTHER_NAMES.get(name, "guardrail_" + name.removeprefix("vllm:")), row
