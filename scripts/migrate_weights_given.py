"""Mark tuning records measured before ``weights=packed`` became the default as ``weights=given``.

Usage:
    python scripts/migrate_weights_given.py FILE [FILE ...] [--before UNIX_TIME] [--dry-run]

Records written before tasks had a ``weights`` option were measured with the weights in the
op's own layout, which is now spelled ``weights=given``; the same URI without a ``weights``
field now means the packed default (on ``llvm``, for ops with weight inputs). For each record
whose task URI has no ``weights`` field and whose task's default is not ``given``, this rewrites
the ``task`` field to the URI of the same task with ``weights=given``
(``op://dense-v1/m32_n32_k32?target=llvm`` -> ``op://dense-v1/m32_n32_k32?weights=given&target=llvm``).
Every other line is kept byte for byte (records of ``cuda`` or ``batch_matmul`` tasks, whose
default already is ``given``; records that name ``weights``; blank or torn lines), and so is
every other field of a rewritten record (configs, knobs and results mean the same: the knob
space is the same in both layouts).

Records measured after the change (without a ``weights`` field, so packed) would be mislabelled:
run this only on files written before it, or pass ``--before`` with the time of the change
(records with ``time`` at or after it are kept). Running it twice changes nothing the second
time. Each file is rewritten atomically (a temporary file in the same directory, fsynced, then
renamed over it, keeping the file's mode); stop any process appending to a file first, or its
appends made during the rewrite are lost.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from tune_gym.errors import TaskError
from tune_gym.tasks import Task


def migrate_uri(uri: str) -> str:
    """``uri`` with ``weights=given`` when it names no weight layout and its default is not given."""
    _, _, query = uri.partition("?")
    if any(part.partition("=")[0] == "weights" for part in query.split("&")):
        return uri
    task = Task.from_uri(uri)
    return uri if task.weights == "given" else task.with_weights("given").uri


def migrate_lines(lines: list[str], before: float | None = None) -> tuple[list[str], int]:
    """The lines of a record file with old records' URIs marked given, and how many changed."""
    out, changed = [], 0
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # blank or torn: load_records decides what to do with it
            out.append(line)
            continue
        if not isinstance(record, dict) or not isinstance(record.get("task"), str):
            out.append(line)
            continue
        if before is not None and float(record.get("time", 0.0)) >= before:
            out.append(line)
            continue
        new = migrate_uri(record["task"])
        if new == record["task"]:
            out.append(line)
            continue
        record["task"] = new
        end = line[len(line.rstrip("\r\n")):]
        out.append(json.dumps(record) + end)
        changed += 1
    return out, changed


def migrate_file(path: str | os.PathLike[str], before: float | None = None, dry_run: bool = False) -> int:
    """Rewrite one record file in place (atomically); return the number of records changed."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    lines, changed = migrate_lines(text.splitlines(keepends=True), before)
    if changed == 0 or dry_run:
        return changed
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("".join(lines))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", help="JSONL record files")
    parser.add_argument("--before", type=float, help="only records with time < this unix time")
    parser.add_argument("--dry-run", action="store_true", help="count, do not write")
    args = parser.parse_args(argv)
    status = 0
    for name in args.files:
        try:
            n = migrate_file(name, args.before, args.dry_run)
        except (OSError, TaskError, ValueError) as err:
            print(f"{name}: {err}", file=sys.stderr)
            status = 1
            continue
        print(f"{name}: {n} record(s) {'would be ' if args.dry_run else ''}marked weights=given")
    return status


if __name__ == "__main__":
    sys.exit(main())
