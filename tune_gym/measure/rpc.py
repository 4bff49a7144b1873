"""Remote measurement through TVM's RPC: build here, time on devices registered with a tracker.

TVM ships every remote piece: a tracker that hands out devices by key
(``python -m tvm.exec.rpc_tracker --host 127.0.0.1 --port 9190``, needs ``tornado``) and
servers that register with it and run what a client uploads
(``python -m tvm.exec.rpc_server --tracker 127.0.0.1:9190 --key local``). This module is
the client (and :class:`LoopbackDevices`, which starts those two commands on 127.0.0.1 for
tests and trials on one machine).

Design:
    * Builds run here, in the live backend's build pool
      (:func:`tune_gym.measure.live.build_batch`): rejected configs and failed builds are
      marked exactly as the live backend marks them (``invalid``, ``build_error``,
      ``timeout``, ``worker_crash``). Kernels are exported as shared libraries for the task's
      target as this host resolves it, so the devices must run code built here: the same ISA
      (describe a remote CPU in the task's target, e.g. ``llvm&mcpu=znver3&cores=8``); there
      is no cross-compilation.
    * Each :meth:`RPCBackend.measure` call asks the tracker how many devices of ``key`` are
      free and uses them all (or ``devices``), one thread per device, each with its own
      tracker connection and ``TrackerSession.request(key)`` session. Built configs wait in
      one shared queue and a device takes the next one when it is done, so a fast device
      takes more; results come back in input order. Per config a device uploads the library,
      loads it, copies the inputs to the remote device (weights pre-packed, as the live
      backend does; each input is copied once per device and batch, packed weights once per
      layout) and times the remote module with ``time_evaluator`` (or the adaptive
      evaluator) through :func:`tune_gym.measure.workers.measure_kernel`, the live runner's
      code. As in the live backend, kernels are checked against PyTorch until one of the task
      passes (the devices' first kernels may be checked side by side). Sessions end with the
      call, so the devices are free for other clients between batches.
    * A device whose session dies (server killed, connection reset, session expired) marks
      the config it was running ``rpc_error`` with a message naming it ("device 1 (key
      'local', tracker 127.0.0.1:9190) lost: <reason>") and is dropped; its share of the queue
      goes to the other devices. With no device left, the configs not run yet are marked
      ``rpc_error`` too and the call returns. An error that leaves the session alive (the
      remote module failed to load or run) is the config's own ``run_error``; whether the
      session lives is asked with one round trip after any error. A kernel that crashes the
      server's session process cannot be told from a lost device: ``rpc_error`` too.
    * A config still running after ``run_timeout`` seconds (upload, load, check and timing)
      is marked ``timeout`` naming its device, and that device is dropped: its thread is
      abandoned (TVM's RPC calls cannot be interrupted) and ends its session when the call
      returns; ``session_timeout`` lets the server end it sooner. A device that cannot be had
      within ``request_timeout`` seconds is given up the same way.

Overhead (loopback on a shared 2-core host, resnet18:8 compact, median wall of 3 batches of 8 configs):
live 2.86 s, rpc 1 device 3.40 s, rpc 2 devices 2.87 s; ``python -m tune_gym.measure.rpc --bench resnet18:8``.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from tune_gym.errors import TuneGymError
from tune_gym.measure.live import (
    BuiltBatch,
    LiveConfig,
    ProcessBackend,
    WorkDir,
    build_batch,
    error_message,
    make_build_pool,
)
from tune_gym.measure.result import MeasureResult
from tune_gym.options import Float, Func, Int, Str
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["LoopbackDevices", "RPCBackend", "RPCConfig", "RemoteDevice", "TrackerError", "devices_of",
           "tracker_address", "tracker_summary"]


class TrackerError(TuneGymError):
    """The RPC tracker address is malformed or unreachable, or it has no server of the key."""


@dataclass
class RPCConfig(LiveConfig):
    """Settings of the RPC backend: the :class:`LiveConfig` fields (timing: ``number``,
    ``repeat``, ``min_repeat_ms``, ``flush_cache``, ``adaptive``; builds: ``build_workers``,
    ``build_timeout``, ``recycle_after``; ``check_correctness``, ``check_all``, ``seed``; ``run_timeout`` is
    per config on a device, upload and load included), and the ones below, each declared once;
    all are checked when the config is made (:meth:`validate`).
    """

    tracker: Annotated[str, Str(help="the tracker's address, host:port")] = "127.0.0.1:9190"
    key: Annotated[str, Str(help="the device key the servers registered with (rpc_server --key)")] = "local"
    devices: Annotated[int | None, Int(1, none=True, help="devices used in parallel (None: every device of the key "
                                                          "free at the start of each batch)")] = None
    session_timeout: Annotated[float, Float(0, help="seconds after which a server ends a session, which lasts one "
                                                    "measure call (0: never)")] = 0.0
    request_timeout: Annotated[float, Float(0, low_open=True, help="seconds to wait for a device when none holds "
                                                                   "a session")] = 60.0
    connect_timeout: Annotated[float, Float(0, low_open=True, help="seconds to wait for the tracker's TCP "
                                                                   "connection")] = 5.0
    priority: Annotated[int, Int(help="priority of the requests in the tracker's queue")] = 1
    on_result: Annotated[Callable[[RemoteDevice, int, MeasureResult], None] | None,
                         Func(help="called in a device's thread after each config it ran, with the device, the "
                                   "config's index in the batch and its result")] = None

    def validate(self) -> None:
        """Check every field (:meth:`LiveConfig.validate`; ``OptionError`` names the first bad one)
        and parse ``tracker`` (a malformed one is a :class:`TrackerError`)."""
        super().validate()
        tracker_address(self.tracker)


def tracker_address(text: str) -> tuple[str, int]:
    """``(host, port)`` of a tracker address ``"host:port"``.

    Raises:
        TrackerError: ``text`` is not ``host:port`` with a port in [1, 65535].
    """
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise TrackerError(f"tracker {text!r}: give the tracker's address as host:port")
    return host, int(port)


@dataclass(frozen=True)
class RemoteDevice:
    """One device of a batch: its number in the batch (from 0), key and TVM RPC session."""

    index: int
    key: str
    session: Any


class RPCBackend(ProcessBackend):
    """Builds configs here and times them on TVM RPC devices. ``name = "rpc"``.

    Raises:
        TrackerError: at construction, when the tracker is unreachable or has no server of
            the key (the message names host:port).

    Example:
        >>> backend = RPCBackend(tracker="127.0.0.1:9190", key="local", repeat=3)
        >>> results = backend.measure(task, space, space.sample(rng, 8))
        >>> {r.extra["rpc_device"] for r in results if r.ok}   # which device timed each
        >>> backend.close()
    """

    name = "rpc"

    def __init__(self, config: RPCConfig | None = None, **overrides: Any) -> None:
        self.config = self._configured(config, RPCConfig, overrides, "RPCBackend")
        c = self.config
        self.host, self.port = tracker_address(c.tracker)
        self._build_pool: Any = None
        self._workdir: WorkDir | None = None
        self._checked: set[str] = set()
        self._lock = threading.Lock()
        summary = self.summary()
        if devices_of(summary, c.key)[1] == 0:
            keys = sorted({str(s.get("key", "")).partition(":")[2] for s in summary.get("server_info", ())})
            raise TrackerError(f"RPC tracker {self.address} has no server with key {c.key!r}; "
                               f"the keys of its servers: {keys}")

    @property
    def address(self) -> str:
        """The tracker's ``host:port``."""
        return f"{self.host}:{self.port}"

    # ------------------------------------------------------------------ tracker
    def summary(self) -> dict[str, Any]:
        """The tracker's summary (:func:`tracker_summary`)."""
        return tracker_summary(self.host, self.port, self.config.connect_timeout)

    def free_devices(self) -> tuple[int, int]:
        """``(free, registered)`` servers of the key, as the tracker reports them now."""
        return devices_of(self.summary(), self.config.key)

    def describe(self, device: int) -> str:
        """How messages name a device of a batch."""
        return f"device {device} (key {self.config.key!r}, tracker {self.address})"

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        if self._build_pool is not None:
            self._build_pool.shutdown(wait=False)
            self._build_pool = None
        if self._workdir is not None:
            self._workdir.close()
            self._workdir = None

    # ------------------------------------------------------------------ measurement
    def measure(self, task: Task, space: KnobSpace, configs: Sequence[Config]) -> list[MeasureResult]:
        c = self.config
        if self._build_pool is None:
            self._workdir = WorkDir()
            self._build_pool = make_build_pool(c.build_workers, c.build_timeout, c.recycle_after, self._workdir.path)
        batch = build_batch(self._build_pool, task, space, configs, c.build_timeout)
        try:
            if batch.built:
                self._run(task, batch)
        finally:
            for _, kernel in batch.built:
                shutil.rmtree(os.path.dirname(kernel["path"]), ignore_errors=True)
        return batch.final()

    def _run(self, task: Task, batch: BuiltBatch) -> None:
        """Run ``batch.built`` on the devices, filling ``batch.results``."""
        c = self.config
        spec = {
            "inputs": task.input_shapes, "dtypes": task.input_dtypes, "output": task.output_shape(),
            "dtype": task.dtype,
            "number": c.number, "repeat": c.repeat, "min_repeat_ms": c.min_repeat_ms,
            "flush_cache": c.flush_cache, "seed": c.seed, "adaptive": c.adaptive,
        }
        jobs = [(i, {**spec, "path": k["path"], "args": k["args"], "packs": k["packs"]}) for i, k in batch.built]
        try:
            free, total = self.free_devices()
            if total == 0:
                raise TrackerError(f"RPC tracker {self.address} has no server with key {c.key!r}")
        except TrackerError as err:
            for i, _ in jobs:
                batch.results[i] = MeasureResult.failure("rpc_error", str(err), task.flops,
                                                         build_secs=batch.build_secs)
            return
        count = min(c.devices or max(free, 1), len(jobs))
        dispatch = _Dispatch(self, task, batch, jobs, count)
        for d in range(count):
            threading.Thread(target=self._device, args=(d, task, dispatch), name=f"tune_gym-rpc-{d}",
                             daemon=True).start()
        dispatch.wait()

    def _device(self, d: int, task: Task, dispatch: _Dispatch) -> None:
        """One device's thread: get a session, then run configs from the queue until it is empty."""
        from tvm import rpc

        c = self.config
        why: str | None = None  # why the device left early (None: the queue ran dry)
        try:
            try:
                tracker = rpc.connect_tracker(self.host, self.port)
                try:
                    session = tracker.request(c.key, priority=c.priority, session_timeout=c.session_timeout,
                                              max_retry=1)
                finally:
                    tracker.close()
            except Exception as err:
                why = f"{self.describe(d)} could not be had: {error_message(err)}"
                return
            if not dispatch.attach(d):
                return
            dev = session.cuda(0) if task.target.is_gpu else session.cpu(0)
            device = RemoteDevice(d, c.key, session)
            inputs: dict[Any, Any] = {}  # the batch's inputs on this device, copied once per layout
            while (item := dispatch.take(d)) is not None:
                i, job = item
                with self._lock:
                    job["check_task"] = (task.uri if c.check_correctness
                                         and (c.check_all or task.uri not in self._checked) else None)
                start = time.perf_counter()
                try:
                    out = _run_remote(session, dev, job, f"tune_gym_{i}.so", inputs)
                except Exception as err:
                    run_secs = time.perf_counter() - start
                    if _session_alive(session):
                        result = dispatch.failure("run_error", error_message(err), run_secs)
                    else:
                        why = f"{self.describe(d)} lost: {error_message(err)}"
                        dispatch.lose(d, i, dispatch.failure("rpc_error", why, run_secs))
                        return
                else:
                    result = self._result(task, d, job, out, time.perf_counter() - start, dispatch)
                if not dispatch.finish(d, i, result):
                    return  # timed out meanwhile: the device was dropped
                if c.on_result is not None:
                    c.on_result(device, i, result)
        except Exception as err:  # pragma: no cover - a bug or a failing on_result hook
            why = f"{self.describe(d)} stopped: {error_message(err)}"
            raise
        finally:
            dispatch.leave(d, why)

    def _result(self, task: Task, d: int, job: dict[str, Any], out: dict[str, Any], run_secs: float,
                dispatch: _Dispatch) -> MeasureResult:
        extra = {**(out.get("extra") or {}), "rpc_device": d}
        if job["check_task"] is not None:
            if out["check_error"]:
                return dispatch.failure("wrong_result", out["check_error"], run_secs)
            with self._lock:
                self._checked.add(task.uri)
            extra["checked"] = True
        return MeasureResult(costs=tuple(out["costs"]), flops=task.flops, build_secs=dispatch.build_secs,
                             run_secs=run_secs, extra=extra)


