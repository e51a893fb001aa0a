"""An append-only audit log on disk, one JSON record per line, oldest first: what the embedded word-list store
(``<data_dir>/audit.jsonl``) and the embedded tenant store (``<data_dir>/tenant-audit.jsonl``) keep.

Each append is fsynced; a last line without its newline (an append a crash interrupted) is cut off when the
log is opened. The file is compacted to the newest ``max_records`` records (replaced atomically,
:func:`guardrail.atomic_file.write_atomically`) once it holds twice as many: amortised O(1) per record.
Not thread-safe: the stores call it under their own lock.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from guardrail.atomic_file import write_atomically

log = logging.getLogger("guardrail.service.store")


class JsonLinesLog:
    """The log in ``path`` (created by the first append).

    Args:
        path: the JSON-lines file.
        max_records: records kept when the file is compacted.

    Raises:
        OSError: at construction, an existing file cannot be read or its torn record cut.
    """

    def __init__(self, path: Path, max_records: int) -> None:
        self.path = path
        self.max_records = max_records
        self._lines = 0
        if path.exists():
            self._cut_torn_record()
            with path.open(encoding="utf-8") as handle:
                self._lines = sum(1 for _ in handle)

    def _cut_torn_record(self) -> None:
        """Drop a last line without its newline: an append a crash interrupted."""
        data = self.path.read_bytes()
        if not data or data.endswith(b"\n"):
            return
        with self.path.open("rb+") as handle:
            handle.truncate(data.rfind(b"\n") + 1)
            handle.flush()
            os.fsync(handle.fileno())
        log.warning("cut a torn audit record (a crash during an append)", extra={"path": str(self.path)})

    def append(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one JSON line and fsync it; compact the file when it is due.

        Raises:
            OSError: the file cannot be written or synced.
        """
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self._lines += 1
        if self._lines > 2 * self.max_records:  # compact rarely
            lines = self.path.read_text(encoding="utf-8").splitlines()[-self.max_records:]
            write_atomically(self.path, "\n".join(lines) + "\n")
            self._lines = len(lines)

    def newest(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` records, newest first (``[]`` before the first append).

        Raises:
            OSError: the file cannot be read.
            ValueError: a line is not JSON.
        """
        if not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in reversed(lines[-limit:]) if line]
