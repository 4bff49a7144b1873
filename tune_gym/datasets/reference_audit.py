"""The reference audit: which recorded PyTorch references cannot be right, and why.

Rewards and every "vs PyTorch" figure divide by a recorded reference, and references recorded
before the quiet checks (:mod:`tune_gym.measure.quiet`) were sometimes timed beside another
job: on a Zen 3 host BERT's dense layer at 6.2 GFLOPS, where an idle Intel host gives 346. The
audit reads every reference in the data (:func:`find_references`: each dataset footer's, each
record file's) and marks a reference **suspect** by this rule (:func:`suspect_reason`):

1. **floor**: below :data:`FLOOR_GFLOPS` (10) on an op of at least :data:`MIN_FLOPS` (20
   MFLOP). One call then takes 2 ms or more, so PyTorch's per-call overhead (tens of
   microseconds) explains under 5% of it; a single x86 server core of the last decade does
   float32 FMAs at 30-100 GFLOPS, and the datasets' own TVM configs reach 30-100 GFLOPS on the
   same ops and hosts. Only a starved kernel runs that slow.
2. **same op elsewhere**: below 1/:data:`SAME_HOST_FACTOR` (1/2) of the highest reference of the
   same task (op, shapes and target) at the same thread count on the same host, or below
   1/:data:`OTHER_HOST_FACTOR` (1/8) of the highest on another host. Interference only ever
   slows a timing down, so the highest is the one to trust. One host measuring one op twice
   should agree within noise; across hosts, per-core float32 peaks differ by up to about 3x
   (AVX2 at 2 FMAs per cycle against full-width AVX-512, and clocks), and PyTorch's kernels
   reach different shares of them: the committed Zen 3 and Zen 5 hosts differ by up to 4.1x
   on ops where neither is below the floor. 8x is beyond what another host explains.

Verdicts go to a sidecar file, ``reference_audit.json`` (:data:`AUDIT_FILE`) at the top of a
data directory, not into the datasets: a reference lives in a dataset's sealed footer (and in
record files, which have no seal), and rewriting a footer means re-sealing every file, which
vouches for its content anew, for a mark that depends on the other datasets. A verdict is keyed
by what it is about, the reference itself: its task URI, host and GFLOPS (each entry also
names the files and dataset checksums it was found in). Any copy of the same reference finds
it, and a re-measured reference, even in a dataset with the same rows checksum, does not
inherit the old verdict. On read, :func:`audited` sets :attr:`Reference.suspect
<tune_gym.measure.reference.Reference.suspect>` from the verdicts of every data directory
(:func:`tune_gym.datasets.catalog.data_dirs`); the env refuses to normalize rewards by a
suspect reference unless asked to, and the leaderboard prints "suspect" instead of a ratio.

``python scripts/audit_references.py`` writes the sidecar (and, on an idle host of the same id,
re-measures suspect references with ``--remeasure``: :func:`remeasure`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tune_gym.datasets.dataset import META_KEY, DatasetError, load_dataset, read_footer
from tune_gym.errors import TuneGymError
from tune_gym.measure.reference import Reference, reference_threads

__all__ = ["AUDIT_FILE", "AUDIT_SCHEMA", "FLOOR_GFLOPS", "MIN_FLOPS", "OTHER_HOST_FACTOR", "RULE", "SAME_HOST_FACTOR",
           "Found", "audit", "audit_paths", "audited", "find_references", "read_audit", "remeasure",
           "suspect_reason", "verdicts", "write_audit"]

#: The sidecar's name, at the top of a data directory.
AUDIT_FILE = "reference_audit.json"
#: Version of the sidecar's layout.
AUDIT_SCHEMA = 1
#: Rule 1: a reference below this many GFLOPS ...
FLOOR_GFLOPS = 10.0
#: ... on an op of at least this many FLOPs is suspect.
MIN_FLOPS = 20_000_000
#: Rule 2: a reference this many times below the same op's highest on its own host ...
SAME_HOST_FACTOR = 2.0
#: ... or this many times below the same op's highest on another host is suspect.
OTHER_HOST_FACTOR = 8.0
#: The rule in words (written into the sidecar).
RULE = (f"suspect: below {FLOOR_GFLOPS:g} GFLOPS on an op of >= {MIN_FLOPS / 1e6:g} MFLOP, or below "
        f"1/{SAME_HOST_FACTOR:g} of the same task's highest reference at the same thread count on the same host, or "
        f"below 1/{OTHER_HOST_FACTOR:g} of it on another host (tune_gym.datasets.reference_audit)")


@dataclass(frozen=True)
class Found:
    """One reference as found in the data.

    Attributes:
        task: the task URI.
        flops: the task's FLOPs per call.
        reference: the reference.
        where: the file it is in.
        checksum: the dataset's rows checksum (empty for a record file).
    """

    task: str
    flops: int
    reference: Reference
    where: str
    checksum: str = ""

    @property
    def key(self) -> tuple[str, str, float]:
        return _key(self.task, self.reference)


def _key(task: str, ref: Reference) -> tuple[str, str, float]:
    """What a verdict is keyed by: the reference's task, host and GFLOPS."""
    return task, ref.host, float(ref.gflops)


