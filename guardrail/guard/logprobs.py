"""Log-probabilities of the delivered tokens: what an engine measures at a pick, and the records released
to the client with the text that holds them (docs/design.md, "Logprobs: the release rule").

An engine that was asked for logprobs hands :meth:`GuardSession.accept` a :class:`PickLogprobs` with every
pick. The session keeps it next to the kept token (a rolled-back token's pick goes with the token: it is
never released) and the :class:`LogprobLedger` turns it into a :class:`TokenLogprob` once the token is
*delivered*:

- a token's record is released with the :class:`~guardrail.guard.events.TextDelta` that releases its last
  byte (hold-back may release a token's text in several deltas: the record travels with the last one), and
  only once no rollback can reach the token any more (it lies before the session's frontier);
- records are released in token order, exactly once each;
- :attr:`TokenLogprob.token` is the text the token *completes*: the characters whose last byte is in the
  token (a character split across tokens belongs to the token that ends it), so the concatenation of the
  released records' ``token`` strings is always a prefix of the released text, and equals the answer once
  the stream finished;
- at the end, a stop string that begins inside a token cuts that token: its record carries the part of its
  bytes and text before the stop string; tokens after it (the stop string's) get no record.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass

from guardrail.params import MAX_TOP_LOGPROBS as MAX_TOP_LOGPROBS  # re-exported: the record types' limit


@dataclass(frozen=True)
class PickLogprobs:
    """What an engine measured when it picked a token (before the guard judged it).

    Attributes:
        logprob: natural log-probability of the picked token (nats, ``<= 0``; ``-inf`` allowed) in the
            distribution the engine reports (the transformers engine: the model's raw logits, see
            docs/design.md).
        top: up to ``k`` ``(token id, logprob)`` alternatives, most likely first (``k`` =
            ``SamplingParams.logprobs``).
    """

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class TopLogprob:
    """One alternative at a position (OpenAI's ``top_logprobs[]`` item).

    Attributes:
        token_id: the token id.
        token: its text (``bytes.decode("utf-8", "replace")``: a partial character shows as U+FFFD).
        bytes: its bytes.
        logprob: its log-probability (nats).
    """

    token_id: int
    token: str
    bytes: bytes
    logprob: float


@dataclass(frozen=True)
class TokenLogprob:
    """The log-probability record of one delivered token (OpenAI's ``logprobs.content[]`` item).

    Attributes:
        token_id: the token id.
        token: the text of the answer this token completes (see the module docstring); concatenated over
            the records, the answer.
        bytes: the token's bytes that are in the answer (all of them, except a token cut by a stop string).
        logprob: its log-probability (nats).
        top: the alternatives at its position, most likely first.
    """

    token_id: int
    token: str
    bytes: bytes
    logprob: float
    top: tuple[TopLogprob, ...] = ()


class LogprobLedger:
    """The picks of the kept tokens, and the cursor of the records already released.

    Args:
        token_bytes: bytes per token id (``TokenVocab.token_bytes``).

    Attributes:
        sent: records released so far (never decreases; no rollback goes below it).
    """

    def __init__(self, token_bytes: Sequence[bytes]):
        self._token_bytes = token_bytes
        self._picks: list[PickLogprobs] = []
        self.sent = 0
        # The answer's bytes decoded token by token: a token's text is what it completes.
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def __len__(self) -> int:
        return len(self._picks)

    def keep(self, pick: PickLogprobs) -> None:
        """The pick of the next kept token."""
        self._picks.append(pick)

    def truncate(self, tokens: int) -> None:
        """Keep the picks of the first ``tokens`` tokens.

        Raises:
            RuntimeError: the cut would drop a released record (a session invariant broke).
        """
        if tokens < self.sent:
            raise RuntimeError(f"truncating to {tokens} tokens would retract released logprobs (sent {self.sent})")
        del self._picks[tokens:]

    def release(self, token_ids: Sequence[int], ends: Sequence[int], data: bytes | bytearray, count: int
                ) -> tuple[TokenLogprob, ...]:
        """The records of tokens ``[sent, count)``, each of them wholly released and final.

        Args:
            token_ids: the kept tokens.
            ends: ``ends[i]``: byte offset after the first ``i`` tokens (``ends[0] == 0``).
            data: the answer's bytes so far.
            count: tokens delivered (whole) so far.
        """
        if count <= self.sent:
            return ()
        out = [self._record(token_ids[i], bytes(data[ends[i]:ends[i + 1]]), i) for i in range(self.sent, count)]
        self.sent = count
        return tuple(out)

    def finish(self, token_ids: Sequence[int], ends: Sequence[int], data: bytes | bytearray, cut: int
               ) -> tuple[TokenLogprob, ...]:
        """The last records: every token before byte ``cut`` (the answer's end), and the token holding
        ``cut`` with its bytes before it (a stop string began inside that token)."""
        whole = 0
        while whole < len(token_ids) and ends[whole + 1] <= cut:
            whole += 1
        # The last record is decoded as the end of the text: a dangling partial character becomes U+FFFD, as
        # in the answer (TextBuffer.release(final=True)). Records all released before keep the bytes their
        # text lacks (only an answer ending inside a character that a rollback budget cut there).
        last = whole + 1 if whole < len(token_ids) and ends[whole] < cut else whole
        out = [self._record(token_ids[i], bytes(data[ends[i]:min(ends[i + 1], cut)]), i, final=i == last - 1)
               for i in range(self.sent, last)]
        self.sent = max(self.sent, last)
        return tuple(out)

    def _record(self, token_id: int, piece: bytes, index: int, final: bool = False) -> TokenLogprob:
        pick = self._picks[index]
        top = tuple(TopLogprob(t, self._token_bytes[t].decode("utf-8", "replace"), self._token_bytes[t], lp)
                    for t, lp in pick.top)
        return TokenLogprob(token_id, self._decoder.decode(piece, final), piece, pick.logprob, top)
