"""Tenant API keys: how they are made, how they are stored and how a bearer token is recognised as one.

A key is ``grk_`` followed by 32 random bytes (256 bits, ``secrets.token_urlsafe``); it is shown once, when it
is created or rotated, and only its SHA-256 is stored. A fast, unsalted hash is enough here, unlike for
passwords: a slow, salted hash (bcrypt, scrypt, Argon2) defends low-entropy secrets against guessing, and a
256-bit random key cannot be guessed whatever the hash costs; a plain digest also lets a request find its
tenant with one lookup by hash, at no cost per request (OWASP Password Storage Cheat Sheet; GitHub and
Stripe store their API tokens the same way).
"""

from __future__ import annotations

import hashlib
import secrets

#: Every tenant key starts with it: a bearer token that does is a tenant key and must be a live one (401
#: otherwise); any other token is no tenant key (the official ``openai`` client always sends one).
KEY_PREFIX = "grk_"
_KEY_BYTES = 32


def new_key() -> str:
    """A fresh random tenant key (``grk_`` + 43 URL-safe characters, 256 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(_KEY_BYTES)


def is_tenant_key(token: str) -> bool:
    """Whether ``token`` is written as a tenant key (whether or not one with that value exists)."""
    return token.startswith(KEY_PREFIX)


def key_hash(key: str) -> str:
    """What the store keeps of a key: its SHA-256, 64 hex digits (see the module's docstring for why)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def key_id(digest: str) -> str:
    """A short, non-secret name of a key for listings and audit records: 12 hex digits of its SHA-256
    (as :func:`service.auth.token_id` names admin tokens)."""
    return digest[:12]
