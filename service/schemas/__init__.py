"""Pydantic request and response bodies of the HTTP API."""
