"""guardrail: a tokenizer-level banned-term automaton and a KV-cache rollback decoder.

The public Python API lives in :mod:`guardrail.api` (``Guard``); the compiler in
:mod:`guardrail.compiler`; the text contract in :mod:`guardrail.textmatch`.
"""

__version__ = "0.1.0"
