"""The dataset collector: measure a task's configs live and keep them as a Parquet dataset.

A collection is a list of :class:`Plan` steps run in order on one task and space preset:

* ``exhaustive``: every config of the space (compact spaces);
* ``random``: ``n`` distinct configs drawn uniformly with ``seed``;
* ``exploration``: ``n`` configs chosen by a search agent (any object with the agents'
  ``reset(space, task, seed)`` / ``propose(n)`` / ``observe(configs, results)`` methods) that
  learns from everything measured so far, so they concentrate in the fast region as
  One-Shot Tuner's exploration-based sampling does.

Crash safety and resume: measurements go through one :class:`tune_gym.session.TuningSession`
logging to a journal (``<dataset>.journal.jsonl``, fsynced per batch) next to the dataset.
The Parquet dataset is rewritten from the journal every ``save_every`` seconds and at the
end (atomically), so a killed collection loses at most one batch, and a new run skips every
config already in the journal (or, when the journal is gone, in the dataset). Plans are
deterministic (seeded), so a resumed random or exhaustive step measures exactly what the
killed one had left. An exploration agent starts from everything measured so far (it observes those
configs first), so after a kill it continues from the data rather than from its old state:
nothing is measured twice and the count of exploration configs still ends at ``n``. Only the
host that measured a journal's or a dataset's rows adds to them (a dataset holds one host's
measurements, and one thread count's): elsewhere the collection stops before measuring.

Builds run in parallel (the live backend's build workers); timing runs one at a time.

Simulated data: a backend with ``simulated = True`` (a registered target kind's simulator,
:mod:`tune_gym.kinds`) measures nothing on this machine, so its rows name the backend as their
host (``host = <backend name>``, with ``{"simulated": True}`` as that host's fingerprint), and
the collection step says so (``"simulated": <backend name>`` and a note). Invalid configs keep
the error kind and message the backend returned.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tune_gym.datasets.dataset import Dataset, DatasetError, load_dataset
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["Plan", "collect", "journal_path", "parse_plan"]

#: Largest space the ``exhaustive`` mode enumerates.
MAX_EXHAUSTIVE = 200_000


@dataclass(frozen=True)
class Plan:
    """One step of a collection.

    Attributes:
        mode: ``exhaustive``, ``random`` or ``exploration``.
        n: configs to measure (``random``, ``exploration``); ignored by ``exhaustive``.
        seed: seed of the random draw or of the exploration agent.
        agent: the exploration agent's id (for the metadata; the object comes from the caller).
    """

    mode: str
    n: int = 0
    seed: int = 0
    agent: str = ""

    def __post_init__(self) -> None:
        if self.mode not in ("exhaustive", "random", "exploration"):
            raise DatasetError(f"unknown collection mode {self.mode!r}; known: exhaustive, random, exploration")
        if self.mode != "exhaustive" and self.n < 1:
            raise DatasetError(f"collection mode {self.mode} needs a count >= 1 (e.g. {self.mode}:3000), got {self.n}")


def parse_plan(text: str, seed: int = 0, agent: str = "xgb-sa") -> Plan:
    """``exhaustive``, ``random:N`` or ``exploration:N`` (also ``explore:N``) as a Plan."""
    mode, _, count = text.partition(":")
    mode = "exploration" if mode == "explore" else mode
    if count and not count.isdecimal():
        raise DatasetError(f"collection plan {text!r}: the count after ':' must be an integer")
    return Plan(mode, int(count or 0), seed, agent if mode == "exploration" else "")


def journal_path(out: str | Path) -> Path:
    """The journal (JSONL tuning records) that a collection into ``out`` appends to."""
    out = Path(out)
    return out.with_name(out.name.removesuffix(".parquet") + ".journal.jsonl")


def _selection(space: KnobSpace, plan: Plan) -> list[Config]:
    if plan.mode == "exhaustive":
        if space.size > MAX_EXHAUSTIVE:
            raise DatasetError(f"the {space.preset} space of {space.task.uri} has {space.size} configs; exhaustive "
                               f"collection enumerates at most {MAX_EXHAUSTIVE}: use random:N / exploration:N")
        return list(space)
    if plan.mode == "random":
        return space.sample_unique(np.random.default_rng(plan.seed), min(plan.n, space.size))
    return []


def collect(
    task: Task,
    preset: str,
    out: str | Path,
    plans: Sequence[Plan],
    backend: Any = None,
    explorer: Callable[[Plan], Any] | None = None,
    batch: int = 32,
    save_every: float = 300.0,
    progress: bool = True,
    command: str | None = None,
    measure: bool = True,
    note: str | None = None,
) -> Dataset:
    """Run ``plans`` on ``task``'s ``preset`` space and write the dataset ``out`` (Parquet).

    Args:
        task, preset: what to measure.
        out: the dataset file; its journal lives beside it (:func:`journal_path`).
        plans: collection steps, run in order.
        backend: the measuring backend (default: a :class:`tune_gym.measure.live.LiveBackend`
            with 3 repeats, closed at the end).
        explorer: ``plan -> agent`` for ``exploration`` plans.
        batch: configs per backend call (the builds of a batch run in parallel).
        save_every: seconds between rewrites of ``out`` from the journal.
        progress: show a progress bar with ETA (tqdm) on stderr.
        command: the command line recorded in the dataset's metadata.
        measure: ``False`` only rewrites ``out`` from the journal (e.g. after killing a
            collection, to save what it measured since its last rewrite) and measures nothing.
        note: a remark kept with this step in the metadata (e.g. what else ran on the host).
            With a simulated backend a note saying so is always added.

    Returns:
        The dataset as written.
    """
    from tune_gym.host import host_id
    from tune_gym.measure import is_backend, missing_methods
    from tune_gym.measure.reference import measure_reference
    from tune_gym.records import RecordWriter, load_records, recorded_reference
    from tune_gym.session import TuningSession

    out = Path(out)
    space = KnobSpace.for_task(task, preset)
    journal = journal_path(out)
    previous: Dataset | None = load_dataset(out, space) if out.exists() else None
    if previous is not None and not journal.exists():  # resume from the committed dataset
        with RecordWriter(journal) as writer:
            writer.append(previous.to_records())
    if any(p.mode == "exploration" for p in plans) and explorer is None:
        raise DatasetError("an exploration plan needs an explorer (a function plan -> agent)")
    selections = [_selection(space, p) for p in plans]
    own_backend = backend is None
    if own_backend:
        from tune_gym.measure.live import LiveBackend

        backend = LiveBackend(repeat=3)
    elif not is_backend(backend):
        raise DatasetError(f"collect: backend must be a tune_gym.measure.Backend, got {type(backend).__name__}, "
                           f"which lacks {', '.join(m + '()' for m in missing_methods(backend))}")
    started = time.time()
    entry = {"command": command or shlex.join(["tune-gym", "collect", *sys.argv[1:]]),
             "plans": [asdict(p) for p in plans] if measure else [], "host": host_id(), "started": started}
    simulated_host = backend.name if backend.simulated else None
    if simulated_host:  # no machine measured these rows: the backend is their host
        entry["simulated"] = simulated_host
        note = "; ".join(filter(None, [f"simulated: every row comes from the {simulated_host} backend's model, "
                                       "nothing was measured on hardware", note]))
    if note:
        entry["note"] = note
    threads = backend.threads_for(task) if hasattr(backend, "threads_for") else None
    if threads is not None:
        entry["threads"] = threads
    modes = _ModeBook(plans, selections, previous)
    try:
        with TuningSession(task, space, backend, log=journal, resume=True) as session:
            if measure and not simulated_host:
                _check_host(session.resumed, host_id(), out)
            if threads is not None and measure:
                _check_threads(session.resumed, threads, out)
            # the resumed data's reference, unless the reference audit marks it suspect: then measure it again
            recorded = recorded_reference(session.resumed, task, host=host_id())
            session.reference = ((recorded if recorded is not None and not recorded.suspect else None)
                                 or backend.reference(task, preset)
                                 or (measure_reference(task) if task.has_torch_reference else None))
            at_start = len(session.measured)
            saver = _Saver(out, task, preset, journal, modes, previous, entry, save_every, simulated_host)
            for plan, selection in zip(plans if measure else [], selections):
                session.new_run()
                if plan.mode == "exploration":
                    _explore(session, plan, explorer(plan), modes, batch, progress, saver)  # type: ignore[misc]
                    continue
                todo = [c for c in selection if c not in session.measured]
                bar = _bar(progress, len(selection), f"{plan.mode} {task.uri}", len(selection) - len(todo))
                for i in range(0, len(todo), batch):
                    ev = session.evaluate(todo[i: i + batch])
                    _advance(bar, ev)
                    saver.maybe_save()
                _close(bar)
            entry["measured"] = len(session.measured) - at_start
    finally:
        if own_backend:
            backend.close()
    entry["finished"] = time.time()
    return saver.save(load_records(journal), final=True)


def _check_host(records: list[Any], host: str, out: Path) -> None:
    """Refuse to add measurements of this host (``host``) to a dataset, or the journal of a
    killed collection, whose rows were measured on another: throughput compares only within one
    host, so a dataset holds one host's measurements (simulated rows name their backend and are
    not measured here, so a simulated collection is not checked)."""
    other = sorted({r.host for r in records if r.host != host})
    if other:
        raise DatasetError(f"{out}: its rows were measured on host(s) {', '.join(other)}, this is host {host}; "
                           f"a dataset never mixes hosts: collect into a new file (or resume on that host; a "
                           f"killed collection's rows are in {journal_path(out).name})")


def _check_threads(records: list[Any], threads: int, out: Path) -> None:
    """Refuse to add kernels timed on ``threads`` CPU threads to a dataset whose rows ran on
    another count: a dataset never mixes them, as it never mixes hosts. Rows without a
    ``threads`` field ran on TVM's default pool, half the logical CPUs on x86-64."""
    ok = [r for r in records if r.result.ok]
    other = sorted({str(r.result.extra.get("threads", "TVM's default (half the logical CPUs)")) for r in ok
                    if r.result.extra.get("threads") != threads})
    if other:
        raise DatasetError(f"{out}: its kernels were timed on {', '.join(other)} thread(s), this backend times "
                           f"them on {threads}; collect into a new file, or give the backend option "
                           f"threads=<n> that the dataset used")


