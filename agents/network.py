"""Tune every kernel of a network under one trial budget, with any registered agent per task
(``tune-gym network``).

    >>> from agents.network import tune_network
    >>> from tune_gym.networks import import_network
    >>> net = import_network("resnet18")
    >>> result = tune_network(net, agent="xgb-sa", trials=512, out_dir="runs/resnet18")
    >>> lib = net.compile(result.database())

Each kernel (:class:`~tune_gym.networks.network.NetworkTask`) gets its own ``Tune-v0`` env
(observation ``knobs``, its records in ``out_dir/records/<digest>.jsonl``) and its own agent,
seeded ``seed + task index``; all envs share one measurement backend. A scheduler decides which
task measures the next batch (:data:`SCHEDULERS`):

* ``round-robin``: each task in turn, one batch each;
* ``gradient`` (the default; Ansor's task scheduler, also MetaSchedule's default): first one
  batch per task, then always the task where one more batch is expected to cut the weighted
  network latency ``sum(weight_i * best_latency_i)`` most. The expected cut of task ``i`` after
  ``t_i`` trials is ``weight_i * (alpha * backward_i + (1 - alpha) * forward_i)`` per trial, with
  ``backward_i`` the latency it gained per trial over its last ``window`` batches and
  ``forward_i = best_latency_i / t_i`` (the optimistic guess that as many trials again could
  take its latency to zero); ``alpha = 0.2`` and ``window = 3`` as in Ansor. Ties go to the
  first task. Kernels whose space has one config (a reshape) are not tuned: TVM's default
lowering builds them.

With ``transfer=K``, up to ``K`` configs of each batch are carried from the kernel's peers
(kernels with the same split knobs, e.g. a network's blocked convolutions): their best configs
so far, mapped onto the kernel's knobs, the fastest peer's first (:mod:`agents.transfer`); the
agent proposes the rest and learns from all of them.

With ``confirm=K``, once the budget is spent each kernel's ``K`` fastest configs are measured
again, together, one batch per kernel, and the fastest of that re-measurement is the kernel's
pick (what :meth:`NetworkTuneResult.database` exports and the estimated latency adds up). The
best of hundreds of measurements is often a lucky one on a host whose speed wanders (the
winner's curse); measured again side by side, the candidates are compared at one moment and
without that selection bias. The re-measurements are extra measurements, not trials; they are
kept in ``out_dir/confirm/<digest>.jsonl`` and a resumed run re-uses them while the kernel's
``K`` fastest configs are the same.

The budget counts unique trials over all tasks, records included: a killed run started again
with ``resume=True`` loads each task's records (nothing is measured twice) and goes on with the
scheduler's state rebuilt from them. Every choice is deterministic given the seed and the
measurements, so on the replay backend one seed gives one run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.base import EnvRunner, agent_class, make_agent
from agents.shared import SharedRows
from agents.transfer import peer_configs
from tune_gym.networks.network import Network, NetworkTask
from tune_gym.space import Config

__all__ = ["SCHEDULERS", "NetworkTuneResult", "TaskProgress", "pick_records", "tune_network"]

#: Task schedulers of :func:`tune_network`.
SCHEDULERS = ("gradient", "round-robin")
ALPHA = 0.2
WINDOW = 3


@dataclass
class TaskProgress:
    """One kernel's state during and after a network run."""

    task: NetworkTask
    runner: Any = field(repr=False)
    history: list[tuple[int, float]] = field(default_factory=list)  # (trials used, best latency s) per batch
    #: Configs this run carried over from peer kernels (``tune_network(transfer=...)``; not
    #: those of an earlier, resumed run).
    carried: set[Config] = field(default_factory=set)
    #: The re-measurement of the kernel's fastest configs (``tune_network(confirm=...)``).
    confirmed: dict[Config, Any] = field(default_factory=dict)

    @property
    def trials(self) -> int:
        return self.runner.base.trials_used

    @property
    def best_latency(self) -> float:
        """Seconds per call of the best config so far (``inf`` before one ran)."""
        best = self.runner.base.session.best
        return best.result.mean if best is not None and best.result.ok else float("inf")

    @property
    def best_trial(self) -> Any:
        return self.runner.base.session.best

    @property
    def pick(self) -> tuple[Config, Any] | None:
        """``(config, result)`` the kernel's schedule comes from: the fastest of the confirming
        re-measurement when there is one, else the best trial; ``None`` before one ran."""
        ok = [(c, r) for c, r in self.confirmed.items() if r.ok]
        if ok:
            return min(ok, key=lambda cr: cr[1].mean)
        best = self.best_trial
        return (best.config, best.result) if best is not None and best.result.ok else None

    @property
    def pick_carried(self) -> bool:
        """Whether :attr:`pick` is a config carried over from a peer kernel."""
        pick = self.pick
        return pick is not None and pick[0] in self.carried

    @property
    def pick_changed(self) -> bool:
        """Whether the confirming re-measurement picked another config than the best trial."""
        pick, best = self.pick, self.best_trial
        return pick is not None and best is not None and pick[0] != best.config

    @property
    def pick_latency(self) -> float:
        """Seconds per call of :attr:`pick` as last measured (``inf`` before one ran)."""
        pick = self.pick
        return pick[1].mean if pick is not None else float("inf")

    def fastest(self, k: int) -> list[Config]:
        """The ``k`` configs of this run with the lowest measured latency (successes only)."""
        ok = [t for t in self.runner.result.trials if t.result.ok]
        return [t.config for t in sorted(ok, key=lambda t: t.result.mean)[:k]]


