"""Atomic file replacement: readers see the old or the new content, never a mix or a torn write."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, data: bytes | str) -> None:
    """Replace ``path`` with ``data`` (``str`` is written as UTF-8).

    Writes a temporary file in the same directory, fsyncs it, then ``os.replace`` (atomic on POSIX);
    the temporary file is removed if anything fails. Parent directories are created.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
