"""The benchmark runner: every (agent, task, seed) run of a suite, resumable and parallel.

Each run drives ``tune_gym/Tune-v0`` with an agent (:func:`agents.run`) and becomes one line
of a results file (:mod:`benchmarks.leaderboard.results`): every config the agent proposed,
in order, with its throughput and simulated clock, and the agent's own compute seconds
(``propose``/``observe``/``reset``), kept apart from measurement time so a slow agent cannot
hide behind a simulated clock. An agent that raises :class:`agents.NotApplicable` for a task
(e.g. a predictor never trained on its op) gives a line with no trials and the reason under
``not_applicable``, which the leaderboard shows as ``n/a``. A run ends at its budget, when
every config of the space is a trial, or earlier when the agent proposes nothing more; the
line says which (``ended``: ``budget``, ``space`` or ``agent``, :func:`run_end`). A line is
appended to the results' journal and fsynced as soon as its run ends, so a killed benchmark
loses only the runs in flight; started again, it runs only what is missing. When every run is
done, the journal is packed (:func:`.results.pack_results`).

A run already made for another suite can be taken over instead of run again (``reuse``,
``tune-gym bench --reuse OTHER``): a key names a run (agent, task, preset, backend, budget,
batch, seed, options), so a line of another results file with the key of a run to do is that
run, provided the data answering it is still the same (its dataset files and checksums,
:func:`data_identity`); a line whose data changed is run again. A taken-over line is copied
as it is, with ``reused_from`` naming the results and suite it came from, and ``validate``
checks it as any other.

Runs go to worker processes on this machine (``jobs``) or, with ``ray_address``, to a Ray
cluster (``ray.init(address=...)``): the same function runs in both. A worker process dies
with the benchmark that started it (Linux: the parent-death signal; elsewhere a thread that
watches the parent), so a killed benchmark leaves no worker behind.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.leaderboard.results import ResultsFile, results_paths
from benchmarks.leaderboard.suite import RunSpec, Suite, base_agent

__all__ = ["die_with_parent", "local_only_kinds", "reusable_runs", "run_end", "run_one", "run_suite", "worker_init"]


def _timed(fn: Callable[..., Any], clock: list[float]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            clock[0] += time.perf_counter() - start
    return wrapper


def make_env(spec: RunSpec) -> Any:
    """The ``Tune-v0`` env of a run (replay/surrogate data from the dataset catalog).

    Its observation is the task's kind's default (:func:`tune_gym.kinds.default_observation`:
    knobs only on a kind whose configs have no TVM schedule). Rewards are normalized by the
    data's recorded reference even where the reference audit marks it suspect
    (``allow_suspect_reference``): a run's line records that reference, so it validates against
    the data, and the leaderboard prints "suspect" instead of its "vs PyTorch" ratio."""
    import gymnasium as gym

    import tune_gym  # noqa: F401  (registers the envs)
    from tune_gym import kinds
    from tune_gym.tasks import Task

    task = Task.parse(spec.task)
    with warnings.catch_warnings():  # the opt-in is deliberate and the report says "suspect": no warning per run
        warnings.filterwarnings("ignore", message=".*marked suspect by the reference audit")
        return gym.make("tune_gym/Tune-v0", task=task, preset=spec.preset, backend=spec.backend,
                        batch_size=spec.batch, budget=spec.budget, disable_env_checker=True,
                        observation=kinds.default_observation(task), allow_suspect_reference=True,
                        max_episode_steps=-1)  # agents.run ends the run (its idle rule), not Tune-v0's step limit


def run_one(spec: RunSpec) -> dict[str, Any]:
    """Run one (agent, task, seed) and return its results line (see :mod:`.results`); an entry
    ``kt:<strategy>`` runs Kernel Tuner's strategy instead of an agent (:mod:`.kt_entries`)."""
    import torch

    from benchmarks.leaderboard import kt_entries

    # One thread per run: runs are parallel across processes, and a model's thread pool
    # competing for the same cores slows it down (GP fits 3-5x on 2 cores).
    torch.set_num_threads(1)
    start = time.perf_counter()
    env = make_env(spec)
    try:
        base = env.unwrapped
        if kt_entries.is_entry(spec.agent):
            trials, info, agent_secs, not_applicable = kt_entries.run_entry(spec, base.task, base.space, base.backend)
        else:
            trials, info, agent_secs, not_applicable = _run_agent(spec, env)
        line = {
            "key": spec.key, "spec": asdict(spec), "task_uri": base.task.uri,
            "space_size": base.space.size, "flops": base.task.flops,
            "reference_gflops": base.reference_gflops,
            "data": data_identity(base.backend, base.task, spec.preset),
            "configs": [list(t.config) for t in trials],
            "gflops": [t.result.gflops for t in trials],
            "errors": [t.result.error for t in trials],
            "clock": [t.clock for t in trials],
            "best_gflops": max((t.result.gflops for t in trials), default=0.0),
            "agent_info": info,
            "agent_secs": agent_secs, "wall_secs": time.perf_counter() - start,
            "host": _host(), "time": time.time(),
        }
        if not_applicable is None:
            line["ended"] = run_end(len(trials), spec.budget, base.space.size)
        else:
            line["not_applicable"] = not_applicable
        return line
    finally:
        env.close()


