"""Tenants: API keys with a policy each (default and allowed lists, request terms, evasion guard,
obfuscation, max tokens, rate limits), stored beside the word lists (docs/service.md, "Tenants")."""