@dataclass
class NetworkTuneResult:
    network: Network
    agent: str
    scheduler: str
    trials: int
    batch: int
    tasks: list[TaskProgress]
    seconds: float
    records_dir: Path | None

    @property
    def estimated_latency(self) -> float:
        """``sum(weight * latency of the pick)`` over the tuned kernels (seconds; ``inf`` while
        one has no successful measurement): their share of a forward pass."""
        return sum(p.task.weight * p.pick_latency for p in self.tasks)

    def records(self) -> list[Any]:
        """Every record of the run's search (``confirm``'s re-measurements are in
        ``out_dir/confirm/``; :func:`pick_records` gives what :meth:`database` exports)."""
        from tune_gym.records import load_records

        if self.records_dir is None:
            raise ValueError("this run kept no records (give out_dir)")
        out = []
        for p in self.tasks:
            path = self.records_dir / f"{p.task.task.digest}.jsonl"
            if path.exists():
                out.extend(load_records(path, task=p.task.task.uri))
        return out

    def database(self, directory: str | Path | None = None) -> Any:
        """Each kernel's pick (its best config, or with ``confirm`` the fastest of the
        re-measurement) as a MetaSchedule database (in ``directory``, by default
        ``records_dir/../database``), ready for :meth:`Network.compile`."""
        from tune_gym.records import export_database, load_database

        if self.records_dir is None:
            raise ValueError("this run kept no records (give out_dir)")
        if directory is None:
            directory = self.records_dir.parent / "database"
        confirmed = {p.task.task.digest for p in self.tasks if p.confirmed}
        return load_database(export_database(pick_records(self.records_dir.parent, confirmed), directory))


def _pick(progress: list[TaskProgress], scheduler: str, turn: int) -> int | None:
    """The index of the task that measures next (``None``: every task is done)."""
    open_ = [i for i, p in enumerate(progress) if not p.runner.done]
    if not open_:
        return None
    untried = [i for i in open_ if progress[i].trials == 0]
    if untried:
        return untried[0]
    if scheduler == "round-robin":
        return min(open_, key=lambda i: ((i - turn) % len(progress), i))
    best, choice = -1.0, open_[0]
    for i in open_:
        p = progress[i]
        lat, t = p.best_latency, max(1, p.trials)
        if lat == float("inf"):  # nothing ran yet: the most promising of all
            return i
        back = 0.0
        if len(p.history) > WINDOW:
            t0, lat0 = p.history[-1 - WINDOW]
            back = max(0.0, (lat0 - lat) / max(1, t - t0)) if lat0 != float("inf") else lat / t
        gain = p.task.weight * (ALPHA * back + (1 - ALPHA) * lat / t)
        if gain > best:
            best, choice = gain, i
    return choice