# ---------------------------------------------------------------------------------- the rule
def suspect_reason(found: Found, peers: Iterable[Found]) -> str:
    """Why ``found``'s reference cannot be right, or ``""`` (the rule of the module docstring).

    Args:
        found: the reference judged.
        peers: every reference audited with it (those of other tasks or thread counts are
            ignored; ``found`` itself may be among them).
    """
    ref = found.reference
    if ref.gflops < FLOOR_GFLOPS and found.flops >= MIN_FLOPS:
        return (f"{ref.gflops:.2f} GFLOPS is below the floor of {FLOOR_GFLOPS:g} GFLOPS on an op of "
                f"{found.flops / 1e6:.0f} MFLOP (a call of {found.flops / ref.gflops / 1e6:.1f} ms: per-call overhead "
                f"cannot explain it)")
    threads = reference_threads(ref)
    same = [p for p in peers if p.task == found.task and reference_threads(p.reference) == threads]
    for own_host, factor in ((True, SAME_HOST_FACTOR), (False, OTHER_HOST_FACTOR)):
        group = [p for p in same if (p.reference.host == ref.host) == own_host]
        best = max(group, key=lambda p: p.reference.gflops, default=None)
        if best is not None and ref.gflops * factor < best.reference.gflops:
            where = "this host" if own_host else f"host {best.reference.host}"
            return (f"{ref.gflops:.2f} GFLOPS is {best.reference.gflops / ref.gflops:.1f}x below the same op's "
                    f"{best.reference.gflops:.2f} GFLOPS at {threads} thread(s) on {where} ({best.where}; more than "
                    f"{factor:g}x apart)")
    return ""


def audit(found: Sequence[Found]) -> list[dict[str, Any]]:
    """The verdict of every distinct reference in ``found`` (one entry per task, host and
    GFLOPS, naming every file and dataset checksum it is in), sorted by task, host, GFLOPS."""
    by_key: dict[tuple[str, str, float], list[Found]] = defaultdict(list)
    for f in found:
        by_key[f.key].append(f)
    out = []
    for key in sorted(by_key):
        copies = by_key[key]
        reason = suspect_reason(copies[0], found)
        out.append({"task": key[0], "host": key[1], "gflops": key[2], "threads": reference_threads(copies[0].reference),
                    "suspect": bool(reason), "reason": reason, "files": sorted({c.where for c in copies}),
                    "checksums": sorted({c.checksum for c in copies if c.checksum})})
    return out


