"""Structured output under the guard: a JSON grammar's token mask combined with the guard's
(docs/structured-output.md).

:mod:`guardrail.grammar.format` describes what a request asks for (engine-neutral, no dependency);
:mod:`guardrail.grammar.matcher` compiles it with llguidance and follows the guard session's kept tokens,
rollbacks included.
"""
