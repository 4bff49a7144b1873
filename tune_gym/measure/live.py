"""Live measurement: build with TVM in worker processes, time on this machine's CPU (or GPU).

Design:
    * Builds run in a persistent pool of ``build_workers`` processes (TVM's
      ``PopenPoolExecutor``), in parallel, each with a per-config timeout. A crash or hang
      kills only that worker; the config is recorded as ``worker_crash`` / ``timeout`` and
      the pool restarts the worker for the next config. Workers are recycled every
      ``recycle_after`` jobs to bound TVM's per-process memory growth.
    * Timing runs one kernel at a time in a single runner process (also isolated, with its
      own timeout), with TVM's ``time_evaluator`` (``number`` calls per repeat, ``repeat``
      repeats, each repeat at least ``min_repeat_ms``), or with the adaptive evaluator.
    * A CPU kernel runs on as many threads as its target has cores (``num-cores``; the
      ``threads`` option, or else ``TVM_NUM_THREADS`` where set, overrides it), and each
      result's ``extra["threads"]`` says how many it ran on. Left alone, TVM would size its
      thread pool to half the logical CPUs on x86-64 (one thread on a 2-vCPU machine) whatever
      the target says, so a kernel compiled for two cores would be timed on one while
      PyTorch's reference uses both.
    * The first kernel of each task that runs is checked against PyTorch on random inputs;
      a mismatch is recorded as ``wrong_result`` and the next running kernel is checked
      again, until one passes (``check_all``: every running kernel is checked).
    * Tasks with ``weights=packed``: the builder removes the schedule's weight layout rewrite
      blocks as MetaSchedule's builder does, and the runner passes the kernel its weights
      pre-packed with the rewrite's index map (:mod:`tune_gym.measure.workers`), so the
      transform is not timed. The check runs that same kernel on the packed copy of the
      inputs PyTorch gets.

Built kernels live in one directory per backend, ``<tmp>/tune_gym_<pid>_<random>``
(:class:`WorkDir`), removed by :meth:`LiveBackend.close`. The directory survives no owner: a
small guard process removes it as soon as the owning process is gone, even by ``SIGKILL``, and
the next backend to start removes any such directory whose owner is dead (if the guard was
killed too). Worker processes die with the process that started them (``PR_SET_PDEATHSIG`` on
Linux, :func:`tune_gym.measure.workers.init_worker`).

MetaSchedule's ``LocalBuilder`` was not used: it starts a fresh process pool for every
batch, and each fresh worker imports TVM's tensor intrinsics (tens of seconds on this
machine), which would dominate the measurement time.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Annotated, Any, Self, TypeVar

from tune_gym.host import host_cores
from tune_gym.measure.base import Backend
from tune_gym.measure.result import MeasureResult
from tune_gym.options import Bool, Check, Float, Int, Option, OptionError, check_fields, check_keys, show
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["ADAPTIVE_OPTIONS", "BuiltBatch", "LiveBackend", "LiveConfig", "ProcessBackend", "WorkDir", "build_batch",
           "error_message", "make_build_pool", "sweep_workdirs"]

#: Options of the adaptive evaluator (:func:`tune_gym.measure.adaptive.adaptive_costs`), declared:
#: ``LiveConfig.adaptive`` takes a dict of some of them.
ADAPTIVE_OPTIONS: dict[str, Option] = {
    "micro_batch": Int(1, help="calls per micro-batch (50)"),
    "max_runs": Int(1, help="the repeat budget a fixed evaluator would spend (500)"),
    "cv_threshold": Float(0, low_open=True, help="stop when the CV of the micro-batch throughputs is below this (0.1)"),
    "min_batches": Int(1, help="micro-batches needed before the rule may stop (3)"),
}


def _adaptive_options(name: str, adaptive: Any) -> dict[str, Any] | None:
    """``LiveConfig.adaptive`` checked: ``None``, or a dict of :data:`ADAPTIVE_OPTIONS` (copied)."""
    if adaptive is None:
        return None
    if not isinstance(adaptive, dict):
        raise OptionError(f"{name} must be None or a dict of {', '.join(ADAPTIVE_OPTIONS)} "
                          f"(all optional), got {show(adaptive)}")
    check_keys(name, adaptive, ADAPTIVE_OPTIONS)
    return {key: ADAPTIVE_OPTIONS[key].check(f"{name} {key}", value) for key, value in adaptive.items()}


@dataclass
class LiveConfig:
    """Settings of the live backend, each field declared once (type, range, help: the table of
    :func:`tune_gym.options.option_table`, on the documentation's backends page) and checked when
    the config is made (:meth:`validate`): a bad value is an
    :class:`~tune_gym.options.OptionError` before anything is built or measured.
    """

    number: Annotated[int, Int(1, help="kernel calls averaged into one cost")] = 1
    repeat: Annotated[int, Int(1, help="costs recorded per config")] = 3
    min_repeat_ms: Annotated[int, Int(0, help="each repeat lasts at least this long (number grows to fit)")] = 50
    flush_cache: Annotated[bool, Bool(help="flush the CPU cache before each repeat (TVM's cache_flush)")] = False
    build_workers: Annotated[int | None, Int(1, none=True, help="parallel build processes (None: the host's "
                                                                "cores)")] = None
    build_timeout: Annotated[float, Float(0, low_open=True, help="seconds before a build is killed")] = 60.0
    run_timeout: Annotated[float, Float(0, low_open=True, help="seconds before a timing run is killed")] = 30.0
    check_correctness: Annotated[bool, Bool(help="compare the first running kernel of each task with "
                                                 "PyTorch")] = True
    check_all: Annotated[bool, Bool(help="with check_correctness, compare every running kernel, not only the "
                                         "first of each task")] = False
    adaptive: Annotated[dict[str, Any] | None,
                        Check(_adaptive_options, f"None or a dict of {', '.join(ADAPTIVE_OPTIONS)}",
                              help="AdaTune's adaptive evaluator instead of fixed repeats (None: off)")] = None
    recycle_after: Annotated[int, Int(1, help="jobs per worker process before it is restarted")] = 256
    seed: Annotated[int, Int(0, help="seed of the random inputs")] = 0
    threads: Annotated[int | None, Int(1, none=True, help="threads a CPU kernel runs on (None: TVM_NUM_THREADS "
                                                          "where set, else the cores the task's target is "
                                                          "compiled for, its num-cores)")] = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every field, type and range, and normalize it (``OptionError`` names the first
        bad one: ``"LiveConfig: repeat must be an integer >= 1, got 0"``)."""
        check_fields(self, type(self).__name__)

    @property
    def run_limit(self) -> float:
        """Seconds a timing run may take: ``run_timeout``, or at least 180 s with the adaptive
        evaluator (up to 500 runs of a slow kernel)."""
        return self.run_timeout if self.adaptive is None else max(self.run_timeout, 180.0)


_Config = TypeVar("_Config", bound=LiveConfig)


class ProcessBackend(Backend):
    """The lifecycle of a backend that owns worker processes: :meth:`close` ends them, on
    ``with`` exit and (best effort) on collection; copies of an env share the one handle."""

    @abstractmethod
    def close(self) -> None:
        """End the worker processes and remove their working directory."""

    @staticmethod
    def _configured(config: _Config | None, kind: type[_Config], overrides: dict[str, Any], who: str) -> _Config:
        """A copy of ``config`` (default ``kind()``) with keyword ``overrides``, every field
        checked (:meth:`LiveConfig.validate`, also fields set on ``config`` after it was made);
        an unknown option or a bad value is an :class:`OptionError` naming it."""
        if config is not None and not isinstance(config, kind):
            raise OptionError(f"{who}: config must be a {kind.__name__}, got {type(config).__name__}")
        check_keys(who, overrides, [f.name for f in dataclasses.fields(kind)])
        return dataclasses.replace(config, **overrides) if config is not None else kind(**overrides)

    def __deepcopy__(self, memo: dict) -> Self:
        return self

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


class LiveBackend(ProcessBackend):
    """Builds and times configs for real. ``name = "live"``.

    Example:
        >>> backend = LiveBackend(LiveConfig(repeat=3))
        >>> results = backend.measure(task, space, space.sample(rng, 4))
        >>> backend.close()
    """

    name = "live"

    def __init__(self, config: LiveConfig | None = None, **overrides: Any) -> None:
        self.config = self._configured(config, LiveConfig, overrides, "LiveBackend")
        self._build_pool: Any = None
        self._run_pool: Any = None
        self._run_threads: int | None = None
        self._workdir: WorkDir | None = None
        self._checked: set[str] = set()

    @property
    def run_timeout(self) -> float:
        """Seconds a timing run may take (:attr:`LiveConfig.run_limit`)."""
        return self.config.run_limit

    # ------------------------------------------------------------------ pools
    def _pools(self, threads: int | None) -> tuple[Any, Any]:
        """The build pool and the runner, started on first use; the runner started again when its
        CPU kernels must run on other ``threads`` (``None``: any)."""
        if self._build_pool is None:
            c = self.config
            self._workdir = WorkDir()
            self._build_pool = make_build_pool(c.build_workers, c.build_timeout, c.recycle_after, self._workdir.path)
        if self._run_pool is None or (threads is not None and threads != self._run_threads):
            self._restart_runner(threads)
        return self._build_pool, self._run_pool

    def _restart_runner(self, threads: int | None = None) -> Any:
        """A fresh runner process in place of the current one, its CPU kernels on ``threads``
        threads (``None``: as the current one's): for a task compiled for other cores, and after
        a GPU kernel failed (an illegal memory access, for one, poisons the process's CUDA
        context for every later kernel)."""
        from tvm.support.popen_pool import PopenPoolExecutor

        from tune_gym.measure.workers import init_worker

        if self._run_pool is not None:
            self._run_pool.shutdown(wait=False)
        self._run_threads = threads or self._run_threads
        self._run_pool = PopenPoolExecutor(
            max_workers=1, timeout=self.run_timeout, initializer=init_worker,
            initargs=(None, os.getpid(), self._run_threads), maximum_process_uses=self.config.recycle_after,
        )
        return self._run_pool

    def threads_for(self, task: Task) -> int | None:
        """The threads ``task``'s kernels run on: :attr:`LiveConfig.threads`, else
        ``TVM_NUM_THREADS`` where the user set it, else the cores its target is compiled for
        (``num-cores``); ``None`` for a GPU task."""
        from tune_gym.measure.workers import kernel_threads

        return None if task.target.is_gpu else kernel_threads(task.target, self.config.threads)

    def close(self) -> None:
        for pool in (self._build_pool, self._run_pool):
            if pool is not None:
                pool.shutdown(wait=False)
        self._build_pool = self._run_pool = None
        self._run_threads = None
        if self._workdir is not None:
            self._workdir.close()
            self._workdir = None

    # ------------------------------------------------------------------ measurement
    def measure(self, task: Task, space: KnobSpace, configs: Sequence[Config]) -> list[MeasureResult]:
        from tune_gym.measure.workers import run_artifact

        build_pool, run_pool = self._pools(self.threads_for(task))
        flops = task.flops
        batch = build_batch(build_pool, task, space, configs, self.config.build_timeout)
        results, build_secs = batch.results, batch.build_secs
        if not batch.built:
            return batch.final()

        spec = {
            "device": "cuda" if task.target.is_gpu else "cpu",
            "inputs": task.input_shapes, "dtypes": task.input_dtypes, "output": task.output_shape(),
            "dtype": task.dtype,
            "number": self.config.number, "repeat": self.config.repeat,
            "min_repeat_ms": self.config.min_repeat_ms, "flush_cache": self.config.flush_cache,
            "seed": self.config.seed, "adaptive": self.config.adaptive,
        }
        for i, built_kernel in batch.built:
            c = self.config
            check = task.uri if c.check_correctness and (c.check_all or task.uri not in self._checked) else None
            job = {**spec, "path": built_kernel["path"], "args": built_kernel["args"],
                   "packs": built_kernel["packs"], "check_task": check}
            t0 = time.perf_counter()
            try:
                out = run_pool.submit(run_artifact, job).result()
            except TimeoutError:
                results[i] = MeasureResult.failure(
                    "timeout", f"run exceeded {self.run_timeout} s", flops,
                    build_secs=build_secs, run_secs=time.perf_counter() - t0)
                continue
            except ChildProcessError as err:
                results[i] = MeasureResult.failure(
                    "worker_crash", f"runner process died: {err}", flops,
                    build_secs=build_secs, run_secs=time.perf_counter() - t0)
                continue
            except Exception as err:
                results[i] = MeasureResult.failure(
                    "run_error", error_message(err), flops, build_secs=build_secs, run_secs=time.perf_counter() - t0)
                if task.target.is_gpu:  # a faulting kernel can leave the runner's CUDA context unusable
                    run_pool = self._restart_runner()
                continue
            run_secs = time.perf_counter() - t0
            extra = dict(out.get("extra") or {})
            if check is not None:
                if out["check_error"]:
                    results[i] = MeasureResult.failure(
                        "wrong_result", out["check_error"], flops, build_secs=build_secs, run_secs=run_secs)
                    continue
                self._checked.add(task.uri)
                extra["checked"] = True
            results[i] = MeasureResult(
                costs=tuple(out["costs"]), flops=flops, build_secs=build_secs, run_secs=run_secs, extra=extra)
        return batch.final()


@dataclass
class BuiltBatch:
    """Configs of one ``measure`` call after the build step.

    Attributes:
        results: one slot per config, in order: the failure of a config that was rejected
            (``invalid``) or did not build (``build_error`` / ``timeout`` / ``worker_crash``),
            ``None`` for a built one (its backend fills the slot once it has run).
        built: ``(config index, build_artifact output)`` of each built config, in order.
        build_secs: wall seconds of the parallel build divided by the configs sent to it.
    """

    results: list[MeasureResult | None]
    built: list[tuple[int, dict[str, Any]]]
    build_secs: float = 0.0

    def final(self) -> list[MeasureResult]:
        """The results once every slot is filled (a slot left empty is a backend bug)."""
        if any(r is None for r in self.results):
            raise RuntimeError("a built config was given no result")
        return [r for r in self.results if r is not None]


def make_build_pool(workers: int | None, timeout: float, recycle_after: int, workdir: str | None = None) -> Any:
    """TVM's ``PopenPoolExecutor`` of build workers (``workers``: default the host's cores) that
    write their kernels under ``workdir`` (a :class:`WorkDir`'s path; ``None``: the system's
    temporary directory) and die with this process."""
    from tvm.support.popen_pool import PopenPoolExecutor

    from tune_gym.measure.workers import init_worker

    return PopenPoolExecutor(max_workers=workers or host_cores(), timeout=timeout, initializer=init_worker,
                             initargs=(workdir, os.getpid()), maximum_process_uses=recycle_after)


def build_batch(pool: Any, task: Task, space: KnobSpace, configs: Sequence[Config], build_timeout: float) -> BuiltBatch:
    """Apply and build ``configs`` in parallel in ``pool`` (:func:`make_build_pool`).

    A config :meth:`KnobSpace.apply` rejects is ``invalid`` (not built); a build that
    exceeds ``build_timeout`` is ``timeout``, one whose worker died ``worker_crash``, one
    TVM rejects ``build_error``. The built kernels are shared libraries in temporary
    directories (:func:`tune_gym.measure.workers.build_artifact`) that the caller deletes.
    """
    from tvm.support.popen_pool import StatusKind

    from tune_gym.measure.workers import build_artifact

    flops = task.flops
    results: list[MeasureResult | None] = [None] * len(configs)
    jobs: list[tuple[int, Any]] = []
    for i, cfg in enumerate(configs):
        sch, why = space.apply(cfg, check=False)  # canonical: validated where it entered
        if sch is None:
            results[i] = MeasureResult.failure("invalid", why, flops)
        else:
            jobs.append((i, sch.mod))
    if not jobs:
        return BuiltBatch(results, [])

    target = task.target.resolved()
    start = time.perf_counter()
    outcomes = list(pool.map_with_error_catching(build_artifact, [(mod, target) for _, mod in jobs]))
    build_secs = (time.perf_counter() - start) / len(jobs)
    built: list[tuple[int, dict[str, Any]]] = []
    for (i, _), outcome in zip(jobs, outcomes):
        if outcome.status == StatusKind.TIMEOUT:
            results[i] = MeasureResult.failure(
                "timeout", f"build exceeded {build_timeout} s", flops, build_secs=build_secs)
        elif outcome.status != StatusKind.COMPLETE:
            kind = "worker_crash" if isinstance(outcome.value, ChildProcessError) else "build_error"
            results[i] = MeasureResult.failure(kind, error_message(outcome.value), flops, build_secs=build_secs)
        else:
            built.append((i, outcome.value))
    return BuiltBatch(results, built, build_secs)


def error_message(err: Any) -> str:
    """The useful tail of an error's text (TVM errors end with the most specific line)."""
    text = str(err).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines[-6:])[:2000] or type(err).__name__


