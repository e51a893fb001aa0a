"""Regular-expression terms (``re:PATTERN``) under the text contract: what a pattern means over normalised text
(:mod:`.term`), its Thompson NFA with word-boundary assertions (:mod:`.nfa`), the DFA over normalised
characters that knows where matches began (:mod:`.automaton`), and which tokens can complete a match
(:mod:`.tokens`). docs/matching.md, "Regex terms"."""
