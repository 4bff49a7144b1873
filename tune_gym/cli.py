"""The ``tune-gym`` command.

    tune-gym tasks [--suite NAME] [--sizes] [--preset full|compact|medium]
    tune-gym space TASK [--preset full|compact|medium]
    tune-gym best LOG [--export DIR]
    tune-gym datasets [--markdown]                              the dataset catalog
    tune-gym dataset show|verify FILE [--fidelity]              one dataset's summary / full check
    tune-gym dataset seal FILE...                               seal datasets one trusts (rows unchanged)
    tune-gym dataset convert IN OUT [--task T --preset P]       records (.jsonl) <-> dataset (.parquet)
    tune-gym collect TASK --plan exhaustive|random:N|explore:N  (from the agents package)
    tune-gym agents                                             (from the agents package)
    tune-gym tune TASK --trials N --batch B --log FILE [--resume] [--agent ID] [-o KEY=VALUE]
                  [-b KEY=VALUE] [--adaptive] [--seed S]        (from the agents package)

TASK is a suite task id (``resnet18:1``, ``resnet18:1@cuda``) or a task URI
(``op://dense-v1/m128_n768_k768?target=llvm``).

``tune_gym`` knows nothing of agents: packages add subcommands through the entry-point group
``tune_gym.cli``, each entry a function ``register(subparsers)`` that adds its commands
(``agents.cli:register`` adds ``agents`` and ``tune``; see pyproject.toml).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from tune_gym.errors import TuneGymError
from tune_gym.measure.quiet import BusyHostError
from tune_gym.space import PRESETS

__all__ = ["build_parser", "main", "parse_options", "parse_task"]


def parse_task(text: str) -> Any:
    """A :class:`Task` from a suite task id or a URI."""
    from tune_gym.tasks import Task

    return Task.parse(text)


def cmd_tasks(args: argparse.Namespace) -> int:
    from tune_gym.tasks.suites import get_suite, suite_names

    names = [args.suite] if args.suite else suite_names()
    for name in names:
        suite = get_suite(name)
        print(f"{name}: {suite.description} ({len(suite)} tasks)")
        for i, st in zip(suite.task_ids, suite.tasks):
            size = ""
            if args.sizes:
                from tune_gym.space import KnobSpace

                size = f"  space {KnobSpace.for_task(st.task, args.preset).size:.3g}"
            work = f"{'-':>7} GFLOP" if st.task.flops_nominal else f"{st.task.flops / 1e9:7.3f} GFLOP"
            print(f"  {name}:{i:<3} x{st.weight:<3} {work}  {st.task.uri}{size}")
    return 0


def cmd_space(args: argparse.Namespace) -> int:
    from tune_gym.space import KnobSpace

    space = KnobSpace.for_task(parse_task(args.task), args.preset)
    print(f"{space.task.uri}  preset={space.preset}  sketches={space.n_sketches}  size={space.size}")
    for knob in space.knobs:
        preview = ", ".join(str(c) for c in knob.choices[:4]) + (", ..." if len(knob) > 4 else "")
        print(f"  {knob.name:<28} {knob.kind:<11} {len(knob):>6} choices  [{preview}]")
    return 0


#: Option values read as Python's literals (JSON spells them ``true``, ``false``, ``null``).
_LITERALS: dict[str, Any] = {"True": True, "False": False, "None": None}
#: Option values read as floats (JSON has only ``NaN``, ``Infinity`` and ``-Infinity``).
_SPECIAL_FLOATS = {"nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """``["a=1", "b-c=x"]`` -> ``{"a": 1, "b_c": "x"}``: ``KEY=VALUE`` pairs (``-`` in a key
    reads as ``_``) as the keyword options of an agent or a backend, which check them.

    A value is an int, a float, a bool, ``None``, a list or a dict when it is written as JSON
    (``3``, ``0.5``, ``true``, ``null``, ``[20, 20]``, ``{"micro_batch": 10}``), as Python's
    ``True``, ``False`` or ``None``, or as ``nan`` / ``inf`` / ``-inf``; any other value is text.

    Raises:
        TuneGymError: a pair without ``=`` or with an empty key, a key given twice, or a value
            that starts as a JSON list, dict or string (``[``, ``{``, ``"``) but does not parse.
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise TuneGymError(f"option {pair!r} must be KEY=VALUE")
        if key in out:
            raise TuneGymError(f"option {key!r} is given twice")
        out[key] = _option_value(key, value)
    return out


def _option_value(key: str, text: str) -> Any:
    """The value of one ``KEY=VALUE`` option (see :func:`parse_options`)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        if text.strip()[:1] in ("[", "{", '"'):
            raise TuneGymError(f"option {key!r}: {text!r} is not valid JSON ({err.msg} at character "
                               f"{err.pos})") from None
    if text.strip() in _LITERALS:
        return _LITERALS[text.strip()]
    if text.strip().lower() in _SPECIAL_FLOATS:
        return float(text)
    return text


def _one_line(err: BaseException) -> str:
    """An error's message on one line (without the note ``gymnasium.make`` appends to an
    env constructor's error: the env's whole keyword arguments)."""
    text = str(err).split(" was raised from the environment creator for ")[0]
    return " | ".join(line.strip() for line in text.splitlines() if line.strip()) or type(err).__name__


def cmd_best(args: argparse.Namespace) -> int:
    from tune_gym.records import best_records, export_database, load_records

    records = load_records(args.log)
    if not records:
        raise TuneGymError(f"{args.log}: no records")
    counts: dict[str, int] = {}
    for rec in records:
        counts[rec.task] = counts.get(rec.task, 0) + 1
    for uri, rec in best_records(records).items():
        score = f"{rec.result.mean * 1e3:.4g} ms per call" if parse_task(uri).flops_nominal else \
            f"{rec.result.gflops:.2f} GFLOPS"
        print(f"{uri}\n  {score}  ({counts[uri]} records, preset {rec.preset})")
        print(f"  config {list(rec.config)}  {json.dumps(rec.knobs)}")
    if args.export:
        path = export_database(records, args.export)
        print(f"exported the best config of each task as a MetaSchedule database: {path}")
    return 0


def _warn(command: str, caught: list[warnings.WarningMessage]) -> None:
    """Print caught warnings (a catalog's skipped files) one line each on stderr."""
    for w in caught:
        print(f"tune-gym {command}: warning: {w.message}", file=sys.stderr)


def cmd_datasets(args: argparse.Namespace) -> int:
    from tune_gym.datasets.catalog import catalog, data_dirs

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        entries = catalog()
        text = inventory_markdown(entries) if args.markdown and entries else ""
    _warn("datasets", caught)
    if not entries:
        print(f"no datasets in {', '.join(map(str, data_dirs()))}")
        return 0
    if args.markdown:
        print(text)
        return 0
    for e in entries:
        kind = "exhaustive" if e.exhaustive else f"{e.rows / max(e.space_size, 1):.2g} of the space"
        print(f"{e.path.name:<36} {e.rows:>6} rows  {kind:<18} {e.preset:<8} {e.task}")
    return 0


def _fmt_ref(gflops: float | None, suspect: str = "") -> str:
    """A reference for the inventory: its GFLOPS, marked when the reference audit finds it suspect."""
    return (f"{gflops:.2f}" + (" (suspect)" if suspect else "")) if gflops else "-"


def inventory_markdown(entries: list[Any]) -> str:
    """The dataset inventory as markdown: one table row per dataset (task, rows, modes, best,
    reference, host, dates, measuring hours), then how each was collected (commands, wall time)."""
    import time

    from tune_gym.datasets import DatasetError, load_dataset

    lines = ["# Datasets", "",
             "Live measurements, one Parquet file per task and space preset (see the README's Datasets section).",
             "Regenerate this file with `tune-gym datasets --markdown > benchmarks/datasets/README.md`; check a",
             "file with `tune-gym dataset verify FILE`. *Measuring hours* add up each row's build and run seconds.",
             "A PyTorch reference marked *(suspect)* is one the reference audit finds cannot be right",
             "(`reference_audit.json`, `python scripts/audit_references.py`; README, \"PyTorch references\").",
             "", "| file | task | preset | rows (ran) | space | collected | best GFLOPS | PyTorch GFLOPS | host | "
             "dates (UTC) | measuring hours |", "|" + "---|" * 11]
    howto = ["", "## How each was collected", ""]
    for e in entries:
        try:
            ds = load_dataset(e.path)
        except DatasetError as err:
            warnings.warn(f"inventory: skipped: {err}", UserWarning, stacklevel=2)
            continue
        s = ds.summary()
        modes = ", ".join(f"{m} {n}" for m, n in s["modes"].items())
        hosts = ", ".join(f"`{h}` ({cpu})" for h, cpu in s["hosts"].items())
        space = f"{s['space_size']:,}" + (" (all measured)" if s["exhaustive"] else "")
        ref = _fmt_ref(s["reference_gflops"], s["reference_suspect"])
        lines.append(f"| {e.path.name} | `{s['task']}` | {s['preset']} | {s['rows']:,} ({s['ok']:,}) | {space} | "
                     f"{modes} | {s['best_gflops']:.2f} | {ref} | {hosts} | "
                     f"{s['first']} .. {s['last']} | {s['measure_hours']:.2f} |")
        howto.append(f"- **{e.path.name}**:")
        for step in ds.meta.get("collection", []):
            when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(step["started"])) if step.get("started") else "?"
            wall = f"{step['wall_secs'] / 3600:.2f} h wall" if step.get("wall_secs") else ""
            note = f"; {step['note']}" if step.get("note") else ""
            howto.append(f"  - `{step.get('command', '?')}` (started {when} UTC, {wall}, host `{step.get('host')}`"
                         f"{note})")
    fingerprints: dict[str, Any] = {}
    for e in entries:
        fingerprints.update(e.meta.get("hosts", {}))
    howto += ["", "## Hosts", ""]
    for h, fp in fingerprints.items():
        gpus = f", GPU {', '.join(fp['gpus'])} (driver {fp.get('gpu_driver', '?')})" if fp.get("gpus") else ""
        howto.append(f"- `{h}`: {fp.get('cpu', '?')}, LLVM cpu `{fp.get('llvm_cpu', '?')}`, "
                     f"{fp.get('logical_cores', '?')} logical cores, {fp.get('os', '?')}{gpus}")
    return "\n".join(lines + howto)


def cmd_dataset(args: argparse.Namespace) -> int:
    from tune_gym.datasets import Dataset, load_dataset

    if args.action == "seal":
        return _seal(args.files)
    if args.action == "convert":
        if args.input.suffix == ".jsonl" and args.output.suffix == ".parquet":
            from tune_gym.records import load_records

            ds = Dataset.from_records(load_records(args.input), task=args.task and parse_task(args.task),
                                      preset=args.preset, mode=args.mode)
            ds.save(args.output)
        elif args.input.suffix == ".parquet" and args.output.suffix == ".jsonl":
            from tune_gym.records import RecordWriter

            args.output.unlink(missing_ok=True)
            ds = load_dataset(args.input)
            with RecordWriter(args.output) as writer:
                writer.append(ds.to_records())
        else:
            raise TuneGymError("convert a .jsonl record file to a .parquet dataset, or a .parquet dataset to .jsonl")
        print(f"{args.input} -> {args.output}: {len(ds)} rows of {ds.task.uri} (preset {ds.preset})")
        return 0
    ds = load_dataset(args.file, verify=args.action == "verify")
    out = {"file": str(args.file), **ds.summary(), "collection": ds.meta.get("collection", [])}
    if getattr(args, "fidelity", False):
        from tune_gym.measure.surrogate import SurrogateBackend

        out["surrogate_fidelity"] = SurrogateBackend(ds).report(ds.task, ds.preset)
    print(json.dumps(out, indent=2))
    if args.action == "verify":
        print(f"{args.file}: schema, seal, space fingerprint, values and checksum OK")
    return 0


def _seal(files: list[Path]) -> int:
    """``tune-gym dataset seal``: seal each file that passes every other check; report the rest."""
    from tune_gym.datasets import DatasetError, seal_dataset

    failed = 0
    for path in files:
        try:
            seal = seal_dataset(path)
        except DatasetError as err:
            failed += 1
            print(f"tune-gym dataset seal: not sealed: {err}", file=sys.stderr)
            continue
        print(f"{path}: sealed ({seal[:16]}...)")
    if failed:
        print(f"tune-gym dataset seal: {failed} of {len(files)} file(s) not sealed", file=sys.stderr)
    return 2 if failed else 0


def cmd_backends(args: argparse.Namespace) -> int:
    from tune_gym.measure import backend_ids, backend_options
    from tune_gym.options import table_lines

    for name in [args.backend] if args.backend else backend_ids():
        rows = backend_options(name)
        print(f"{name}: {len(rows)} option{'s' if len(rows) != 1 else ''} (-b KEY=VALUE, backend_options)")
        print("\n".join(table_lines(rows)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tune-gym", description="Tensor-program auto-tuning as Gymnasium envs.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("tasks", help="list suites and their tasks")
    p.add_argument("--suite", help="only this suite")
    p.add_argument("--sizes", action="store_true", help="also build each knob space and print its size")
    p.add_argument("--preset", default="full", choices=PRESETS)
    p.set_defaults(fn=cmd_tasks)

    p = sub.add_parser("backends", help="the measurement backends' options: default, allowed values, meaning")
    p.add_argument("backend", nargs="?", help="only this backend (live, replay, surrogate, rpc, a kind's)")
    p.set_defaults(fn=cmd_backends)

    p = sub.add_parser("space", help="show a task's knobs and their choice counts")
    p.add_argument("task")
    p.add_argument("--preset", default="full", choices=PRESETS)
    p.set_defaults(fn=cmd_space)

    p = sub.add_parser("best", help="best config of each task in a record file")
    p.add_argument("log", type=Path)
    p.add_argument("--export", type=Path, help="write a MetaSchedule JSON database of the best configs")
    p.set_defaults(fn=cmd_best)
    p = sub.add_parser("datasets", help="list the dataset catalog (TUNE_GYM_DATA, then benchmarks/datasets)")
    p.add_argument("--markdown", action="store_true", help="print the inventory as a markdown table")
    p.set_defaults(fn=cmd_datasets)

    p = sub.add_parser("dataset", help="show, verify or convert one dataset file")
    dsub = p.add_subparsers(dest="action", required=True)
    for action in ("show", "verify"):
        q = dsub.add_parser(action, help=f"{action} a .parquet dataset")
        q.add_argument("file", type=Path)
        q.add_argument("--fidelity", action="store_true",
                       help="also fit the surrogate on it and print its held-out fidelity report")
        q.set_defaults(fn=cmd_dataset)
    q = dsub.add_parser("seal", help="seal .parquet datasets one trusts: their rows must match their checksum and "
                                     "pass every check; the seal then covers the metadata too")
    q.add_argument("files", type=Path, nargs="+")
    q.set_defaults(fn=cmd_dataset)
    q = dsub.add_parser("convert", help="records (.jsonl) -> dataset (.parquet), or back")
    q.add_argument("input", type=Path)
    q.add_argument("output", type=Path)
    q.add_argument("--task", help="the task to take when the records hold several")
    q.add_argument("--preset", help="the preset to take when the records hold several")
    q.add_argument("--mode", default="records", help="collection mode of the rows (exhaustive, random, ...)")
    q.set_defaults(fn=cmd_dataset)
    for entry in entry_points(group="tune_gym.cli"):
        entry.load()(sub)
    return parser


#: Subcommands whose runs must give the same configs on every host: started again with the
#: numerics pinned (:mod:`tune_gym.numerics`) when run as the ``tune-gym`` command.
PINNED_COMMANDS = ("bench", "validate")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if argv is None and args.command in PINNED_COMMANDS:
        from tune_gym.numerics import restart_pinned

        restart_pinned(sys.argv[1:])
    try:
        return int(args.fn(args) or 0)
    except (TuneGymError, ValueError, FileNotFoundError, BusyHostError) as err:  # bad input, busy host: one line
        print(f"tune-gym {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