def _run_agent(spec: RunSpec, env: Any) -> tuple[list[Any], dict[str, Any], float, str | None]:
    """The agent's run on ``env``: ``(trials, agent_info, its compute seconds, None)``, or
    ``([], {}, seconds, why)`` when it raises :class:`agents.NotApplicable`."""
    from agents import NotApplicable, make_agent, run

    agent = make_agent(base_agent(spec.agent), **spec.options)
    agent_secs = [0.0]
    for name in ("reset", "propose", "observe"):
        setattr(agent, name, _timed(getattr(agent, name), agent_secs))
    try:
        trials = run(agent, env, seed=spec.seed).trials
    except NotApplicable as exc:  # the agent is not built for this task: recorded, not failed
        return [], {}, agent_secs[0], str(exc)
    return trials, agent.describe(), agent_secs[0], None


def run_end(trials: int, budget: int, space_size: int) -> str:
    """Why a run of ``trials`` trials ended: ``space`` (every config is a trial; the env's
    ``terminated``), ``budget`` (its ``truncated``), else ``agent`` (it proposed nothing more)."""
    if trials >= space_size:
        return "space"
    return "budget" if trials >= budget else "agent"


def _host() -> str:
    from tune_gym.host import host_id

    return host_id()


def data_identity(backend: Any, task: Any, preset: str) -> dict[str, Any]:
    """Which data answered the run (dataset files and checksums), so validation uses the same;
    only the backend's name for a backend without recorded data (live, rpc, a simulator)."""
    datasets = backend.datasets(task, preset)
    if not datasets:
        return {"backend": backend.name}
    return {"backend": backend.name,
            "datasets": [{"source": Path(d.source).name, "checksum": d.meta.get("checksum")} for d in datasets]}


