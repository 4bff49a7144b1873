"""Crash-safe JSON Lines files: a locked appender and a reader that tolerates a killed writer.

One JSON value per line. Tuning record logs (:mod:`tune_gym.records`) and the benchmark
results files are such files; this module is what writes and reads them.

Writing (:class:`JsonlAppender`, :func:`append_json`): the file is opened with ``O_APPEND``
and every batch of lines goes out in one ``write`` followed by ``fsync``, so a process killed
at any moment loses at most the batch being written, and what it leaves behind is at worst a
torn (truncated) last line. The next appender, holding the lock (so no writer is mid-line),
cuts that line off with a warning before it writes; a last line that is a complete value and
lacks only its newline is kept, and any other unterminated last line is left for readers to
report, with the new lines starting on a fresh line after it. :meth:`JsonlAppender.clear` empties
the file under the lock, for a journal whose lines were moved elsewhere (fsynced there first).

Locking: an appender holds an exclusive advisory lock, ``fcntl.flock(LOCK_EX | LOCK_NB)``, on
the file itself for as long as it is open, so a second appender of the same file (another
process, or another appender in the same process: flock locks belong to an open file
description) fails at once with an error naming the file instead of interleaving its lines.
The lock is on the file itself, not on a sidecar ``.lock`` file, so nothing is left behind; it
is released by :meth:`JsonlAppender.close` or when the process dies. Readers take no lock: an
appender only ever adds whole lines (or, when killed, a torn last line a reader skips). The
lock is advisory: a program that writes without taking it is not stopped, and on network
file systems it is only as good as the server's lock support.

Reading (:func:`read_jsonl`): yields ``(line number, value)`` for each non-blank line. A torn
line (an unfinished JSON text, what a killed writer leaves) is skipped with a warning, or is
an error with ``strict=True``; any other line that is not one JSON value is an error naming
``file:line``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from tune_gym.errors import TuneGymError

__all__ = ["MAX_LINE_BYTES", "JsonlAppender", "JsonlError", "append_json", "first_value", "is_torn", "read_jsonl",
           "scan_jsonl"]

#: The longest line :func:`first_value` reads when it looks for a file's first value.
MAX_LINE_BYTES = 16 << 20
#: How an error is raised: a class (or function) taking the one-line message.
ErrorFactory = Callable[[str], Exception]

_NUMBER_PREFIX = re.compile(r"-?\d*\.?\d*(?:[eE][+-]?\d*)?")
_LITERALS = ("true", "false", "null", "NaN", "Infinity", "-Infinity")


class JsonlError(TuneGymError):
    """A JSON Lines file that cannot be read or appended to."""


def is_torn(line: str) -> bool:
    """True when ``line`` is an unfinished JSON text (what a killed writer leaves behind):
    a proper prefix of some JSON value, cut inside a string, a number, a literal or between tokens."""
    try:
        json.loads(line)
        return False
    except json.JSONDecodeError as err:
        tail = line[err.pos:].rstrip()
        return (err.msg.startswith("Unterminated string") or not tail
                or any(lit.startswith(tail) for lit in _LITERALS)
                or _NUMBER_PREFIX.fullmatch(tail) is not None)
    except (ValueError, RecursionError):  # e.g. an integer of more digits than Python converts
        return False


def _decode(raw: bytes) -> tuple[Any, str | None, bool]:
    """``(value, why it failed or None, torn)`` of one line's bytes."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:  # a kill may cut a multi-byte character at the very end
        if err.reason == "unexpected end of data" and err.end == len(raw.rstrip(b"\r")):
            return None, "truncated UTF-8", True
        return None, f"not UTF-8 text (byte {err.start + 1})", False
    try:
        return json.loads(text), None, False
    except json.JSONDecodeError as err:
        return None, f"invalid JSON ({err.msg} at column {err.colno})", is_torn(text)
    except (ValueError, RecursionError) as err:
        return None, f"invalid JSON ({type(err).__name__}: {str(err)[:80]})", False