def tracker_summary(host: str, port: int, connect_timeout: float = 5.0) -> dict[str, Any]:
    """A TVM tracker's summary: ``queue_info`` (``{key: {"free", "pending"}}``) and
    ``server_info`` (``[{"key": "server:<key>", "addr": [host, port]}]``).

    Raises:
        TrackerError: the tracker is unreachable or not a TVM tracker (names host:port).
    """
    try:  # TVM's client retries a refused connection for 60 s: probe first
        socket.create_connection((host, port), timeout=connect_timeout).close()
    except OSError as err:
        raise TrackerError(f"RPC tracker {host}:{port} is unreachable: {err}") from err
    from tvm import rpc

    try:
        tracker = rpc.connect_tracker(host, port)
        try:
            return dict(tracker.summary())
        finally:
            tracker.close()
    except Exception as err:
        raise TrackerError(f"RPC tracker {host}:{port}: {error_message(err)}") from err


def devices_of(summary: dict[str, Any], key: str) -> tuple[int, int]:
    """``(free, registered)`` servers of ``key`` in a :func:`tracker_summary`."""
    free = int(summary.get("queue_info", {}).get(key, {}).get("free", 0))
    total = sum(1 for s in summary.get("server_info", ()) if s.get("key") == f"server:{key}")
    return free, total


