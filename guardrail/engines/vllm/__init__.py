"""The vLLM engine: the guard as a vLLM v1 logits processor, and rollback on vLLM by resubmission (docs/vllm.md)."""