def scan_jsonl(path: str | os.PathLike[str], *,
               error: ErrorFactory = JsonlError) -> Iterator[tuple[int, Any, str | None, bool]]:
    """Yield ``(line number from 1, value, why it is not one JSON value or None, torn)`` of every
    non-blank line of ``path``, leaving it to the caller what to do with a bad line.

    Raises:
        ``error("FILE: ...")`` when the file cannot be opened.
    """
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the with below; open errors become one line
    except OSError as err:
        raise error(f"{path}: cannot read ({err.strerror})") from None
    with f:
        for number, raw in enumerate(f, start=1):
            raw = raw.rstrip(b"\n")
            if raw.strip():
                yield number, *_decode(raw)


def read_jsonl(path: str | os.PathLike[str], *, strict: bool = False,
               error: ErrorFactory = JsonlError) -> Iterator[tuple[int, Any]]:
    """Yield ``(line number from 1, value)`` of every non-blank line of ``path``.

    Args:
        path: the file (it must exist).
        strict: a torn line is an error too (by default it is skipped with a ``UserWarning``).
        error: what to raise, given the one-line message (``JsonlError`` by default).

    Raises:
        ``error("FILE:LINE: ...")`` for a line that is not one JSON value (and is not torn, or
        ``strict``); ``error("FILE: ...")`` when the file cannot be opened.
    """
    for number, value, why, torn in scan_jsonl(path, error=error):
        if why is None:
            yield number, value
        elif torn and not strict:
            warnings.warn(f"{path}:{number}: skipping a truncated line (a writer was killed while writing it)",
                          stacklevel=2)
        elif torn:
            raise error(f"{path}:{number}: truncated line (a writer was killed while writing it)")
        else:
            raise error(f"{path}:{number}: {why}")


def first_value(fd: int) -> tuple[int, Any] | None:
    """``(line number, value)`` of the first line of the open file ``fd`` that is one JSON value,
    or ``None`` when there is none (an empty file, or only blank and torn lines). A line longer
    than :data:`MAX_LINE_BYTES` is read in pieces, each taken as a line.

    Raises:
        JsonlError: a line before it is neither blank, torn nor one JSON value (not a JSON
            Lines file), naming the line.
    """
    with open(os.dup(fd), "rb") as f:
        f.seek(0)
        number = 0
        while raw := f.readline(MAX_LINE_BYTES):
            number += 1
            body = raw.rstrip(b"\n")
            if not body.strip():
                continue
            value, why, torn = _decode(body)
            if why is None:
                return number, value
            if not torn:
                raise JsonlError(f"line {number}: {why}")
        return None


