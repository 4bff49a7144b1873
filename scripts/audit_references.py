"""Audit every recorded PyTorch reference and write the verdicts beside the data.

Usage:
    python scripts/audit_references.py              # audit; write benchmarks/datasets/reference_audit.json
    python scripts/audit_references.py --dry-run    # audit; print only
    python scripts/audit_references.py --remeasure [DATASET ...]   # on an idle host: measure again, then audit

The references are those of every dataset footer and record file under the given paths
(default: ``benchmarks/datasets`` and ``benchmarks/results``); the rule, and why the verdicts
live in a sidecar rather than in the sealed datasets, are in
:mod:`tune_gym.datasets.reference_audit`. It prints the counts per host and every suspect
reference with its reason.

``--remeasure`` measures the reference of each named dataset again (default: every dataset
with a suspect reference), on this host, through the quiet checks of
:func:`tune_gym.measure.reference.measure_reference`, writes it into the dataset (new checksum
and seal) and audits again. A dataset whose reference was measured on another host is refused:
run it on an idle machine with that host id (``python -c "from tune_gym.host import host_id;
print(host_id())"``). Exit status 1 when a dataset was refused or the host was busy.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tune_gym.datasets.reference_audit import (  # noqa: E402
    AUDIT_FILE,
    audit,
    find_references,
    remeasure,
    write_audit,
)
from tune_gym.errors import TuneGymError  # noqa: E402
from tune_gym.measure.quiet import BusyHostError  # noqa: E402

#: Where references are looked for by default.
DEFAULT_PATHS = [REPO / "benchmarks" / "datasets", REPO / "benchmarks" / "results"]


def report(entries: list[dict]) -> list[str]:
    """The audit in lines: counts per host, then each suspect reference and why."""
    total, marked = Counter(e["host"] for e in entries), Counter(e["host"] for e in entries if e["suspect"])
    lines = ["host          references  suspect"]
    lines += [f"{host:<13} {total[host]:>10}  {marked[host]:>7}" for host in sorted(total)]
    lines.append(f"{'all':<13} {sum(total.values()):>10}  {sum(marked.values()):>7}")
    for e in entries:
        if e["suspect"]:
            lines.append(f"suspect: {', '.join(e['files'])} ({e['host']}): {e['reason']}")
    return lines


def remeasure_all(files: list[Path], entries: list[dict], host: str, command: str) -> int:
    """Re-measure the references of ``files`` (none given: every dataset with a suspect
    reference); returns how many were refused or could not be measured."""
    if not files:
        files = sorted({REPO / f for e in entries if e["suspect"] for f in e["files"] if f.endswith(".parquet")})
    failed = 0
    for path in files:
        try:
            new = remeasure(path, host, command=command)
        except (TuneGymError, BusyHostError) as err:
            print(f"refused: {err}", file=sys.stderr)
            failed += 1
            continue
        print(f"re-measured: {path}: {new.gflops:.2f} GFLOPS at {new.threads} threads "
              f"({new.single_thread_gflops or 0:.2f} at 1){'; flagged: ' + '; '.join(new.flags) if new.flags else ''}")
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", action="append", type=Path, help="dataset or record file, or a folder searched "
                        "recursively (repeatable; default: benchmarks/datasets and benchmarks/results)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "datasets" / AUDIT_FILE,
                        help=f"the verdicts file (default: benchmarks/datasets/{AUDIT_FILE})")
    parser.add_argument("--dry-run", action="store_true", help="print the audit, write nothing")
    parser.add_argument("--remeasure", nargs="*", type=Path, metavar="DATASET",
                        help="on an idle machine of the datasets' host id: measure these datasets' references "
                             "again (none named: every dataset with a suspect reference), then audit")
    args = parser.parse_args(argv)
    command = shlex.join(["python", "scripts/audit_references.py", *(argv if argv is not None else sys.argv[1:])])
    paths = args.path or DEFAULT_PATHS
    try:
        entries = audit(find_references(paths, root=REPO))
        failed = 0
        if args.remeasure is not None:
            from tune_gym.host import host_id

            failed = remeasure_all(args.remeasure, entries, host_id(), command)
            entries = audit(find_references(paths, root=REPO))
    except TuneGymError as err:
        print(f"audit_references: error: {err}", file=sys.stderr)
        return 2
    print("\n".join(report(entries)))
    if not args.dry_run:
        print(f"wrote {write_audit(args.out, entries, command)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