def _run_remote(session: Any, dev: Any, job: dict[str, Any], name: str, inputs: dict[Any, Any]) -> dict[str, Any]:
    """Upload a built kernel as ``name``, load it and time it on the session's device
    (``inputs``: :func:`~tune_gym.measure.workers.measure_kernel`'s cache)."""
    from tune_gym.measure.workers import measure_kernel

    session.upload(job["path"], target=name)
    lib = session.load_module(name)
    out = measure_kernel(lib, dev, job, inputs)
    session.remove(name)
    return out


def _session_alive(session: Any) -> bool:
    """Whether an RPC session still answers: one round trip, a remote function lookup (of a
    function every TVM RPC server has; a device attribute query does not reach the server)."""
    try:
        session.get_function("tvm.rpc.server.remove")
        return True
    except Exception:
        return False


class _Dispatch:
    """The shared queue of one batch and the state of its devices (all under one lock).

    A device is *requesting* until its thread has a session, then *holding* until it leaves;
    ``running`` maps a holding device to the config it runs and when it started. The caller's
    thread waits in :meth:`wait` and enforces the run and request timeouts.
    """

    def __init__(self, backend: RPCBackend, task: Task, batch: BuiltBatch,
                 jobs: list[tuple[int, dict[str, Any]]], count: int) -> None:
        self.backend = backend
        self.flops = task.flops
        self.build_secs = batch.build_secs
        self.results = batch.results
        self.queue = deque(jobs)
        self.todo = {i for i, _ in jobs}
        self.requesting = set(range(count))
        self.holding: set[int] = set()
        self.running: dict[int, tuple[int, float]] = {}
        self.losses: list[str] = []
        self.closed = False
        self.idle_since = time.monotonic()  # since when no device has held a session
        self.cond = threading.Condition()

    def failure(self, kind: str, msg: str, run_secs: float = 0.0) -> MeasureResult:
        return MeasureResult.failure(kind, msg, self.flops, build_secs=self.build_secs, run_secs=run_secs)

    def attach(self, d: int) -> bool:
        """A device got its session; False when the batch is already over (drop the session)."""
        with self.cond:
            self.requesting.discard(d)
            if self.closed:
                return False
            self.holding.add(d)
            self.cond.notify_all()
            return True

    def take(self, d: int) -> tuple[int, dict[str, Any]] | None:
        with self.cond:
            if self.closed or d not in self.holding or not self.queue:
                return None
            i, job = self.queue.popleft()
            self.running[d] = (i, time.monotonic())
            return i, job

    def _put(self, d: int, i: int, result: MeasureResult) -> bool:
        if self.running.get(d, (None,))[0] != i:
            return False  # the run timed out and was marked meanwhile
        del self.running[d]
        self.results[i] = result
        self.todo.discard(i)
        return True

    def finish(self, d: int, i: int, result: MeasureResult) -> bool:
        """Record a config's result; False when the device was dropped meanwhile."""
        with self.cond:
            ok = self._put(d, i, result)
            self.cond.notify_all()
            return ok

    def lose(self, d: int, i: int, result: MeasureResult) -> None:
        """The device's session died while it ran config ``i``."""
        with self.cond:
            self._put(d, i, result)
            self._drop(d, result.error_msg)

    def leave(self, d: int, why: str | None) -> None:
        """The device's thread ends: the queue ran dry (``why`` None), or it was lost, never had
        a session, or failed."""
        with self.cond:
            if d in self.running:  # ended without reporting its config: a bug or a failing hook
                self._put(d, self.running[d][0], self.failure("rpc_error", why or "device thread ended"))
            self.requesting.discard(d)
            self._drop(d, why)

    def _drop(self, d: int, why: str | None) -> None:
        if why is not None and why not in self.losses:
            self.losses.append(why)
        if d in self.holding:
            self.holding.discard(d)
            if not self.holding:
                self.idle_since = time.monotonic()
        self.cond.notify_all()

    def wait(self) -> None:
        """Block until every config has a result, enforcing ``run_timeout`` and ``request_timeout``."""
        c = self.backend.config
        run_limit = c.run_limit
        with self.cond:
            try:
                while self.todo:
                    now = time.monotonic()
                    for d, (i, start) in list(self.running.items()):
                        if now - start > run_limit:
                            msg = f"run exceeded {run_limit:g} s on {self.backend.describe(d)}; the device was dropped"
                            self._put(d, i, self.failure("timeout", msg, now - start))
                            self._drop(d, msg)
                    if self.todo and not self.holding:
                        waited = now - self.idle_since
                        if not self.requesting or waited > c.request_timeout:
                            self._give_up(waited)
                            break
                    self.cond.wait(timeout=min(0.2, max(run_limit / 4, 0.0005)))
            finally:
                self.closed = True  # late sessions are dropped, running devices stop after their config

    def _give_up(self, waited: float) -> None:
        b = self.backend
        if self.losses:
            why = f"no device of key {b.config.key!r} left at tracker {b.address}; last: {self.losses[-1]}"
        else:
            why = (f"no device of key {b.config.key!r} could be had from tracker {b.address} "
                   f"within {waited:.0f} s")
        for i in self.todo:
            self.results[i] = self.failure("rpc_error", why)
        self.todo.clear()
        self.queue.clear()