def pick_records(run_dir: str | Path, confirmed: set[str] | None = None) -> list[Any]:
    """The records of a run whose best, task by task, is each kernel's pick: those of
    ``run_dir/records/``, with a kernel's confirming re-measurement
    (``run_dir/confirm/<digest>.jsonl``) in their place where it has one with a success.

    Args:
        run_dir: a :func:`tune_network` ``out_dir``.
        confirmed: the task digests whose re-measurement counts (``None``: every one there).
    """
    from tune_gym.records import load_records

    run_dir = Path(run_dir)
    out = []
    for path in sorted((run_dir / "records").glob("*.jsonl")):
        again = run_dir / "confirm" / path.name
        kept = load_records(again) if again.exists() and (confirmed is None or path.stem in confirmed) else []
        out.extend(kept if any(r.result.ok for r in kept) else load_records(path))
    return out


def _confirm(state: list[TaskProgress], backend: Any, k: int, folder: Path | None, resume: bool) -> None:
    """Measure each kernel's ``k`` fastest configs again, in one batch per kernel (see the
    module docstring); a kept re-measurement of the same configs is re-used on resume."""
    from tune_gym.records import Record, RecordWriter, load_records

    for p in state:
        top = p.fastest(k)
        if len(top) < 2:  # nothing to choose between
            continue
        space = p.runner.base.space
        path = folder / f"{p.task.task.digest}.jsonl" if folder is not None else None
        if path is not None and resume and path.exists():
            kept = {r.config: r.result for r in load_records(path, task=p.task.task.uri)}
            if set(kept) == set(top):
                p.confirmed = kept
                continue
        results = backend.measure(p.task.task, space, top)
        p.confirmed = dict(zip(top, results))
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.unlink(missing_ok=True)  # one re-measurement per kernel: the latest
            with RecordWriter(path) as writer:
                writer.append([Record.create(space, c, r, backend.name) for c, r in zip(top, results)])


def _carried(p: TaskProgress, state: list[TaskProgress], n: int) -> list[Config]:
    """Up to ``n`` configs for ``p``'s next batch, mapped from its peers' best configs
    (:func:`agents.transfer.peer_configs`), none that ``p`` has evaluated."""
    space = p.runner.base.space
    peers = [(q.runner.base.space, q.best_trial.config, q.best_trial.result.gflops)
             for q in state if q is not p and q.best_trial is not None and q.best_trial.result.ok]
    return peer_configs(space, peers, exclude=p.runner.agent.seen, n=n)


