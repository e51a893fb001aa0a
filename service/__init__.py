"""The guardrail HTTP service: OpenAI-compatible generation with banned terms enforced, the word-list
admin API, Prometheus metrics. Entry point: :func:`service.app.create_app` (``guardrail serve``)."""