class JsonlAppender:
    """Appends lines of JSON to one file, each batch one fsynced ``write``, under an exclusive
    lock held until :meth:`close` (see the module docstring). A context manager.

    Args:
        path: the file; created (with its directory) when missing.
        accept: called once the lock is held, with ``(line number, value)`` of the file's first
            line that is one JSON value (:func:`first_value`), or ``None`` for a file without
            one; it raises to refuse the file (e.g. one of another format), and the appender
            is not opened.
        error: what to raise on a refusal, given the one-line message.
        what: what the file should be, for messages (``"record log"``).
        allow_nan: write ``NaN`` / ``Infinity`` (not JSON; by default a ``ValueError``).

    Raises:
        ``error(...)``: ``path`` is a directory or cannot be opened, another appender holds its
            lock, or it is not a JSON Lines file.
    """

    def __init__(self, path: str | os.PathLike[str], *,
                 accept: Callable[[tuple[int, Any] | None], None] | None = None,
                 error: ErrorFactory = JsonlError, what: str = "JSON Lines file", allow_nan: bool = False) -> None:
        self.path = Path(path)
        self.what = what
        self._allow_nan = allow_nan
        self._fd: int | None = None
        self._fd = self._open(error)
        try:
            self._lock(error)
            self._check(accept, error)
            self._needs_newline = self._cut_torn_tail()
        except BaseException:
            self.close()
            raise

    def _open(self, error: ErrorFactory) -> int:
        if self.path.is_dir():
            raise error(f"{self.path} is a directory, not a {self.what}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as err:
            raise error(f"{self.path}: cannot open for appending ({err.strerror})") from None

    def _lock(self, error: ErrorFactory) -> None:
        assert self._fd is not None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise error(f"{self.path} is being written by another writer (it holds the file's lock); "
                        "wait for it to finish or write to another file") from None

    def _check(self, accept: Callable[[tuple[int, Any] | None], None] | None, error: ErrorFactory) -> None:
        assert self._fd is not None
        if os.pread(self._fd, 4, 0) == b"PAR1":
            raise error(f"{self.path} is a Parquet file, not a {self.what}")
        try:
            first = first_value(self._fd)
        except JsonlError as err:
            raise error(f"{self.path} is not a {self.what} ({err})") from None
        if accept is not None:
            accept(first)

    def _cut_torn_tail(self) -> bool:
        """Cut off a torn last line (a killed writer's); True when the file then does not end
        with a newline (a complete last value without one, or a corrupt line left to readers)."""
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if size == 0 or os.pread(self._fd, 1, size - 1) == b"\n":
            return False
        start = _last_line_start(self._fd, size)
        _, why, torn = _decode(os.pread(self._fd, size - start, start))
        if why is None or not torn:
            return True
        os.ftruncate(self._fd, start)
        os.fsync(self._fd)
        warnings.warn(f"{self.path}:{_line_number(self._fd, start)}: cut off a truncated last line "
                      "(a writer was killed while writing it)", stacklevel=3)
        return False

    @property
    def closed(self) -> bool:
        return self._fd is None

    def append(self, values: Iterable[Any]) -> None:
        """Write one line per value with one ``write``, then flush them to disk."""
        if self._fd is None:
            raise ValueError(f"JsonlAppender({self.path}) is closed")
        text = "".join(json.dumps(v, allow_nan=self._allow_nan) + "\n" for v in values)
        if not text:
            return
        data = memoryview((("\n" if self._needs_newline else "") + text).encode("utf-8"))
        while data:
            data = data[os.write(self._fd, data):]
        os.fsync(self._fd)
        self._needs_newline = False

    def clear(self) -> None:
        """Empty the file, the lock still held, and flush that to disk (what it held is
        elsewhere by then: e.g. packed into another file)."""
        if self._fd is None:
            raise ValueError(f"JsonlAppender({self.path}) is closed")
        os.ftruncate(self._fd, 0)
        os.fsync(self._fd)
        self._needs_newline = False

    def close(self) -> None:
        """Release the lock and close the file (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the last descriptor of the open file releases its flock

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            self.close()


def _last_line_start(fd: int, size: int, chunk: int = 1 << 16) -> int:
    """Offset just after the last newline of the file ``fd`` of ``size`` bytes (0 if none)."""
    end = size
    while end > 0:
        begin = max(0, end - chunk)
        cut = os.pread(fd, end - begin, begin).rfind(b"\n")
        if cut >= 0:
            return begin + cut + 1
        end = begin
    return 0


def _line_number(fd: int, offset: int, chunk: int = 1 << 20) -> int:
    """1-based number of the line that starts at ``offset`` of the file ``fd``."""
    count, pos = 1, 0
    while pos < offset:
        data = os.pread(fd, min(chunk, offset - pos), pos)
        count += data.count(b"\n")
        pos += len(data)
    return count


def append_json(path: str | os.PathLike[str], value: Any, *, error: ErrorFactory = JsonlError,
                allow_nan: bool = False) -> None:
    """Append one line (one fsynced write) under the file's lock, taken and released here.

    Fails like :class:`JsonlAppender` when another appender holds the lock."""
    with JsonlAppender(path, error=error, allow_nan=allow_nan) as appender:
        appender.append([value])