#: Names of :class:`WorkDir` directories: ``tune_gym_<owner pid>_<random>``.
_WORKDIR_NAME = re.compile(r"tune_gym_(\d+)_[A-Za-z0-9_]+")
#: The file of a :class:`WorkDir` its owner holds an exclusive ``flock`` on.
_OWNER_LOCK = ".owner.lock"
#: The guard process of a :class:`WorkDir` (plain Python): it waits for its stdin to close (the
#: owner closed it, or died, however), then removes the directory, again while a worker that is
#: being killed with the owner still writes into it.
_GUARD = """\
import os, shutil, sys, time
sys.stdin.buffer.read()
for _ in range(50):
    shutil.rmtree(sys.argv[1], ignore_errors=True)
    if not os.path.exists(sys.argv[1]):
        break
    time.sleep(0.1)
"""


class WorkDir:
    """A directory for built kernels that does not outlive the process that made it.

    ``<tmp>/tune_gym_<pid>_<random>`` (``tmp``: the system's temporary directory, ``TMPDIR``).
    The owner holds an exclusive ``flock`` on its ``.owner.lock`` for its life. A guard process
    (started in its own session, so a Ctrl-C of the terminal does not reach it) reads a pipe from
    the owner and removes the directory when the pipe closes: at :meth:`close`, or when the
    owner dies, ``SIGKILL`` included. Each new WorkDir first runs :func:`sweep_workdirs`, which
    removes the directories of dead owners whose guard was killed too.
    """

    def __init__(self, tmp: str | None = None) -> None:
        tmp = tmp or tempfile.gettempdir()
        sweep_workdirs(tmp)
        self.path = tempfile.mkdtemp(prefix=f"tune_gym_{os.getpid()}_", dir=tmp)
        self._lock: IO[str] | None = open(os.path.join(self.path, _OWNER_LOCK), "w")  # noqa: SIM115 - held for life
        _flock(self._lock, blocking=True)
        self.guard: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-c", _GUARD, self.path], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)

    def close(self) -> None:
        """Remove the directory and end the guard (a second call does nothing)."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        guard, self.guard = self.guard, None
        if guard is not None:
            if guard.stdin is not None:
                guard.stdin.close()
            try:
                guard.wait(timeout=2.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - it exits once the pipe is closed
                pass


def sweep_workdirs(tmp: str | None = None) -> list[str]:
    """Remove the :class:`WorkDir` directories under ``tmp`` (default: the system's temporary
    directory) whose owner process is dead and whose lock nobody holds; returns their paths."""
    tmp = tmp or tempfile.gettempdir()
    try:
        names = os.listdir(tmp)
    except OSError:
        return []
    removed = []
    for name in names:
        match = _WORKDIR_NAME.fullmatch(name)
        path = os.path.join(tmp, name)
        if match is None or _alive(int(match.group(1))) or not os.path.isdir(path):
            continue
        try:
            lock = open(os.path.join(path, _OWNER_LOCK))  # noqa: SIM115 - closed below
        except FileNotFoundError:  # made before its lock: nobody can hold it
            lock = None
        except OSError:
            continue
        try:
            if lock is None or _flock(lock, blocking=False):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        finally:
            if lock is not None:
                lock.close()
    return removed


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists here and is not a zombie."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except (OverflowError, ValueError):
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):  # no procfs: kill(pid, 0) answered
        return True


def _flock(file: IO[Any], blocking: bool) -> bool:
    """Take an exclusive ``flock`` on ``file``; False when another process holds it (non-blocking)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no flock on this OS: the owner's pid alone decides
        return True
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True
