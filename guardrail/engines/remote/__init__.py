"""The gateway engine: guard an inference server that already runs, over HTTP (docs/engines.md)."""
