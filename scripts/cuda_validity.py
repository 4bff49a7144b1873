"""Validity labels of CUDA knob spaces, made without a GPU (``tune_gym.datasets.validity``).

For each task of a leaderboard suite (its ``[[task]]`` ids with ``@cuda`` appended, deduplicated)
or of ``--tasks``, and each preset, labels ``--n`` distinct uniform random configs (the whole
space when it is smaller) valid or invalid with TVM's CUDA postprocs (``VerifyGPUCode``: threads
per block, shared memory, ... for an sm_75-class GPU), and writes one Parquet file per (task,
preset) to ``--out``: ``<id with ':' -> '_'>_<preset>.parquet`` (``resnet18_5_full.parquet``).
Nothing runs on a GPU.

Resumable: a file that exists and loads (checksum and space fingerprint) with the same seed and
``--n`` is skipped; one that does not load is collected again; one made with another seed or
``--n`` stops the run (``--force`` overwrites it). At the end ``<out>/README.md`` is rewritten
with a table of every label file in ``--out``, the commands, host, TVM version and dates.

Usage:
    python scripts/cuda_validity.py --suite standard-v1 --presets full compact --n 1000 --seed 0 \\
        --out benchmarks/datasets/cuda_validity
    python scripts/cuda_validity.py --tasks resnet18:9 bert_base:0 --presets compact --n 200
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shlex
import sys
import time
import tomllib
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

SUITE_DIR = REPO / "benchmarks" / "suites"
DEFAULT_OUT = Path("benchmarks/datasets/cuda_validity")


def suite_ids(suite: str) -> list[str]:
    """The distinct task ids of a suite file (``benchmarks/suites/<suite>.toml`` or a path), in order."""
    path = Path(suite) if suite.endswith(".toml") else SUITE_DIR / f"{suite}.toml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in SUITE_DIR.glob("*.toml")))
        raise SystemExit(f"no suite {suite!r} ({path} does not exist); known suites: {known}")
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    ids = [str(t["id"]) for t in raw.get("task", []) if "id" in t]
    if not ids:
        raise SystemExit(f"{path} has no [[task]] entries with an id")
    return list(dict.fromkeys(ids))


def cuda_id(text: str) -> str:
    """A task id or URI on the ``cuda`` target: ``resnet18:5`` -> ``resnet18:5@cuda``; an id
    or URI that already names a cuda target is kept; another target is refused."""
    if "://" in text:
        return text
    base, _, target = text.partition("@")
    if not target:
        return f"{base}@cuda"
    if not (target == "cuda" or target.startswith("cuda&")):
        raise SystemExit(f"{text}: this script labels CUDA spaces; give the id without a target or with @cuda")
    return text


def file_name(text: str, preset: str) -> str:
    """``resnet18:5@cuda`` -> ``resnet18_5_<preset>.parquet``; target options and URIs get a short
    hash so different targets never share a file."""
    if "://" in text:
        from tune_gym.tasks.task import Task

        task = Task.parse(text)
        slug = f"{task.op}_{hashlib.sha256(task.uri.encode()).hexdigest()[:8]}"
    else:
        base, _, target = text.partition("@")
        slug = re.sub(r"[^A-Za-z0-9.]+", "_", base).strip("_")
        if target not in ("", "cuda"):
            slug += "_" + hashlib.sha256(target.encode()).hexdigest()[:8]
    return f"{slug}_{preset}.parquet"


def _fmt_reasons(s: dict[str, Any], top: int = 3) -> str:
    invalid = s["n"] - s["valid"]
    parts = []
    for name, count in list(s["reasons"].items())[:top]:
        if name == "VerifyGPUCode" and s["causes"]:
            causes = ", ".join(f"{c} {k / invalid:.0%}" for c, k in list(s["causes"].items())[:top])
            parts.append(f"{name} {count / invalid:.0%} ({causes})")
        else:
            parts.append(f"{name} {count / invalid:.0%}")
    return "; ".join(parts) or "-"


def _natural(path: Path) -> list[Any]:
    """Sort key: ``resnet18_9_full`` before ``resnet18_10_compact``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.stem)]


