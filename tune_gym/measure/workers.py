"""Functions that run inside measurement worker processes (never in the tuning process).

They are sent to TVM's ``PopenPoolExecutor`` workers: a crash or hang here kills only the
worker, which the pool restarts lazily, and the caller records the config as failed. Workers
die with the process that started them (:func:`die_with_parent`) and write their kernels under
its :class:`~tune_gym.measure.live.WorkDir`.

Pre-packed weights (a task's ``weights=packed``): a scheduled module then holds one
preprocessing block per rewritten weight (annotated ``meta_schedule.layout_rewrite_preproc``,
``packed[f(i)] = weight[i]``). :func:`build_artifact` reads each block's index map ``f`` as a
:data:`Pack`, then removes the blocks with ``RemoveWeightLayoutRewriteBlock`` exactly as
MetaSchedule's builder (``default_build``) does, so the built kernel takes the packed weights as
its arguments. :func:`run_artifact` draws the inputs in the op's own layout, packs the weights
with those maps (:func:`pack_weight`, numpy) and times and checks the built kernel on them; the
PyTorch reference runs on the unpacked inputs. So the kernel that is checked is the kernel
that is timed.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
from typing import Any

import numpy as np

from tune_gym.space import LAYOUT_REWRITE_PREPROC

__all__ = ["CACHED_PACKS", "Pack", "build_artifact", "die_with_parent", "init_worker", "kernel_threads",
           "measure_kernel", "metaschedule_measurers", "pack_weight", "pool_threads", "reference_output",
           "run_artifact", "set_threads", "weight_packs"]

#: One weight layout rewrite: ``(input index, packed shape, index expressions)``. Each index
#: expression gives one packed coordinate from the weight's coordinates as a tree of tuples:
#: ``("var", axis)``, ``("const", value)`` or ``(op, lhs, rhs)`` with ``op`` one of ``add``,
#: ``sub``, ``mul``, ``floordiv``, ``floormod``; ``packed[exprs(i)] = weight[i]`` for every ``i``.
Pack = tuple[int, tuple[int, ...], tuple[Any, ...]]
#: Packed weight layouts :func:`measure_kernel` keeps on a device when given a cache.
CACHED_PACKS = 8
_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "FloorDiv": "floordiv", "FloorMod": "floormod"}


#: Where :func:`build_artifact` writes kernels in this worker (set by :func:`init_worker`;
#: ``None``: the system's temporary directory).
_WORKDIR: str | None = None
#: ``prctl`` option: the signal this process gets when its parent dies.
_PR_SET_PDEATHSIG = 1


def init_worker(workdir: str | None = None, parent: int | None = None, threads: int | None = None) -> None:
    """Prepare a worker (the pool calls this before the first job): die with process ``parent``
    (the one that started this worker; ``None``: do not), build kernels under ``workdir``, run
    CPU kernels on ``threads`` threads (:func:`set_threads`; ``None``: TVM's default), and import
    TVM once."""
    global _WORKDIR
    if parent is not None:
        die_with_parent(parent)
    _WORKDIR = workdir
    if threads is not None:
        set_threads(threads)
    import tvm  # noqa: F401


def set_threads(threads: int) -> None:
    """Make TVM's CPU thread pool run ``threads`` threads in this process and in the processes it
    starts from now on (``TVM_NUM_THREADS``).

    TVM sizes its pool once, when the process runs its first parallel kernel, from
    ``TVM_NUM_THREADS`` (or ``OMP_NUM_THREADS``), else from the logical CPUs, halved on x86-64
    (it assumes two hyper-threads per core): one thread on a 2-vCPU machine, whatever the
    target's ``num-cores``. So this must run before the first kernel, and every process that
    times kernels for a task sets it to the cores the task is compiled for.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    os.environ["TVM_NUM_THREADS"] = str(threads)


def kernel_threads(target: Any, threads: int | None = None) -> int:
    """The threads a CPU kernel of ``target`` (a :class:`~tune_gym.tasks.targets.TargetSpec`) runs
    on: ``threads`` when given, else ``TVM_NUM_THREADS`` where the user set it, else the cores
    the target is compiled for (``num-cores``)."""
    if threads:
        return threads
    given = os.environ.get("TVM_NUM_THREADS", "")
    if given.isdecimal() and int(given) >= 1:
        return int(given)
    from tune_gym.host import host_cores

    return int(target.resolved().get("num-cores") or host_cores())


def metaschedule_measurers(target: Any) -> tuple[Any, Any]:
    """MetaSchedule's ``LocalBuilder`` and ``LocalRunner`` set up as the live backend builds and
    times: one build worker per core whose TVM import takes the fast path
    (:mod:`tune_gym.tvm_support`), 1 call per repeat, 3 repeats of >= 50 ms, kernels of
    ``target`` on :func:`kernel_threads` threads (the runner's workers inherit it)."""
    from tune_gym.tvm_support import ms

    m = ms()
    builder = m.builder.LocalBuilder(max_workers=len(os.sched_getaffinity(0)), timeout_sec=60.0,
                                     initializer=_ms_worker_init)
    set_threads(kernel_threads(target))
    runner = m.runner.LocalRunner(evaluator_config=m.runner.EvaluatorConfig(number=1, repeat=3, min_repeat_ms=50),
                                  initializer=_ms_worker_init)
    return builder, runner


def _ms_worker_init() -> None:
    from tune_gym.tvm_support import ms

    ms()


def pool_threads() -> int:
    """The threads TVM's CPU thread pool of this process runs (creating the pool if need be)."""
    import tvm

    return int(tvm.get_global_func("runtime.NumThreads")())


def die_with_parent(parent: int) -> None:
    """Make this process get ``SIGKILL`` when the thread that started it ends (its owner process
    ``parent`` died, or shut its pool down): ``prctl(PR_SET_PDEATHSIG)`` on Linux; elsewhere
    nothing (a worker then ends when it next reads from its closed pipe). Exits at once when
    ``parent`` is already gone (it died before the signal was set up, so none would come)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:  # pragma: no cover - never fails on Linux
        return
    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        os._exit(1)
    except PermissionError:  # pragma: no cover - the parent is this user's
        pass


def _index_expr(expr: Any, axes: list[Any]) -> Any:
    """A TIR index expression over ``axes`` as a tuple tree (see :data:`Pack`)."""
    kind = type(expr).__name__
    if kind == "IntImm":
        return ("const", int(expr.value))
    if kind == "Var":
        axis = next((i for i, v in enumerate(axes) if v.same_as(expr)), None)
        if axis is not None:
            return ("var", axis)
    if kind in _BINARY:
        return (_BINARY[kind], _index_expr(expr.a, axes), _index_expr(expr.b, axes))
    raise ValueError(f"unsupported index expression {expr} ({kind}) in a weight layout rewrite")


def weight_packs(mod: Any) -> list[Pack]:
    """The weight layout rewrites of a scheduled module's ``main``, one per preprocessing block.

    Raises:
        ValueError: a preprocessing block is not the plain copy ``packed[f(i)] = weight[i]``
            of one of the function's inputs that RewriteLayout makes.
    """
    import tvm

    params = list(mod["main"].params)
    sch = tvm.s_tir.Schedule(mod)
    out: list[Pack] = []
    todo = [sch.get_sblock("root")]
    while todo:
        for rv in sch.get_child_blocks(todo.pop()):
            todo.append(rv)
            block = sch.get(rv)
            if LAYOUT_REWRITE_PREPROC not in block.annotations:
                continue
            store, axes = block.body, [iv.var for iv in block.iter_vars]
            load = getattr(store, "value", None)
            source = getattr(load, "source", None)
            index = next((i for i, p in enumerate(params) if source is not None and p.same_as(source)), None)
            if index is None or load is None:
                raise ValueError(f"weight layout rewrite block {block.name_hint!r} does not copy an input")
            plain = (type(store).__name__ == "BufferStore"
                     and len(load.indices) == len(axes) and all(a.same_as(v) for a, v in zip(load.indices, axes))
                     and [(int(iv.dom.min), int(iv.dom.extent)) for iv in block.iter_vars]
                     == [(0, int(x)) for x in params[index].shape])
            if not plain:
                raise ValueError(f"weight layout rewrite block {block.name_hint!r} is not a plain copy of an input")
            packed = tuple(int(x) for x in store.buffer.shape)
            out.append((index, packed, tuple(_index_expr(e, axes) for e in store.indices)))
    return out


def _eval_index(expr: Any, grid: list[np.ndarray]) -> Any:
    op = expr[0]
    if op == "var":
        return grid[expr[1]]
    if op == "const":
        return expr[1]
    a, b = _eval_index(expr[1], grid), _eval_index(expr[2], grid)
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "floordiv":
        return a // b  # numpy's // and % on ints floor, as TIR's floordiv / floormod
    if op == "floormod":
        return a % b
    raise ValueError(f"unknown index operation {op!r}")


def pack_weight(weight: np.ndarray, pack: Pack) -> np.ndarray:
    """``weight`` in the packed layout of ``pack`` (``packed[exprs(i)] = weight[i]``).

    Raises:
        ValueError: the map is not a bijection onto the packed shape.
    """
    _, shape, exprs = pack
    sparse: tuple[np.ndarray, ...] = tuple(np.indices(weight.shape, sparse=True))
    grid = [np.asarray(g, dtype=np.int64) for g in sparse]
    coords = [np.broadcast_to(_eval_index(e, grid), weight.shape) for e in exprs]
    if len(coords) != len(shape) or any(c.size and (c.min() < 0 or c.max() >= n) for c, n in zip(coords, shape)):
        raise ValueError(f"weight layout rewrite maps {weight.shape} outside the packed shape {shape}")
    flat = np.ravel_multi_index(tuple(coords), shape)
    if math.prod(shape) != weight.size or (flat.size and np.bincount(flat.reshape(-1)).max() > 1):
        raise ValueError(f"weight layout rewrite {weight.shape} -> {shape} is not a bijection")
    packed = np.empty(shape, dtype=weight.dtype)
    packed.reshape(-1)[flat.reshape(-1)] = weight.reshape(-1)
    return packed


def build_artifact(job: tuple[Any, dict[str, Any]]) -> dict[str, Any]:
    """Compile a scheduled IRModule for a target and export it as a shared library.

    Weight layout rewrite blocks are read (:func:`weight_packs`) and then removed, as
    MetaSchedule's ``default_build`` does (``RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=
    True)``), so the kernel takes pre-packed weights.

    Args:
        job: ``(IRModule, resolved target dict)``.

    Returns:
        ``{"path": the .so file (in a fresh directory under the backend's
        :class:`~tune_gym.measure.live.WorkDir`, which the runner deletes), "args":
        [(shape, dtype)] of the kernel's arguments (packed shapes for packed weights, as
        MetaSchedule's ``ArgInfo`` reports them), "packs": [Pack]}``.
    """
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    mod, target = job
    packs = weight_packs(mod)
    if packs:
        mod = tvm.s_tir.transform.RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    args = [(tuple(int(x) for x in info.shape), str(info.dtype)) for info in ArgInfo.from_prim_func(mod["main"])]
    for index, shape, _ in packs:
        if args[index][0] != shape:
            raise ValueError(f"input {index}: packed shape {shape} but the built kernel takes {args[index][0]}")
    lib = tvm.compile(mod, target=tvm.target.Target(target))
    if _WORKDIR is not None:  # made again if something (a /tmp cleaner) removed it under a live owner
        os.makedirs(_WORKDIR, exist_ok=True)
    path = os.path.join(tempfile.mkdtemp(prefix="kernel_" if _WORKDIR else "tune_gym_", dir=_WORKDIR), "kernel.so")
    lib.export_library(path)
    return {"path": path, "args": args, "packs": packs}


def _inputs(shapes: list[tuple[int, ...]], dtypes: str | list[str], seed: int) -> list[np.ndarray]:
    """Uniform [-1, 1) floats per input (integer inputs, e.g. indices, are zeros: always in range)."""
    rng = np.random.default_rng(seed)
    kinds = [dtypes] * len(shapes) if isinstance(dtypes, str) else list(dtypes)
    return [rng.uniform(-1.0, 1.0, size=s).astype(d) if np.dtype(d).kind == "f" else np.zeros(s, dtype=d)
            for s, d in zip(shapes, kinds)]


def reference_output(task_uri: str, inputs: list[np.ndarray]) -> np.ndarray:
    """The op's output on ``inputs`` computed by PyTorch (the vendor library); for a PrimFunc
    task (:mod:`tune_gym.tasks.prim_func`), by the same function built for the host CPU by TVM
    without a schedule."""
    from tune_gym.tasks.task import Task

    task = Task.from_uri(task_uri)
    if task.op == "prim_func":
        return _unscheduled_output(task_uri, inputs)
    import torch

    with torch.no_grad():
        out = task.opdef.torch_fn(torch, task.param_dict, [torch.from_numpy(x) for x in inputs])
    return out.numpy()


#: The last reference outputs of this process: ``(task URI, seed) -> output`` (inputs are a
#: function of the task and the seed, so one reference serves every kernel of a task).
_REFERENCES: dict[tuple[str, int], np.ndarray] = {}
_MAX_REFERENCES = 4


def _cached_reference(task_uri: str, seed: int, inputs: list[np.ndarray]) -> np.ndarray:
    """:func:`reference_output` of ``task_uri`` on ``inputs`` (drawn with ``seed``), kept for
    the next kernels of the same task."""
    key = (task_uri, int(seed))
    if key not in _REFERENCES:
        while len(_REFERENCES) >= _MAX_REFERENCES:
            del _REFERENCES[next(iter(_REFERENCES))]
        _REFERENCES[key] = reference_output(task_uri, inputs)
    return _REFERENCES[key]


def _unscheduled_output(task_uri: str, inputs: list[np.ndarray]) -> np.ndarray:
    import tvm

    from tune_gym.tasks.task import Task

    task = Task.from_uri(task_uri)
    lib = tvm.compile(task.ir_module(), target=tvm.target.Target({"kind": "llvm"}))
    dev = tvm.cpu(0)
    out = tvm.runtime.tensor(np.zeros(task.output_shape(), dtype=task.dtype), dev)
    lib["main"](*(tvm.runtime.tensor(x, dev) for x in inputs), out)
    return out.numpy()


def run_artifact(job: dict[str, Any]) -> dict[str, Any]:
    """Load a built kernel, time it, optionally check its output, then delete the artifact.

    Args:
        job: ``path``; ``device`` ("cpu"/"cuda"); the rest as :func:`measure_kernel` takes it.

    Returns:
        What :func:`measure_kernel` returns; for a CPU kernel its ``extra`` also holds
        ``threads``, the threads TVM's pool ran it on.
    """
    import tvm

    path = job["path"]
    try:
        lib = tvm.runtime.load_module(path)
        dev = tvm.cuda(0) if job["device"] == "cuda" else tvm.cpu(0)
        out = measure_kernel(lib, dev, job)
        if job["device"] == "cpu":  # what the kernel ran on, kept with its result
            out["extra"]["threads"] = pool_threads()
        return out
    finally:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def measure_kernel(lib: Any, dev: Any, job: dict[str, Any], cache: dict[Any, Any] | None = None) -> dict[str, Any]:
    """Time a loaded kernel on a device, optionally checking its output first.

    ``lib`` and ``dev`` may be local or remote (a module loaded through a TVM RPC session and
    that session's device): the inputs are drawn here and copied to ``dev``.

    Args:
        lib: the loaded module (its ``main`` is the kernel).
        dev: the device to run on.
        job: ``inputs`` (list of shapes in the op's own layout), ``output`` (shape),
            ``dtype``; ``packs`` (the build's :data:`Pack` s: those inputs are passed packed)
            and ``args`` (the build's argument shapes, checked); ``number``, ``repeat``,
            ``min_repeat_ms``, ``flush_cache``; ``check_task`` (a task URI to check against
            PyTorch, or None); ``seed``; ``adaptive`` (None, or a dict for
            :func:`tune_gym.measure.adaptive.adaptive_costs`).
        cache: a dict the caller keeps across kernels of one task on one device (same
            ``inputs``, ``output``, ``dtype`` and ``seed``), or None. With it the inputs are
            drawn once and copied to the device once per layout (the last
            :data:`CACHED_PACKS` packed layouts are kept): kernels only read their inputs.
            A checked kernel still writes into a fresh zeroed output.

    Returns:
        ``{"costs": [seconds per call per repeat], "check_error": str | None, "extra": {...}}``.
    """
    import tvm

    cache = {} if cache is None else cache
    if "host" not in cache:
        cache["host"] = _inputs(job["inputs"], job.get("dtypes") or job["dtype"], job["seed"])
    host: list[np.ndarray] = cache["host"]
    packs = {pack[0]: pack for pack in job.get("packs") or ()}
    if job.get("args"):
        want = [tuple(shape) for shape, _ in job["args"]]
        got = [tuple(packs[n][1]) if n in packs else x.shape for n, x in enumerate(host)] + [tuple(job["output"])]
        if got != want:
            raise ValueError(f"argument shapes {got} do not match the built kernel's {want}")
    packed: dict[Any, Any] = cache.setdefault("packed", {})
    args = []
    for n, x in enumerate(host):
        if n not in packs:
            if ("input", n) not in cache:
                cache[("input", n)] = tvm.runtime.tensor(x, dev)
            args.append(cache[("input", n)])
            continue
        if packs[n] not in packed:
            while len(packed) >= CACHED_PACKS:
                del packed[next(iter(packed))]
            packed[packs[n]] = tvm.runtime.tensor(pack_weight(x, packs[n]), dev)
        args.append(packed[packs[n]])
    zeros = lambda: tvm.runtime.tensor(np.zeros(job["output"], dtype=job["dtype"]), dev)
    check_error = None
    if job.get("check_task"):
        out = zeros()
        lib["main"](*args, out)
        dev.sync()
        against = "PyTorch" if job["check_task"].startswith("op://") else "the unscheduled TVM build"
        check_error = _compare(out.numpy(), _cached_reference(job["check_task"], job["seed"], host), against)
    if "output" not in cache:
        cache["output"] = zeros()
    out = cache["output"]
    extra: dict[str, Any] = {}
    if job.get("adaptive") is not None:
        from tune_gym.measure.adaptive import adaptive_costs

        costs, extra = adaptive_costs(lib, dev, [*args, out], **job["adaptive"])
    else:
        timer = lib.time_evaluator(
            "main", dev, number=job["number"], repeat=job["repeat"],
            min_repeat_ms=job["min_repeat_ms"],
            f_preproc="cache_flush_cpu_non_first_arg" if job.get("flush_cache") else "",
        )
        costs = list(timer(*args, out).results)
    return {"costs": [float(c) for c in costs], "check_error": check_error, "extra": extra}


def _compare(out: np.ndarray, ref: np.ndarray, against: str = "PyTorch") -> str | None:
    """None when ``out`` matches ``ref`` to float32 reduction-order tolerance, else why not."""
    if out.shape != ref.shape:
        return f"output shape {out.shape} != reference shape {ref.shape}"
    scale = max(1.0, float(np.abs(ref).max()))
    err = np.abs(out.astype(np.float64) - ref.astype(np.float64))
    bad = err > 1e-3 * scale + 1e-3 * np.abs(ref)
    if bad.any():
        idx = np.unravel_index(int(np.argmax(err)), err.shape)
        return (f"{int(bad.sum())} of {bad.size} outputs differ from {against}; worst at {tuple(map(int, idx))}: "
                f"{float(out[idx]):.6g} vs {float(ref[idx]):.6g}")
    return None