def run_suite(
    suite: Suite,
    out: str | Path,
    jobs: int = 1,
    agents: list[str] | None = None,
    seeds: int | None = None,
    ray_address: str | None = None,
    progress: bool = True,
    runner: Callable[[RunSpec], dict[str, Any]] = run_one,
    reuse: Sequence[str | Path] = (),
) -> ResultsFile:
    """Run every missing run of ``suite`` and append it to the results file ``out``.

    Args:
        suite: the suite.
        out: the results (``X.parquet``, or its journal ``X.jsonl``: see :mod:`.results`);
            created with a header, or resumed. Once every run is done they are packed.
        jobs: worker processes on this machine (ignored with ``ray_address``).
        agents, seeds: restrict the agents / the number of seeds.
        ray_address: run on this Ray cluster (``auto``, ``ray://host:port``, or ``local``
            for a fresh local instance) instead of local processes.
        progress: a progress bar with ETA on stderr.
        runner: the function executed per run (tests swap in a slow one).
        reuse: results of other suites (or earlier files of this one) whose runs with the key
            of a missing run, on the same data, are taken over instead of run
            (:func:`reusable_runs`).
    """
    if any(t.backend == "live" for t in suite.tasks) and (jobs > 1 or ray_address):
        raise ValueError(f"suite {suite.name} measures live: its runs are timed one at a time on this machine "
                         "(no --jobs > 1, no --ray)")
    _check_subset(suite, agents, seeds)
    _check_tasks(suite, workers=jobs > 1 or bool(ray_address))
    results = ResultsFile.open(out, suite)
    todo = [s for s in suite.runs(agents, seeds) if s.key not in results.done]
    taken = reusable_runs(todo, reuse) if reuse else {}
    for spec in todo:
        if spec.key in taken:
            results.append(taken[spec.key])
    todo = [s for s in todo if s.key not in taken]
    if taken and progress:
        print(f"{len(taken)} runs taken over from {', '.join(str(r) for r in reuse)}", file=sys.stderr)
    bar = _bar(progress, len(todo), len(results.done), suite.name)
    try:
        if ray_address:
            _run_ray(todo, ray_address, runner, results, bar)
        elif jobs <= 1:
            for spec in todo:
                _finish(results, bar, runner(spec))
        else:
            _run_pool(todo, jobs, runner, results, bar)
        if bar is not None:
            bar.close()
            print(f"packing the runs into {results_paths(out)[0]}", file=sys.stderr)
        results.pack()
    finally:
        results.close()
        if bar is not None:
            bar.close()
    return results


def reusable_runs(todo: Sequence[RunSpec], reuse: Sequence[str | Path]) -> dict[str, dict[str, Any]]:
    """The lines of the results ``reuse`` (the first that has a key wins) that are runs of
    ``todo``: same key, and answered by the data that answers that run now (a run whose dataset
    was re-collected since is not taken: it is run again). Each comes back with ``reused_from``
    (``"FILE (suite NAME)"``; a line taken over before keeps its first origin).

    Raises:
        ResultsError: a file of ``reuse`` that cannot be read (see :func:`.results.read_results`).
    """
    from benchmarks.leaderboard.results import read_results
    from tune_gym.measure import make_backend
    from tune_gym.tasks import Task

    wanted = {s.key: s for s in todo}
    found: dict[str, dict[str, Any]] = {}
    for path in reuse:
        header, runs = read_results(path)
        origin = f"{Path(path).name} (suite {header['suite']['name']})"
        for line in runs:
            if line["key"] in wanted and line["key"] not in found:
                found[line["key"]] = line if "reused_from" in line else {**line, "reused_from": origin}
    backends: dict[str, Any] = {}
    now: dict[tuple[str, str, str], dict[str, Any]] = {}
    taken = {}
    for key, line in found.items():
        spec = wanted[key]
        where = (spec.backend, spec.task, spec.preset)
        if where not in now:
            if spec.backend not in backends:
                backends[spec.backend] = make_backend(spec.backend)
            now[where] = data_identity(backends[spec.backend], Task.parse(spec.task), spec.preset)
        if line["data"] == now[where]:
            taken[key] = line
    return taken


def _check_tasks(suite: Suite, workers: bool) -> None:
    """Every task of the suite can be made here, before any run starts: a task whose files are
    missing (a ``kt`` task's: the error names ``TUNE_GYM_DATA`` and where to download them) is
    one error naming the suite. With ``workers``, worker processes must find each task's target
    kind too: a core, builtin or entry-point kind."""
    from tune_gym.errors import TuneGymError
    from tune_gym.tasks import Task

    for t in suite.tasks:
        try:
            Task.parse(t.id)
        except TuneGymError as err:
            raise type(err)(f"suite {suite.name}: {err}") from None
    if workers and (local := local_only_kinds(suite)):
        task_id, kind = local[0]
        raise ValueError(f"suite {suite.name}: task {task_id}: target kind {kind!r} is registered in this process "
                         "only; declare it in the tune_gym.kinds entry-point group to run it in worker processes "
                         "(or run with --jobs 1)")