def tune_network(
    network: Network, agent: str = "xgb-sa", trials: int = 512, batch: int = 8, scheduler: str = "gradient",
    agent_options: dict[str, Any] | None = None, out_dir: str | Path | None = None, resume: bool = False,
    seed: int = 0, backend: str | Any = "live", backend_options: dict[str, Any] | None = None,
    preset: str = "full", progress: bool = True, shared_model: bool = False, transfer: int = 0, confirm: int = 0,
) -> NetworkTuneResult:
    """Tune the network's kernels with ``agent`` until ``trials`` unique trials are spent.

    Args:
        network: from :func:`tune_gym.networks.import_network`.
        agent: a registered agent id (``tune-gym agents``); one instance per task.
        trials: the network's budget of unique trials over all tasks.
        batch: configs measured per step of one task.
        scheduler: one of :data:`SCHEDULERS`.
        out_dir: where records go (``records/<digest>.jsonl``); ``None``: no records.
        resume: load the records in ``out_dir`` first.
        seed: task ``i``'s agent is seeded ``seed + i``.
        backend: a backend name (``live``, ``rpc``, ...) or instance, shared by every task.
        preset: the knob-space preset.
        progress: show a progress bar.
        shared_model: the kernels' agents train their cost models on every kernel's
            measurements, not only their own (:class:`agents.shared.SharedRows`; agents with a
            ``shared_rows`` attribute: ``meta-bo``).
        transfer: configs per batch carried from the kernel's peers (kernels with the same
            split knobs): their best configs mapped onto its knobs, the fastest peer's first
            (:mod:`agents.transfer`); the agent proposes the rest of the batch. They count
            against the budget like any trial. 0: none.
        confirm: after the budget, each kernel's ``confirm`` fastest configs are measured again
            together and the fastest of that re-measurement is its pick (module docstring);
            extra measurements, not trials. 0 (or 1): none.
    """
    import gymnasium as gym

    from tune_gym.measure import resolve_backend

    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {scheduler!r}; known: {', '.join(SCHEDULERS)}")
    if trials < 1 or batch < 1:
        raise ValueError(f"trials ({trials}) and batch ({batch}) must be >= 1")
    if not 0 <= transfer <= batch:
        raise ValueError(f"transfer ({transfer}) must be in [0, batch] = [0, {batch}]")
    if confirm < 0:
        raise ValueError(f"confirm ({confirm}) must be >= 0")
    if resume and out_dir is None:
        raise ValueError("resume=True needs out_dir (where the records are)")
    if shared_model and not hasattr(agent_class(agent), "shared_rows"):
        raise ValueError(f"shared_model=True: agent {agent!r} cannot train on other kernels' measurements "
                         "(agents that can: meta-bo)")
    pool = SharedRows() if shared_model else None
    records_dir = Path(out_dir) / "records" if out_dir is not None else None
    if records_dir is not None:
        records_dir.mkdir(parents=True, exist_ok=True)
    shared, owns = resolve_backend(backend, backend_options)
    state: list[TaskProgress] = []
    bar = None
    start = time.perf_counter()
    try:
        for i, nt in enumerate(network.tasks):
            if not nt.tunable:  # one config: nothing to choose; compiled with TVM's default lowering
                continue
            log = records_dir / f"{nt.task.digest}.jsonl" if records_dir is not None else None
            env = gym.make("tune_gym/Tune-v0", task=nt.task, backend=shared, batch_size=batch, budget=trials,
                           preset=preset, log=log, resume=resume, reward_norm=1.0, observation="knobs",
                           disable_env_checker=True, max_episode_steps=-1)  # EnvRunner ends the run
            tuner = make_agent(agent, **(agent_options or {}))
            if pool is not None:
                tuner.shared_rows = pool  # type: ignore[attr-defined]  # checked above: it has one
            runner = EnvRunner(tuner, env, seed=seed + i)
            runner.start()
            p = TaskProgress(nt, runner)
            if p.trials:
                p.history.append((p.trials, p.best_latency))
            state.append(p)
        used = sum(p.trials for p in state)
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=trials, initial=min(used, trials), desc=f"{network.name} {agent}", unit="trial",
                       dynamic_ncols=True)
        turn = 0
        while used < trials:
            pick = _pick(state, scheduler, turn)
            if pick is None:
                break
            i, p = pick, state[pick]
            first = _carried(p, state, min(transfer, trials - used)) if transfer else []
            new = p.runner.step(limit=trials - used, first=first)
            p.carried.update(first)
            used += len(new)
            p.history.append((p.trials, p.best_latency))
            turn = i + 1
            if bar is not None:
                bar.update(len(new))
                lat = sum(q.task.weight * q.best_latency for q in state)
                bar.set_postfix(est_ms=f"{lat * 1e3:.2f}" if lat != float("inf") else "-")
        if confirm > 1:
            _confirm(state, shared, confirm, Path(out_dir) / "confirm" if out_dir is not None else None, resume)
    finally:
        if bar is not None:
            bar.close()
        for p in state:
            p.runner.env.close()
        if owns:
            shared.close()
    return NetworkTuneResult(network, agent, scheduler, trials, batch, state, time.perf_counter() - start,
                             records_dir)


