"""Convert a ``tir://`` kernel store directory from the old TVMScript form to the current form.

Usage:
    python scripts/convert_tir_store.py DIRECTORY [DIRECTORY ...] [--dry-run]

Old store files held a kernel as TVMScript (``{"name", "digest", "script"}``). Parsing TVMScript
runs Python, so the store no longer reads that form (:mod:`tune_gym.tasks.prim_func`). This
script parses the old files of the directories named on its command line, and only those: run
it on directories whose files you trust (the repository's ``benchmarks/networks/tir/``, your own
``~/.cache/tune_gym/tir``), never on files from elsewhere.

Each old file is rewritten in place in :data:`~tune_gym.tasks.prim_func.FORMAT` with its name
kept, after checking that its digest does not change: the parsed module must print back to the
file's script exactly and hash to the file's name and ``digest`` field, and the written file
must read back through the store's own checks (:func:`~tune_gym.tasks.prim_func.read_kernel`)
to the same TVMScript. Files already in the current form are read (checked) and left as they
are. A file that fails a check is reported on one line and left unchanged; the exit status is
then 1. Each file is replaced atomically; running the script twice changes nothing the second
time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tune_gym.errors import TaskError
from tune_gym.tasks.prim_func import digest_of, read_kernel, write_kernel


def _parse_trusted(script: str) -> Any:
    """The IRModule of a trusted TVMScript text (this runs the text's Python)."""
    from tune_gym.tvm_support import tvm

    tvm()
    from tvm.script import from_source

    return from_source(script)


def convert_file(path: Path, dry_run: bool = False) -> str:
    """Convert one store file; returns ``"converted"`` or ``"current"``.

    Raises:
        TaskError: the file is neither a current store file nor an old one whose digest holds.
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise TaskError(f"{path}: not a PrimFunc task file ({err})") from None
    if isinstance(doc, dict) and "module" in doc:
        read_kernel(path)
        return "current"
    if not isinstance(doc, dict) or not isinstance(doc.get("script"), str) or not isinstance(doc.get("name"), str):
        raise TaskError(f"{path}: not an old PrimFunc task file (want string fields \"name\" and \"script\")")
    try:
        mod = _parse_trusted(doc["script"])
    except Exception as err:  # the TVMScript parser raises its own error classes
        raise TaskError(f"{path}: its script does not parse ({type(err).__name__}: "
                        f"{str(err).strip().splitlines()[-1:]})") from None
    digest = digest_of(mod)
    if mod.script() != doc["script"] or not digest == path.stem == doc.get("digest"):
        raise TaskError(f"{path}: its script hashes to {digest} (file name {path.stem}, \"digest\" field "
                        f"{doc.get('digest')!r}) or does not print back to itself; left unchanged")
    if not dry_run:
        written = write_kernel(path.parent, doc["name"], mod)
        name, again = read_kernel(written)
        if written != path or name != doc["name"] or again.script() != doc["script"]:
            raise TaskError(f"{path}: the converted file does not read back to the same kernel")
    return "converted"


def convert_directory(directory: Path, dry_run: bool = False) -> tuple[dict[str, int], list[str]]:
    """Convert every ``*.json`` of a directory; returns counts by outcome and the errors."""
    counts = {"converted": 0, "current": 0, "failed": 0}
    errors = []
    for path in sorted(directory.glob("*.json")):
        try:
            counts[convert_file(path, dry_run)] += 1
        except TaskError as err:
            counts["failed"] += 1
            errors.append(str(err))
    return counts, errors


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("directories", nargs="+", type=Path, help="store directories whose files you trust")
    p.add_argument("--dry-run", action="store_true", help="check and report, write nothing")
    args = p.parse_args(argv)
    failed = False
    for directory in args.directories:
        if not directory.is_dir():
            print(f"{directory}: not a directory", file=sys.stderr)
            failed = True
            continue
        counts, errors = convert_directory(directory, args.dry_run)
        for line in errors:
            print(line, file=sys.stderr)
        verb = "would convert" if args.dry_run else "converted"
        print(f"{directory}: {verb} {counts['converted']}, already current {counts['current']}, "
              f"failed {counts['failed']}")
        failed = failed or counts["failed"] > 0
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