def _explore(session: Any, plan: Plan, agent: Any, modes: _ModeBook, batch: int, progress: bool,
             saver: _Saver) -> None:
    """Let ``agent`` choose configs until ``plan.n`` exploration configs are measured."""
    space, task = session.space, session.task
    done = sum(1 for c in session.measured if modes.mode_of(c) == "exploration")
    bar = _bar(progress, plan.n, f"exploration ({plan.agent or type(agent).__name__}) {task.uri}", min(done, plan.n))
    agent.reset(space, task, plan.seed)
    measured_before = set(session.measured)
    if measured_before:  # the agent learns from everything measured so far and never repeats it
        agent.observe(list(session.measured), list(session.measured.values()))
    while done < plan.n and len(session.measured) < space.size:
        configs = [space.check(c) for c in agent.propose(min(batch, plan.n - done))]
        if not configs:
            break
        ev = session.evaluate(configs)
        evaluated = [o for o in ev.outcomes if o.result is not None]
        agent.observe([o.config for o in evaluated], [o.result for o in evaluated])
        fresh = [t.config for t in ev.new if t.config not in measured_before]
        for cfg in fresh:
            measured_before.add(cfg)
            modes.explored.add(cfg)
        done += len(fresh)
        _advance(bar, ev, len(fresh))
        saver.maybe_save()
    _close(bar)