# ---------------------------------------------------------------------------------- the data
def find_references(paths: Iterable[str | os.PathLike[str]], root: str | os.PathLike[str] | None = None) -> list[Found]:
    """Every reference in ``paths``: Parquet datasets (their sealed footers) and record files
    (``.jsonl`` whose lines are tuning records); a directory is searched recursively. Parquet
    files of other kinds (validity labels) and JSONL files of other kinds (results, logs) are
    passed over. ``where`` is shown relative to ``root`` when inside it.

    Raises:
        DatasetError / RecordError: a dataset or record file that fails its checks (names it).
    """
    from tune_gym.records import load_records

    out: list[Found] = []
    for path in _files(paths):
        where = _shown(path, root)
        if path.suffix == ".parquet":
            if not _is_dataset(path):
                continue
            footer = read_footer(path)
            for host, ref in footer["references"].items():
                try:
                    reference = Reference.from_json(ref)
                except ValueError as err:
                    raise DatasetError(f"dataset {path}: references[{host!r}]: {err}") from None
                out.append(Found(footer["task"], footer["flops"], reference, where, footer["checksum"]))
        elif _is_record_file(path):
            seen = set()
            for rec in load_records(path, check_space=False):
                if rec.reference is not None and _key(rec.task, rec.reference) not in seen:
                    seen.add(_key(rec.task, rec.reference))
                    out.append(Found(rec.task, rec.result.flops, rec.reference, where))
    return out


def _files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.suffix in (".parquet", ".jsonl") and f.is_file())
        elif p.exists():
            out.append(p)
        else:
            raise TuneGymError(f"reference audit: {p} does not exist")
    return out


def _shown(path: Path, root: str | os.PathLike[str] | None) -> str:
    if root is not None and path.resolve().is_relative_to(Path(root).resolve()):
        return str(path.resolve().relative_to(Path(root).resolve()))
    return str(path)


def _is_dataset(path: Path) -> bool:
    """A Parquet file with a dataset footer (a validity label file has another key)."""
    import pyarrow.parquet as pq

    return META_KEY in (pq.read_schema(path).metadata or {})


def _is_record_file(path: Path) -> bool:
    """A ``.jsonl`` file whose first line is a tuning record (results and logs are not)."""
    if path.suffix != ".jsonl":
        return False
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(obj, dict) and {"task", "preset", "config", "result"} <= obj.keys()