class LoopbackDevices:
    """A TVM RPC tracker and ``servers`` RPC servers on 127.0.0.1, as subprocesses of TVM's own
    commands (``tvm.exec.rpc_tracker`` / ``tvm.exec.rpc_server``): for tests, benchmarks and
    trying the backend on one machine.

    Entering starts them on free ports and waits (at most ``timeout`` seconds) until the
    tracker reports every server free; leaving kills each one's whole process group.

    Example:
        >>> with LoopbackDevices(servers=2, key="local") as cluster:
        ...     backend = RPCBackend(tracker=cluster.address, key="local")
    """

    def __init__(self, servers: int = 2, key: str = "local", timeout: float = 120.0) -> None:
        self.count, self.key, self.timeout = servers, key, timeout
        self.tracker: Any = None
        self.servers: list[Any] = []
        self.address = ""

    def __enter__(self) -> LoopbackDevices:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, module: str, *args: str) -> Any:
        import subprocess
        import sys

        return subprocess.Popen([sys.executable, "-m", module, "--host", "127.0.0.1", *args, "--silent"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def start(self) -> None:
        """Start the tracker, then the servers; return once all are registered and free."""
        import importlib.util

        if importlib.util.find_spec("tornado") is None:
            raise ImportError("TVM's RPC tracker needs tornado: pip install tornado")
        port = _free_port()
        self.address = f"127.0.0.1:{port}"
        self.tracker = self._spawn("tvm.exec.rpc_tracker", "--port", str(port), "--port-end", str(port + 1))
        deadline = time.monotonic() + self.timeout
        while True:  # servers retry a refused tracker only every 5 s: start them once it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
                break
            except OSError:
                self._check(deadline, "the tracker to listen")
                time.sleep(0.1)
        self.servers = [self._server() for _ in range(self.count)]
        self._wait_free(deadline)

    def _server(self) -> Any:
        port = _free_port()
        return self._spawn("tvm.exec.rpc_server", "--port", str(port), "--port-end", str(port + 1),
                           "--tracker", self.address, "--key", self.key)

    def _wait_free(self, deadline: float) -> None:
        host, _, port = self.address.rpartition(":")
        while devices_of(tracker_summary(host, int(port)), self.key)[0] < self.count:
            self._check(deadline, f"{self.count} free servers of key {self.key!r} at the tracker")
            time.sleep(0.2)

    def revive(self) -> None:
        """Restart the servers that were killed, then wait until every server is free again."""
        for n, proc in enumerate(self.servers):
            if proc.poll() is not None:
                _kill_group(proc)  # reap what is left of its group
                self.servers[n] = self._server()
        self._wait_free(time.monotonic() + self.timeout)

    def _check(self, deadline: float, what: str) -> None:
        dead = [p.args[2] for p in [self.tracker, *self.servers] if p.poll() is not None]
        if dead:
            raise RuntimeError(f"loopback RPC: {', '.join(dead)} exited while waiting for {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"loopback RPC at {self.address}: gave up waiting for {what} after {self.timeout:g} s")

    def kill_server(self, n: int) -> None:
        """SIGKILL server ``n`` with everything it forked (its session processes)."""
        _kill_group(self.servers[n])

    def server_of(self, session: Any) -> int | None:
        """Which server a session of :class:`RemoteDevice` runs on (the server's session process
        works in the session's directory), or ``None``."""
        import psutil

        workdir = os.path.realpath(session.get_function("tvm.rpc.server.workpath")(""))
        for n, proc in enumerate(self.servers):
            try:
                family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
                if any(os.path.realpath(p.cwd()) == workdir for p in family):
                    return n
            except psutil.Error:
                continue
        return None

    def stop(self) -> None:
        """Kill the servers and the tracker (each whole process group) and reap them."""
        for proc in [*self.servers, self.tracker]:
            if proc is not None:
                _kill_group(proc)
        self.servers, self.tracker = [], None


def _kill_group(proc: Any) -> None:
    """SIGKILL a subprocess started in its own session with everything in its process group,
    and wait until all of them are gone."""
    import signal

    import psutil

    try:
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    deadline = time.monotonic() + 10.0  # the rest are reaped by init: wait until dead or zombies
    while time.monotonic() < deadline:
        try:
            if all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in family):
                break
        except psutil.NoSuchProcess:
            continue
        time.sleep(0.01)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bench(argv: list[str] | None = None) -> None:  # pragma: no cover - a measurement script
    """Time one batch live and through RPC on loopback (the numbers in the module docstring)."""
    import argparse

    import numpy as np

    from tune_gym.measure.live import LiveBackend

    p = argparse.ArgumentParser(prog="python -m tune_gym.measure.rpc")
    p.add_argument("--bench", required=True, metavar="TASK", help="suite task id or URI")
    p.add_argument("--configs", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3, help="timed batches per backend (median reported)")
    args = p.parse_args(argv)
    task = Task.parse(args.bench)
    space = KnobSpace.for_task(task, "compact")
    configs = space.sample_unique(np.random.default_rng(0), args.configs * (args.rounds + 1))
    batches = [configs[k * args.configs:(k + 1) * args.configs] for k in range(args.rounds + 1)]
    timing: dict[str, Any] = {"repeat": 3, "min_repeat_ms": 50, "check_correctness": False}

    def timed(backend: Any, label: str) -> None:
        backend.measure(task, space, batches[0])  # start the build pool
        secs, results = [], []
        for batch in batches[1:]:
            start = time.perf_counter()
            results += backend.measure(task, space, batch)
            secs.append(time.perf_counter() - start)
        ok = [r for r in results if r.ok]
        build, run = np.mean([r.build_secs for r in results]), np.mean([r.run_secs for r in results])
        print(f"{label:<14} median {np.median(secs):.2f} s per batch of {args.configs} "
              f"(all: {', '.join(f'{s:.2f}' for s in secs)}); per config: build {build:.2f} s, run {run:.2f} s; "
              f"{len(ok)}/{len(results)} ok, median {np.median([r.gflops for r in ok]):.1f} GFLOPS")

    with LiveBackend(**timing) as live:
        timed(live, "live")
    with LoopbackDevices(servers=2, key="bench") as cluster:
        for devices in (1, 2):
            with RPCBackend(tracker=cluster.address, key="bench", devices=devices, **timing) as remote:
                timed(remote, f"rpc, {devices} device{'s' if devices > 1 else ''}")


if __name__ == "__main__":  # pragma: no cover
    _bench()