class _ModeBook:
    """Which mode each config was collected in: the first plan whose selection holds it, then
    what the previous dataset said, then ``exploration`` for configs an agent chose."""

    def __init__(self, plans: Sequence[Plan], selections: Sequence[list[Config]], previous: Dataset | None) -> None:
        self.by_plan: dict[Config, str] = {}
        for plan, selection in zip(plans, selections):
            for cfg in selection:
                self.by_plan.setdefault(cfg, plan.mode)
        self.previous = ({tuple(int(v) for v in c): m for c, m in zip(previous.configs, previous.mode)}
                         if previous is not None else {})
        self.explored: set[Config] = set()
        self.default = "exploration" if any(p.mode == "exploration" for p in plans) else "records"

    def mode_of(self, cfg: Config) -> str:
        return self.by_plan.get(cfg) or self.previous.get(cfg) or self.default


class _Saver:
    """Rewrites the Parquet dataset from the journal every ``every`` seconds."""

    def __init__(self, out: Path, task: Task, preset: str, journal: Path, modes: _ModeBook,
                 previous: Dataset | None, entry: dict[str, Any], every: float,
                 simulated_host: str | None = None) -> None:
        self.out, self.task, self.preset, self.journal = out, task, preset, journal
        self.simulated_host = simulated_host
        self.modes, self.entry, self.every = modes, entry, every
        self.history = list(previous.meta.get("collection", [])) if previous is not None else []
        self.last = time.monotonic()

    def maybe_save(self) -> None:
        if time.monotonic() - self.last >= self.every:
            from tune_gym.records import load_records

            self.save(load_records(self.journal))

    def save(self, records: list[Any], final: bool = False) -> Dataset:
        entry = dict(self.entry)
        entry.setdefault("finished", None if not final else time.time())
        entry["wall_secs"] = round(time.time() - entry["started"], 1)
        if self.simulated_host:
            records = [dataclasses.replace(r, host=self.simulated_host) for r in records]
        ds = Dataset.from_records(records, task=self.task, preset=self.preset,
                                  mode=[self.modes.mode_of(tuple(r.config)) for r in records],
                                  collection=[*self.history, entry])
        if self.simulated_host:
            ds.meta["hosts"][self.simulated_host] = {"simulated": True, "cpu": f"simulated ({self.simulated_host})"}
        ds.save(self.out)
        self.last = time.monotonic()
        return ds


def _bar(progress: bool, total: int, desc: str, initial: int = 0) -> Any:
    if not progress:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="cfg", dynamic_ncols=True, file=sys.stderr)


def _advance(bar: Any, ev: Any, n: int | None = None) -> None:
    if bar is None:
        return
    best = max((t.gflops for t in ev.new), default=math.nan)
    bar.update(ev.measured if n is None else n)
    if not math.isnan(best):
        bar.set_postfix_str(f"batch best {best:.1f} GFLOPS", refresh=False)


def _close(bar: Any) -> None:
    if bar is not None:
        bar.close()
