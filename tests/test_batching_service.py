"""The service decodes through the batched loop and reports the rows of every forward pass."""

import pytest
from test_service_server import metric

pytestmark = pytest.mark.slow


def test_each_decode_step_observes_its_batch_size(service):
    before = metric(service.metrics(), "guardrail_batch_size_count")
    response = service.chat(max_tokens=4, temperature=0)
    assert response.status_code == 200
    after = service.metrics()
    tokens = response.json()["usage"]["completion_tokens"]
    assert metric(after, "guardrail_batch_size_count") - before >= tokens - 1  # one pass per kept token
    assert metric(after, "guardrail_batch_size_bucket", le="1.0") == metric(after, "guardrail_batch_size_count")
