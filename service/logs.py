"""Structured logs: one JSON object per line on stderr.

Fields: ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, plus whatever the call passed in
``extra=`` (request id, endpoint, status, durations, token counts). Prompt and completion text are only
ever passed in ``extra`` by code paths guarded by ``GUARDRAIL_DEBUG_LOG_PROMPTS``.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from datetime import UTC, datetime

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
# uvicorn adds "color_message" (its message with ANSI colours) to some records: noise in JSON.
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime", "taskName", "color_message"}


#: Names a log record lists at most (:func:`capped_names`) and the characters they may take together: a request
#: body of 16 MiB of unknown keys must not become a 16 MiB log line.
MAX_LOGGED_NAMES = 20
MAX_LOGGED_NAME_CHARS = 1024


def capped_names(names: Iterable[str], max_count: int = MAX_LOGGED_NAMES,
                 max_chars: int = MAX_LOGGED_NAME_CHARS) -> tuple[list[str], int]:
    """The first names of ``names`` (in their order) to log, at most ``max_count`` of them and ``max_chars``
    characters together (a name cut to what is left ends with ``…``), and how many there were in all."""
    kept: list[str] = []
    total = 0
    room = max_chars
    for name in names:
        total += 1
        if len(kept) < max_count and room > 0:
            shown = name if len(name) <= room else name[:max(room - 1, 0)] + "…"
            kept.append(shown)
            room -= len(shown)
    return kept, total


class JsonFormatter(logging.Formatter):
    """Format a record as one JSON line (non-JSON values are written with ``str``)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(level: str = "INFO") -> None:
    """Send the service's and uvicorn's logs to stderr as JSON lines (idempotent)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    for name in ("guardrail", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel(level)
        # uvicorn's loggers stop here (its own config does the same); ours also reach the root logger,
        # which has no handler in a server but lets pytest's log capture see them.
        logger.propagate = name == "guardrail"
    # Our middleware writes the access log (with the route, not the raw path); uvicorn's would repeat it.
    logging.getLogger("uvicorn.access").disabled = True
