"""Atomic, durable file replacement: readers see the old or the new content, never a mix or a torn write,
and once :func:`write_atomically` returns the new content survives a crash of the machine too."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def fsync_directory(path: Path) -> None:
    """Make ``path``'s entries durable: a rename into it, a file created or removed in it (POSIX).

    ``fsync`` of a file makes its data durable, not its name: until the directory is synced, a power
    loss can undo a rename (Linux ``fsync(2)``: "Calling fsync() does not necessarily ensure that the
    entry in the directory containing the file has also reached disk. For that an explicit fsync() on a
    file descriptor for the directory is also needed.").

    Raises:
        OSError: the directory cannot be opened or synced.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes | str) -> None:
    """Replace ``path`` with ``data`` (``str`` is written as UTF-8).

    Writes a temporary file in the same directory, fsyncs it, ``os.replace`` (atomic on POSIX), then
    fsyncs the directory so that the rename itself is durable: when this returns, a crash of the process
    or of the machine leaves the new content. The temporary file is removed if anything fails before
    the rename. Parent directories are created.

    Raises:
        OSError: the file or its directory cannot be written or synced (the old content stays in place
            when it fails before the rename).
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
    fsync_directory(path.parent)


def write_json_atomically(path: Path, data: Any) -> None:
    """Replace ``path`` with ``data`` as JSON (UTF-8, indent 1, non-ASCII kept), through
    :func:`write_atomically`: the commit point of an index that several files hang on.

    Raises:
        OSError: as :func:`write_atomically`.
        TypeError: ``data`` is not JSON-serialisable (nothing is written).
    """
    write_atomically(path, json.dumps(data, indent=1, ensure_ascii=False))


def read_json(path: Path) -> Any | None:
    """What :func:`write_json_atomically` last wrote to ``path`` (never a partial write), or ``None`` when
    ``path`` does not exist.

    Raises:
        OSError: ``path`` cannot be read.
        ValueError: it is not JSON (``json.JSONDecodeError``) or not UTF-8.
    """
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return json.loads(raw)