def local_only_kinds(suite: Suite) -> list[tuple[str, str]]:
    """``(task id, target kind)`` of the suite's tasks whose kind a worker process would not find:
    registered in this process only, not a core, builtin or entry-point kind. A task whose id does
    not parse is left out (making it says what is wrong)."""
    from tune_gym import kinds
    from tune_gym.tasks import Task

    out = []
    for t in suite.tasks:
        try:
            kind = Task.parse(t.id).target.kind
        except Exception:
            continue
        if not kinds.is_discoverable(kind):
            out.append((t.id, kind))
    return out


def _check_subset(suite: Suite, agents: list[str] | None, seeds: int | None) -> None:
    """``agents`` and ``seeds`` must pick runs of the suite (others would be no part of its leaderboard)."""
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= suite.seeds):
        raise ValueError(f"seeds: {seeds!r} is not a number of seeds in 1..{suite.seeds} (suite {suite.name} runs "
                         f"{suite.seeds}; for more, raise seeds in its file)")
    if agents is not None and (not agents or (unknown := [a for a in agents if a not in suite.agents])):
        raise ValueError(f"agents: {agents if not agents else unknown} are not agents of suite {suite.name} "
                         f"({', '.join(suite.agents)}); to add one, list it in the suite's file")


def _finish(results: ResultsFile, bar: Any, line: dict[str, Any]) -> None:
    results.append(line)
    if bar is not None:
        outcome = "n/a" if "not_applicable" in line else f"{line['best_gflops']:.1f} GFLOPS"
        bar.set_postfix_str(f"{line['spec']['agent']} {line['spec']['task']} {outcome}", refresh=False)
        bar.update(1)


def _run_pool(todo: Iterable[RunSpec], jobs: int, runner: Callable[..., Any], results: ResultsFile,
              bar: Any) -> None:
    import multiprocessing

    # "spawn": TVM's runtime and thread pools do not survive fork.
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                             initializer=worker_init, initargs=(os.getpid(),)) as pool:
        pending = {pool.submit(runner, spec) for spec in todo}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                _finish(results, bar, fut.result())


def worker_init(parent: int) -> None:
    """A worker process's setup (the bench's and ``validate --jobs``'): one thread per worker, as
    runs are parallel across processes and timing-free (replay); it exits when ``parent`` dies."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    die_with_parent(parent)


#: ``prctl`` option: the signal this process gets when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int, interval: float = 0.5) -> None:
    """Make this process exit when ``parent`` (the pid that started it) dies.

    On Linux the kernel sends it SIGKILL (``prctl(PR_SET_PDEATHSIG)``); elsewhere a daemon
    thread checks ``os.getppid()`` every ``interval`` seconds. A parent that died before
    either was set is seen at once."""
    if not _parent_death_signal():
        threading.Thread(target=_watch_parent, args=(parent, interval), name="watch-parent", daemon=True).start()
    if os.getppid() != parent:
        os._exit(1)


def _parent_death_signal() -> bool:
    """Ask the kernel for SIGKILL when the parent dies; False where there is no ``prctl``."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int, interval: float) -> None:
    while os.getppid() == parent:
        time.sleep(interval)
    os._exit(1)  # the parent is gone (this process was adopted): nobody will read a result


def _run_ray(todo: list[RunSpec], address: str, runner: Callable[..., Any], results: ResultsFile, bar: Any) -> None:
    try:
        import ray
    except ImportError:
        raise RuntimeError("--ray needs Ray: pip install 'ray[default]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=None if address == "local" else address, include_dashboard=False,
                 log_to_driver=False, runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    try:
        remote = ray.remote(num_cpus=1)(runner)
        pending = [remote.remote(spec) for spec in todo]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                _finish(results, bar, ray.get(ref))
    finally:
        if started_here:
            ray.shutdown()


def _bar(progress: bool, total: int, done: int, name: str) -> Any:
    if not progress:
        return None
    from tqdm import tqdm

    return tqdm(total=total + done, initial=done, desc=f"bench {name}", unit="run", dynamic_ncols=True,
                file=sys.stderr)