def write_readme(out: Path, command: str) -> Path:
    """``<out>/README.md``: a table of every label file in ``out`` and how they were made."""
    from tune_gym.datasets.validity import ValidityError, load_validity, summary
    from tune_gym.host import host_fingerprint

    rows, commands, hosts, tvms, dates, bad = [], {}, set(), set(), [], []
    secs = cpu_secs = n_total = 0.0
    for path in sorted(out.glob("*.parquet"), key=_natural):
        try:
            labels = load_validity(path)
        except ValidityError as err:
            bad.append(f"{path.name}: {err}")
            continue
        s = summary(labels)
        meta = labels.meta
        lo, hi = s["valid_ci95"]
        sampled = "all" if s["exhaustive"] else f"{s['n']}"
        rows.append(f"| {meta.get('task_id', '-')} | `{labels.task}` | {labels.preset} | {s['space_size']:.3g} | "
                    f"{sampled} | {s['valid_ratio']:.1%} [{lo:.1%}, {hi:.1%}] | {_fmt_reasons(s)} | "
                    f"{1000 * meta.get('cpu_seconds_per_config', 0):.0f} / "
                    f"{1000 * meta.get('seconds_per_config', 0):.0f} | `{path.name}` |")
        commands.setdefault(meta.get("command", "?"), []).append(path.name)
        hosts.add(meta.get("host", {}).get("cpu", "?"))
        tvms.add(meta.get("tvm", "?"))
        dates.append(meta.get("date", ""))
        secs += float(meta.get("seconds", 0))
        cpu_secs += float(meta.get("cpu_seconds", 0))
        n_total += len(labels)
    host = host_fingerprint()
    from tune_gym.tasks.targets import CUDA_DEFAULTS

    lines = [
        "# CUDA validity labels",
        "",
        "Which configs of CUDA knob spaces are valid: each row of a file is one config of",
        "`KnobSpace.for_task(Task.from_uri(task), preset)` with `valid` (it schedules and passes every postproc",
        "of the `cuda` target, `VerifyGPUCode` included), a short `reason` and the full `message`",
        "(`tune_gym.datasets.validity`; read a file with `load_validity`). For validity-aware agents and",
        "validity classifiers (pairwise accuracy, precision@n of valid configs) on CUDA spaces.",
        "",
        "**The labels need no GPU, and no config was run on a GPU**: validity is decided by TVM's compiler",
        "(schedule replay, postprocs, GPU code verification) against the limits of an sm_75-class GPU",
        f"(`tune_gym.tasks.targets.CUDA_DEFAULTS`: {json.dumps(CUDA_DEFAULTS)}; VerifyGPUCode adds at most",
        "8 virtual threads and 16-byte vectors). A valid config may still fail or be slow on a real GPU.",
        "Configs are distinct and uniform over the space (`KnobSpace.sample_unique` with the seed), the whole",
        "space in index order when it is smaller than the sample.",
        "",
        "Invalid reasons: `VerifyGPUCode` with the failed check in parentheses (`threads_below_min`: fewer",
        "threads per block than a warp, MetaSchedule's own bound on tiled blocks rather than a hardware",
        "limit; `threads_above_max`; `shared_memory`; `vthread`; `vector_bytes`; `threads_per_block`;",
        "`lowering`); `schedule` when the trace does not replay; `<postproc>:error` when a postproc raised.",
        "",
        "`ms/config` is the labelling time per config: CPU time of the labelling process / wall time (the wall",
        "time depends on what else the host was running).",
        "",
        "| task id | URI | preset | space size | labelled | valid [95% CI] | top invalid reasons | ms/config | file |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"{len(rows)} file{'s' * (len(rows) != 1)}, {int(n_total)} labelled configs, {secs / 3600:.2f} h of labelling"
        f" ({1000 * cpu_secs / max(n_total, 1):.0f} ms CPU, {1000 * secs / max(n_total, 1):.0f} ms wall per config).",
        "",
        "## How they were made",
        "",
    ]
    for cmd, files in commands.items():
        lines += [f"    {cmd}", "", f"({len(files)} file{'s' * (len(files) != 1)})", ""]
    lines += [
        f"Last command: `{command}`",
        "",
        f"- Host CPU: {', '.join(sorted(hosts)) or host.get('cpu')} (this README written on: {host.get('cpu')},"
        f" {host.get('logical_cores')} logical cores)",
        f"- TVM: {', '.join(sorted(tvms)) or host.get('tvm')}",
        f"- Dates: {min(dates)[:10] if dates else '-'} to {max(dates)[:10] if dates else '-'} (UTC); README written"
        f" {time.strftime('%Y-%m-%d', time.gmtime())}",
        "- GPU: none used.",
    ]
    if bad:
        lines += ["", "Files that did not load (collect them again):", "", *[f"- {b}" for b in bad]]
    path = out / "README.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--suite", help="a leaderboard suite name (benchmarks/suites/<name>.toml) or .toml path")
    which.add_argument("--tasks", nargs="+", metavar="ID", help="task ids (resnet18:1) or cuda URIs")
    parser.add_argument("--presets", nargs="+", default=["full", "compact"], choices=["full", "compact"])
    parser.add_argument("--n", type=int, default=1000, help="configs per (task, preset); all when the space is smaller")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--force", action="store_true", help="overwrite files made with another --n or --seed")
    parser.add_argument("--no-diagnose", action="store_true",
                        help="do not name the failed VerifyGPUCode check in messages (faster)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be at least 1")
    command = shlex.join(["python", "scripts/cuda_validity.py", *(argv if argv is not None else sys.argv[1:])])

    from tune_gym.datasets.validity import ValidityError, collect_validity, load_validity, save_validity, summary

    ids = [cuda_id(t) for t in (suite_ids(args.suite) if args.suite else args.tasks)]
    jobs = list(dict.fromkeys((i, p) for i in ids for p in dict.fromkeys(args.presets)))
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"{len(jobs)} label files ({len(dict.fromkeys(ids))} tasks x {len(set(args.presets))} presets) -> {args.out}",
          flush=True)
    failures = []
    done_secs = done_cpu = done_n = 0.0
    started = time.time()
    for k, (task_id, preset) in enumerate(jobs, start=1):
        path = args.out / file_name(task_id, preset)
        head = f"[{k}/{len(jobs)}] {task_id} {preset}"
        if path.exists():
            try:
                old = load_validity(path)
            except ValidityError as err:
                print(f"{head}: {path.name} does not load ({err}); collecting it again", flush=True)
            else:
                same = old.meta.get("seed") == args.seed and (
                    old.meta.get("n_requested") == args.n or (old.exhaustive and args.n >= old.space_size))
                if same:
                    print(f"{head}: {path.name} done ({len(old)} configs), skipped", flush=True)
                    continue
                if not args.force:
                    print(f"{head}: {path.name} was made with --n {old.meta.get('n_requested')} --seed "
                          f"{old.meta.get('seed')}, not --n {args.n} --seed {args.seed}: use another --out, or "
                          "--force to overwrite it", flush=True)
                    failures.append(task_id)
                    continue
        try:
            labels = collect_validity(task_id, preset, args.n, args.seed, progress=not args.quiet, command=command,
                                      diagnose=not args.no_diagnose)
        except Exception as err:  # a task that cannot be labelled is reported; the others go on
            print(f"{head}: FAILED {type(err).__name__}: {err}\n{traceback.format_exc(limit=4)}", flush=True)
            failures.append(task_id)
            continue
        save_validity(labels, path)
        s = summary(labels)
        lo, hi = s["valid_ci95"]
        secs = labels.meta["seconds"]
        done_secs += secs
        done_cpu += labels.meta["cpu_seconds"]
        done_n += len(labels)
        print(f"{head}: {path.name}: {len(labels)} of {s['space_size']:.3g} configs, valid {s['valid_ratio']:.1%} "
              f"[{lo:.1%}, {hi:.1%}], {_fmt_reasons(s)}; labelling {secs:.1f} s wall = "
              f"{1000 * secs / max(len(labels), 1):.1f} ms/config "
              f"({1000 * labels.meta['cpu_seconds_per_config']:.1f} ms CPU; "
              f"space built in {labels.meta['space_seconds']:.1f} s)",
              flush=True)
    readme = write_readme(args.out, command)
    if done_n:
        print(f"labelled {int(done_n)} configs in {done_secs:.1f} s: {1000 * done_secs / done_n:.1f} ms per config "
              f"wall, {1000 * done_cpu / done_n:.1f} ms CPU ({time.time() - started:.0f} s wall in all)", flush=True)
    print(f"wrote {readme}", flush=True)
    if failures:
        print(f"{len(failures)} failed or refused: {', '.join(dict.fromkeys(failures))}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