def network_report(result: NetworkTuneResult, threads: int, compare: tuple[str, ...] = ("torch", "default"),
                   metaschedule_dir: str | Path | None = None, timing_repeats: int = 7) -> dict[str, Any]:
    """Compile the tuned network, check it against PyTorch, and time it end to end next to the
    baselines in ``compare`` (``torch``: PyTorch eager; ``default``: TVM's build without
    records; ``metaschedule``: MetaSchedule's ``tune_relax`` at the same trial budget, its work
    in ``metaschedule_dir``, as many trials per iteration as the run's batch, so that its
    scheduler, like ours, reaches every kernel). Returns a JSON-ready dict (what ``tune-gym network`` prints and
    writes as ``summary.json``)."""
    from tune_gym.networks.timing import metaschedule_tune, time_executable, time_torch

    net = result.network
    db = result.database()
    tuned = net.compile(db)
    applied = net.applied(db)
    err = net.max_rel_error(tuned)
    rows: dict[str, Any] = {f"tune_gym {result.agent}": {
        **time_executable(tuned, net.inputs, threads, timing_repeats).to_json(),
        "tuning_s": round(result.seconds, 1), "trials": sum(p.trials for p in result.tasks)}}
    if "metaschedule" in compare:
        work = Path(metaschedule_dir or (result.records_dir.parent / "metaschedule" if result.records_dir
                                         else "metaschedule"))
        ms_db, secs = metaschedule_tune(net, result.trials, work, seed=0, trials_per_iter=result.batch)
        ms_lib = net.compile(ms_db)
        rows["MetaSchedule tune_relax"] = {**time_executable(ms_lib, net.inputs, threads, timing_repeats).to_json(),
                                           "tuning_s": round(secs, 1), "trials": result.trials}
    if "default" in compare:
        rows["TVM default build"] = time_executable(net.default_build(), net.inputs, threads, timing_repeats).to_json()
    if "torch" in compare and net.model is not None:
        from tune_gym.networks.models import MODELS

        if net.name in MODELS:
            rows["PyTorch eager"] = time_torch(net.name, threads, repeats=timing_repeats).to_json()
    tasks = []
    for p in result.tasks:
        pick = p.pick
        tasks.append({
            "kernel": p.task.task.name, "uri": p.task.task.uri, "weight": p.task.weight,
            "anchor": p.task.anchor.uri if p.task.anchor else None, "trials": p.trials,
            "carried": len(p.carried), "best_carried": p.pick_carried,
            "best_ms": pick[1].mean * 1e3 if pick is not None else None,
            "gflops": pick[1].gflops if pick is not None else None,
            "confirmed": len(p.confirmed),
            "pick_is_best_trial": pick is not None and not p.pick_changed,
            "applied": p.task.task.name in applied})
    return {"network": net.name, "target": str(net.target), "agent": result.agent, "scheduler": result.scheduler,
            "trials": result.trials, "kernels": len(net.tasks), "tuned_kernels": len(result.tasks),
            "max_rel_error_vs_torch": err, "estimated_ms": result.estimated_latency * 1e3,
            "latency": rows, "tasks": tasks}


def print_network_report(report: dict[str, Any]) -> None:
    """Plain-text tables of :func:`network_report`'s dict."""
    print(f"\nnetwork   {report['network']}  target {report['target']}  agent {report['agent']}  "
          f"scheduler {report['scheduler']}  budget {report['trials']} trials")
    print(f"kernels   {report['kernels']} ({report['tuned_kernels']} tunable)   outputs vs PyTorch: max relative "
          f"error {report['max_rel_error_vs_torch']:.2e}")
    print(f"\n{'kernel':<58} {'x':>2} {'trials':>6} {'best ms':>9} {'GFLOPS':>8}  anchor")
    for t in report["tasks"]:
        ms = f"{t['best_ms']:.4f}" if t["best_ms"] is not None else "-"
        gf = f"{t['gflops']:.1f}" if t["gflops"] is not None else "-"
        anchor = (t["anchor"] or "").removeprefix("op://").split("?")[0]
        print(f"{t['kernel'][:58]:<58} {t['weight']:>2} {t['trials']:>6} {ms:>9} {gf:>8}  {anchor}")
    print(f"\n{'end to end':<28} {'median ms':>10} {'tuning s':>9}")
    for name, row in report["latency"].items():
        tuning = f"{row['tuning_s']:.0f}" if "tuning_s" in row else "-"
        print(f"{name:<28} {row['median'] * 1e3:>10.3f} {tuning:>9}")
    print(f"(estimated from the tuned kernels' best latencies: {report['estimated_ms']:.3f} ms)")