# ---------------------------------------------------------------------------------- the sidecar
def write_audit(path: str | os.PathLike[str], entries: list[dict[str, Any]], command: str) -> Path:
    """Write the verdicts (:func:`audit`) to the sidecar ``path``, with the rule, the command
    and the counts per host."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"references": 0, "suspect": 0})
    for e in entries:
        counts[e["host"]]["references"] += 1
        counts[e["host"]]["suspect"] += int(e["suspect"])
    head = {"schema": AUDIT_SCHEMA, "rule": RULE, "command": command, "written": time.strftime("%Y-%m-%d"),
            "counts": dict(sorted(counts.items()))}
    lines = [json.dumps(head, indent=1)[:-2] + ',\n "references": [']  # one verdict per line: diffs stay readable
    lines += [f"  {json.dumps(e)}," for e in entries]
    lines[-1] = lines[-1].rstrip(",")
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text("\n".join(lines) + "\n ]\n}\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_audit(path: str | os.PathLike[str]) -> dict[tuple[str, str, float], str]:
    """The suspect verdicts of one sidecar: ``(task, host, GFLOPS) -> reason``.

    Raises:
        TuneGymError: naming the file: unreadable, another schema, or an entry without its
            fields (restore it from git or run ``python scripts/audit_references.py`` again).
    """
    redo = "restore it (git checkout) or write it again with `python scripts/audit_references.py`"
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise TuneGymError(f"reference audit {path} cannot be read ({err}); {redo}") from None
    if not isinstance(doc, dict) or doc.get("schema") != AUDIT_SCHEMA or not isinstance(doc.get("references"), list):
        raise TuneGymError(f"reference audit {path} is not a schema-{AUDIT_SCHEMA} audit with a 'references' list; "
                           f"{redo}")
    out: dict[tuple[str, str, float], str] = {}
    for i, e in enumerate(doc["references"]):
        good = (isinstance(e, dict) and isinstance(e.get("task"), str) and isinstance(e.get("host"), str)
                and isinstance(e.get("gflops"), (int, float)) and isinstance(e.get("suspect"), bool)
                and isinstance(e.get("reason"), str))
        if not good:
            raise TuneGymError(f"reference audit {path}: entry {i} lacks task, host, gflops, suspect or reason; {redo}")
        if e["suspect"]:
            out[(e["task"], e["host"], float(e["gflops"]))] = e["reason"] or "marked suspect"
    return out


def audit_paths() -> list[Path]:
    """The sidecars in effect: :data:`AUDIT_FILE` in each data directory that has one."""
    from tune_gym.datasets.catalog import data_dirs

    return [d / AUDIT_FILE for d in data_dirs() if (d / AUDIT_FILE).is_file()]


def verdicts() -> dict[tuple[str, str, float], str]:
    """Every suspect verdict in effect (:func:`audit_paths`), read once per file version."""
    out: dict[tuple[str, str, float], str] = {}
    for path in audit_paths():
        stat = path.stat()
        out.update(_read_cached(str(path), stat.st_mtime_ns, stat.st_size))
    return out


@functools.lru_cache(maxsize=32)
def _read_cached(path: str, mtime_ns: int, size: int) -> dict[tuple[str, str, float], str]:
    return read_audit(path)


def audited(task: str, ref: Reference) -> Reference:
    """``ref`` with :attr:`~tune_gym.measure.reference.Reference.suspect` set when a verdict in
    effect marks it (``ref`` itself otherwise)."""
    reason = verdicts().get(_key(task, ref))
    return dataclasses.replace(ref, suspect=reason) if reason and reason != ref.suspect else ref


# ---------------------------------------------------------------------------------- re-measuring
def remeasure(path: str | os.PathLike[str], host: str, machine: Any = None, policy: Any = None,
              command: str = "") -> Reference:
    """Measure the reference of the dataset ``path`` again on this host and write it in: the
    footer's reference of ``host`` and the ``reference_gflops`` of its rows, then a new
    checksum and seal (:meth:`Dataset.save`), with a collection step saying what changed.

    Args:
        host: this machine's host id; the dataset's reference must have been measured on it.
        machine, policy: passed to :func:`~tune_gym.measure.reference.measure_reference`.
        command: the command line, recorded in the collection step.

    Raises:
        TuneGymError: the dataset has no reference of ``host`` (a reference measured on
            another host is only comparable with that host's rows, so it is never replaced
            by one measured here).
        BusyHostError: this host is busy (:func:`~tune_gym.measure.reference.measure_reference`).
    """
    from tune_gym.measure.reference import measure_reference

    ds = load_dataset(path)
    refs = ds.meta.get("references", {})
    if host not in refs:
        raise TuneGymError(f"dataset {path}: its reference was measured on host {', '.join(refs) or '(none)'}, not "
                           f"on this host ({host}); re-measure it on an idle machine of that host id")
    old = Reference.from_json(refs[host])
    started = time.time()
    new = measure_reference(ds.task, machine=machine, policy=policy)
    refs[host] = new.to_json()
    rows = [i for i, h in enumerate(ds.host) if h == host]
    ds.reference_gflops[rows] = new.gflops
    ds.meta.setdefault("collection", []).append({
        "command": command or "python scripts/audit_references.py --remeasure", "plans": [], "host": host,
        "started": started, "wall_secs": round(time.time() - started, 1),
        "note": f"PyTorch reference re-measured: {old.gflops:.2f} -> {new.gflops:.2f} GFLOPS"})
    ds.save(path)
    return new
