"""Validity labels of knob-space configs, made without a GPU (CUDA spaces in particular).

On the ``cuda`` target most configs of a MetaSchedule design space do not make a runnable
kernel: :meth:`KnobSpace.apply <tune_gym.space.KnobSpace.apply>` runs the target's postprocs,
and ``VerifyGPUCode`` rejects a schedule whose thread blocks are too large (or too small, see
below), use too much shared memory, too many virtual threads or too wide vectors for the
target's limits (:data:`tune_gym.tasks.targets.CUDA_DEFAULTS`, an sm_75-class GPU, unless
the task's target says otherwise). Only about one random config in ten is valid. All of that
is decided by TVM's compiler, so it needs no GPU: this module labels configs valid or invalid
(and why) so that validity-aware agents and validity classifiers (pairwise accuracy,
precision@n of valid configs) can be compared on CUDA spaces on any machine.

A label file is one Parquet file per (task, preset), one row per labelled config:

=============  ================================================================================
``config``     per-knob choice indices in ``KnobSpace.for_task(Task.from_uri(task), preset)``
``valid``      True when :meth:`KnobSpace.apply` returns a schedule (= ``space.is_valid``)
``reason``     ``""`` for a valid config, else a short stable category (:func:`reason_of`):
               the rejecting postproc's name (``"VerifyGPUCode"``), ``"<postproc>:error"``
               when a postproc raised, ``"schedule"`` when the trace did not replay
``message``    the full message; for ``VerifyGPUCode`` it goes on with the failed check
               and its numbers (:func:`diagnose_gpu`), e.g. ``"rejected by postproc
               VerifyGPUCode: threads_below_min: 16 threads per block, MetaSchedule's bound
               for block conv2d_nchw is [32, 1024]"``; :func:`cause_of` reads the check back
=============  ================================================================================

The schema metadata (key ``tune_gym_validity``, JSON) holds the layout version, the task URI,
preset, the space fingerprint (:func:`tune_gym.datasets.dataset.space_fingerprint`) and size,
the row count, the count of valid rows, a SHA-256 checksum of the rows (the same canonical
checksum as a measurement dataset's, :func:`tune_gym.datasets.parquet_io.rows_checksum`), and
``meta``: how the labels were made (command, seed, sampling, date, TVM version, the target
with its limits, knob names, host, seconds). :func:`load_validity` refuses, with a one-line
message naming the file: a file without that key or whose key is not a JSON object, of
another layout version, lacking a column, whose rows do not match the checksum, whose space's
fingerprint has changed since (the indices would name other schedules; collect it again), a
config index beyond its knob's choices, or a space size, row count or valid count in the
metadata that is not that of the space and rows. Those counts are checked against the space
and rows rather than sealed: the other metadata describes how the labels were made and
changes no number.

Why ``VerifyGPUCode`` rejects (its checks, in order; :func:`diagnose_gpu` replays them):

1. MetaSchedule's thread-extent bounds: multi-level tiling annotates the tiled block with the
   range ``[thread_warp_size, max_threads_per_block]`` its threads per block must lie in, so
   a config with fewer threads than a warp is *invalid*, although a GPU would run it
   (``threads_below_min``; ``threads_above_max`` for too many).
2. The lowered kernel is checked against ``max_threads_per_block``,
   ``max_shared_memory_per_block``, at most 8 virtual threads and vector accesses of at most
   16 bytes (``threads_per_block``, ``shared_memory``, ``vthread``, ``vector_bytes``;
   several joined by ``+``); ``lowering`` when lowering itself failed.

Example:
    >>> labels = collect_validity("resnet18:9@cuda", "compact", n=100, seed=0)
    >>> summary(labels)["valid_ratio"], summary(labels)["reasons"]
    >>> save_validity(labels, "resnet18_9_compact.parquet")
    >>> load_validity("resnet18_9_compact.parquet").valid.mean()
"""

from __future__ import annotations

import math
import os
import shlex
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tune_gym.datasets import parquet_io
from tune_gym.datasets.dataset import DatasetError, space_fingerprint
from tune_gym.errors import TuneGymError
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = [
    "GPU_CAUSES", "VALIDITY_SCHEMA", "ValidityError", "ValidityLabels", "cause_of", "collect_validity",
    "diagnose_gpu", "label_configs", "load_validity", "reason_of", "save_validity", "summary", "wilson_interval",
]

#: Version of the label file layout; bump it when columns or metadata change meaning.
VALIDITY_SCHEMA = 1
#: Schema metadata key of a label file (a measurement dataset uses ``tune_gym``).
META_KEY = b"tune_gym_validity"
#: The checks :func:`diagnose_gpu` can name (see the module docstring).
GPU_CAUSES = ("threads_below_min", "threads_above_max", "threads_per_block", "shared_memory", "vthread",
              "vector_bytes", "lowering", "unknown")
_VERIFY = "VerifyGPUCode"
_VERIFY_PREFIX = f"rejected by postproc {_VERIFY}"
#: VerifyGPUCode's fixed limits (TVM's postproc sets them; the others come from the target).
_FIXED_LIMITS = {"max_vthread": 8, "max_vector_bytes": 16}
_LIMIT_CAUSE = {"max_threads_per_block": "threads_per_block", "max_shared_memory_per_block": "shared_memory",
                "max_vthread": "vthread", "max_vector_bytes": "vector_bytes"}


class ValidityError(DatasetError):
    """A label file that cannot be used: not a label file, edited rows, or a changed space."""


@dataclass
class ValidityLabels:
    """Validity labels of configs of one task's knob space (see the module docstring).

    Attributes:
        task: the task's URI.
        preset: the knob space preset (a name of :data:`~tune_gym.space.PRESETS`).
        space_fingerprint: :func:`~tune_gym.datasets.dataset.space_fingerprint` of the space
            the configs index.
        space_size: number of configs in that space.
        configs: ``n x n_knobs`` int64 array of canonical configs, one row per label.
        valid: ``n`` bools: the config schedules and passes every postproc of the target.
        reason: per row, ``""`` when valid, else a short category (:func:`reason_of`).
        message: per row, the full message (``""`` when valid).
        meta: how the labels were made: ``task_id`` (the suite id asked for, if any),
            ``command``, ``seed``, ``sampling`` (``uniform`` or ``exhaustive``),
            ``exhaustive``, ``n_requested``, ``date``, ``tvm``, ``target`` (the resolved
            target with its limits), ``verify_limits``, ``knobs``, ``host``, ``seconds``
            (labelling wall time), ``seconds_per_config``, ``cpu_seconds`` and
            ``cpu_seconds_per_config`` (this process's CPU time: the cost on an idle core),
            ``space_seconds`` (building the space).
        source: the file it was loaded from, or ``"(in memory)"``.
    """

    task: str
    preset: str
    space_fingerprint: str
    space_size: int
    configs: np.ndarray
    valid: np.ndarray
    reason: list[str]
    message: list[str]
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = "(in memory)"

    def __post_init__(self) -> None:
        self.configs = np.asarray(self.configs, dtype=np.int64).reshape(len(self.valid), -1)
        self.valid = np.asarray(self.valid, dtype=bool)
        self.reason = [str(r) for r in self.reason]
        self.message = [str(m) for m in self.message]
        n = len(self.valid)
        if not len(self.configs) == len(self.reason) == len(self.message) == n:
            raise ValidityError(f"{self.source}: {len(self.configs)} configs, {n} labels, {len(self.reason)} reasons "
                                f"and {len(self.message)} messages: one of each per row")

    def __len__(self) -> int:
        return len(self.valid)

    @property
    def n_valid(self) -> int:
        return int(self.valid.sum())

    @property
    def exhaustive(self) -> bool:
        """True when every config of the space is labelled."""
        return len(self) >= self.space_size

    @property
    def causes(self) -> list[str]:
        """Per row, the failed ``VerifyGPUCode`` check (:func:`cause_of`), ``""`` otherwise."""
        return [cause_of(r, m) for r, m in zip(self.reason, self.message)]

    def config_list(self) -> list[Config]:
        """The configs as tuples (the form :class:`KnobSpace` methods take)."""
        return [tuple(int(v) for v in row) for row in self.configs.tolist()]

    def space(self) -> KnobSpace:
        """The knob space the configs index (built once per process)."""
        return KnobSpace.for_task(Task.from_uri(self.task), self.preset)


# ---------------------------------------------------------------------------------- labelling
def reason_of(message: str) -> str:
    """The short, stable category of a :meth:`KnobSpace.apply` message.

    ``""`` -> ``""`` (valid); ``"rejected by postproc P..."`` -> ``"P"``; ``"postproc P
    failed: ..."`` -> ``"P:error"``; ``"schedule error: ..."`` -> ``"schedule"``; anything
    else -> ``"other"``.
    """
    if not message:
        return ""
    if message.startswith("rejected by postproc "):
        return message.removeprefix("rejected by postproc ").split(":", 1)[0].split()[0]
    if message.startswith("postproc ") and " failed" in message:
        return message.removeprefix("postproc ").split(" failed", 1)[0].strip() + ":error"
    if message.startswith("schedule error"):
        return "schedule"
    return "other"


def cause_of(reason: str, message: str) -> str:
    """The failed ``VerifyGPUCode`` check named in a label's message (one of
    :data:`GPU_CAUSES`, several joined by ``+``); ``""`` for other reasons or a bare message."""
    if reason != _VERIFY or not message.startswith(_VERIFY_PREFIX + ": "):
        return ""
    return message.removeprefix(_VERIFY_PREFIX + ": ").split(":", 1)[0].strip()


def label_configs(space: KnobSpace, configs: Iterable[Sequence[int]] | np.ndarray, progress: bool = False,
                  diagnose: bool = True, desc: str | None = None) -> tuple[np.ndarray, list[str], list[str]]:
    """Label each config valid or not, with the reason, by :meth:`KnobSpace.apply`.

    Args:
        space: the knob space (any target; on CUDA this runs ``VerifyGPUCode``, no GPU needed).
        configs: configs of ``space`` (tuples or an ``n x n_knobs`` array).
        progress: show a tqdm progress bar.
        diagnose: for a ``VerifyGPUCode`` rejection, replay its checks (:func:`diagnose_gpu`)
            and append the failed one to the message (about doubles the time of those rows).
        desc: the progress bar's label (default: the task's URI and the preset).

    Returns:
        ``(valid, reason, message)``: a bool array, and per config the category
        (:func:`reason_of`, ``""`` when valid) and the full message (``""`` when valid).

    Raises:
        SpaceError: a config that is not a config of ``space``.
    """
    rows = [tuple(int(v) for v in c) for c in (configs.tolist() if isinstance(configs, np.ndarray) else configs)]
    valid = np.zeros(len(rows), dtype=bool)
    reason: list[str] = []
    message: list[str] = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(rows), desc=desc or f"{space.task.uri} [{space.preset}]", unit="cfg",
                   dynamic_ncols=True)
    n_valid = 0
    for i, cfg in enumerate(rows):
        sch, why = space.apply(cfg)
        if sch is not None:
            valid[i] = True
            n_valid += 1
            reason.append("")
            message.append("")
        else:
            why = why or "rejected"
            category = reason_of(why)
            if diagnose and category == _VERIFY and why == _VERIFY_PREFIX:
                cause, detail = diagnose_gpu(space, cfg)
                why = f"{why}: {cause}: {detail}"
            reason.append(category)
            message.append(why)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(valid=f"{n_valid / (i + 1):.1%}", refresh=False)
    if bar is not None:
        bar.close()
    return valid, reason, message


# ---------------------------------------------------------------------------------- GPU checks
def _children(node: Any) -> list[Any]:
    out: list[Any] = []
    for key in ("body", "block", "then_case", "else_case"):
        child = getattr(node, key, None)
        if child is not None and not isinstance(child, (int, float, str)):
            out.append(child)
    seq = getattr(node, "seq", None)
    if seq is not None:
        out.extend(seq)
    return out


def _walk(node: Any) -> Iterable[Any]:
    """Every statement under ``node`` (pre-order); TVM 0.27 has no Python stmt visitor."""
    todo = [node]
    while todo:
        cur = todo.pop()
        yield cur
        todo.extend(reversed(_children(cur)))


def _thread_bounds(sch: Any, warp_size: int) -> list[tuple[str, int, int, int]]:
    """Per block annotated with MetaSchedule's thread-extent bounds: (block, threads, low, high),
    ``threads`` the product of the threadIdx extents of its loops (innermost per axis; a warp
    for ``threadIdx.x`` in a block marked ``warp_execution``), as TVM's ThreadExtentChecker."""
    out = []
    todo = list(sch.get_child_blocks(sch.get_sblock("root")))
    while todo:
        rv = todo.pop(0)
        todo.extend(sch.get_child_blocks(rv))
        block = sch.get(rv)
        low = block.annotations.get("meta_schedule.thread_extent_low_inclusive")
        high = block.annotations.get("meta_schedule.thread_extent_high_inclusive")
        if low is None or high is None:
            continue
        extents: dict[str, int] = {}
        for loop_rv in sch.get_loops(rv):
            loop = sch.get(loop_rv)
            tag = str(loop.thread_binding.thread_tag) if loop.thread_binding is not None else ""
            if tag.startswith("threadIdx") and hasattr(loop.extent, "value"):
                extents[tag] = int(loop.extent.value)
        if "warp_execution" in block.annotations:
            extents["threadIdx.x"] = warp_size
        out.append((str(block.name_hint), math.prod(extents.values()), int(low), int(high)))
    return out


def _lowering_passes(tv: Any) -> Any:
    """The passes VerifyGPUCode lowers a schedule with before checking it (TVM 0.27)."""
    s, x = tv.s_tir.transform, tv.tirx.transform
    return tv.transform.Sequential([
        s.LowerCrossThreadReduction(), s.LowerInitBlock(), s.PlanAndUpdateBufferAllocationLocation(),
        s.ConvertBlocksToOpaque(), s.LiftThreadBinding(), s.ManifestSharedMemoryLocalStage(),
        s.CompactBufferAllocation(), x.StmtSimplify(), s.LowerAutoCopy(), s.UnifyThreadBinding(),
        s.LowerMatchBuffer(), s.InjectSoftwarePipeline(), s.LowerOpaqueBlock(), x.FlattenBuffer(),
        x.BF16ComputeLegalize(), x.NarrowDataType(32), x.StmtSimplify(),
        x.VectorizeLoop(True), s.InjectVirtualThread(), s.InjectDoubleBuffer(), x.StorageRewrite(),
        s.MergeSharedMemoryAllocations(), x.LowerIntrin(),
    ])


def _kernel_stats(func_body: Any, before_body: Any) -> dict[str, int]:
    """Threads per block and shared memory bytes (largest over kernels) of a lowered function,
    and virtual threads per block of the function before lowering."""
    threads = shared = 0
    kernels = [n for n in _walk(func_body) if type(n).__name__ == "AttrStmt" and str(n.attr_key) == "thread_extent"
               and str(n.node.thread_tag).startswith("blockIdx")]
    for kernel in kernels or [func_body]:
        extents: dict[str, int] = {}
        bytes_ = 0
        for node in _walk(kernel):
            kind = type(node).__name__
            if kind == "AttrStmt" and str(node.attr_key) == "thread_extent":
                tag = str(node.node.thread_tag)
                if tag.startswith("threadIdx") and hasattr(node.value, "value"):
                    extents.setdefault(tag, int(node.value.value))
            elif kind == "AllocBuffer" and str(node.buffer.scope()).startswith("shared"):
                n = math.prod(int(getattr(d, "value", 0)) for d in node.buffer.shape)
                bytes_ += n * (node.buffer.dtype.bits * node.buffer.dtype.lanes // 8)
        threads = max(threads, math.prod(extents.values()))
        shared = max(shared, bytes_)
    vthreads: dict[str, int] = {}
    for node in _walk(before_body):
        if type(node).__name__ == "For" and node.thread_binding is not None:
            tag = str(node.thread_binding.thread_tag)
            if tag.startswith("vthread") and hasattr(node.extent, "value"):
                vthreads[tag] = vthreads.get(tag, 1) * int(node.extent.value)
    return {"threads": threads, "shared_bytes": shared, "vthreads": math.prod(vthreads.values())}


def diagnose_gpu(space: KnobSpace, config: Config) -> tuple[str, str]:
    """Which check of ``VerifyGPUCode`` a config fails, replaying the postproc in Python.

    Replays the config's schedule and the postprocs before ``VerifyGPUCode``, then its checks
    as TVM 0.27 makes them (see the module docstring): MetaSchedule's thread-extent bounds of
    each tiled block, then the lowered kernel against each limit alone.

    Returns:
        ``(cause, detail)``: ``cause`` one of :data:`GPU_CAUSES` (several lowered-kernel
        limits joined by ``+``), ``detail`` the numbers, e.g. ``"65536 B of shared memory
        per block > 49152"``. ``("unknown", why)`` when the replay finds nothing wrong or
        fails; it never raises.
    """
    try:
        from tune_gym.tvm_support import tvm

        tv = tvm()
        sch = space.to_schedule(config)
        postprocs = list(space.postprocs)
        names = [type(p).__name__ for p in postprocs]
        if _VERIFY not in names:
            return "unknown", "the space has no VerifyGPUCode postproc"
        for p in postprocs[: names.index(_VERIFY)]:
            if not p.apply(sch):
                return "unknown", f"postproc {type(p).__name__} rejected it on replay"
        target = space.target
        for block, threads, low, high in _thread_bounds(sch, int(target.attrs["thread_warp_size"])):
            if threads < low:
                return "threads_below_min", (f"{threads} threads per block, MetaSchedule's bound for block {block} "
                                             f"is [{low}, {high}]")
            if threads > high:
                return "threads_above_max", (f"{threads} threads per block, MetaSchedule's bound for block {block} "
                                             f"is [{low}, {high}]")
        limits = {"max_shared_memory_per_block": int(target.attrs["max_shared_memory_per_block"]),
                  "max_threads_per_block": int(target.attrs["max_threads_per_block"]), **_FIXED_LIMITS}
        func = sch.mod["main"]
        before = func.body
        func = func.with_attr("global_symbol", "main").with_attr("target", target).with_attr("tirx.noalias", True)
        try:
            lowered = _lowering_passes(tv)(tv.IRModule({"main": func}))["main"]
        except Exception as err:
            return "lowering", str(err).strip().splitlines()[-1][:200] if str(err).strip() else type(err).__name__
        failed = [k for k, v in limits.items() if not tv.s_tir.analysis.verify_gpu_code(lowered, {k: v})]
        if not failed:
            return "unknown", "every check passes on replay"
        stats = _kernel_stats(lowered.body, before)
        shown = {
            "max_threads_per_block": f"{stats['threads']} threads per block > {limits['max_threads_per_block']}",
            "max_shared_memory_per_block": f"{stats['shared_bytes']} B of shared memory per block > "
                                           f"{limits['max_shared_memory_per_block']}",
            "max_vthread": f"{stats['vthreads']} virtual threads > {limits['max_vthread']}",
            "max_vector_bytes": f"a vector access wider than {limits['max_vector_bytes']} B",
        }
        return "+".join(_LIMIT_CAUSE[k] for k in failed), "; ".join(shown[k] for k in failed)
    except Exception as err:
        return "unknown", f"diagnosis failed: {type(err).__name__}: {str(err).strip()[:160]}"


# ---------------------------------------------------------------------------------- collection
def collect_validity(task: Task | str, preset: str, n: int, seed: int, progress: bool = False,
                     command: str | None = None, diagnose: bool = True) -> ValidityLabels:
    """Label ``n`` distinct uniform random configs of a task's space (all of it when small).

    Args:
        task: a :class:`Task`, URI or suite id (``"resnet18:1@cuda"``).
        preset: a name of :data:`~tune_gym.space.PRESETS`.
        n: how many configs; when ``n >= space.size`` every config is labelled, in flat index
            order, and ``meta["sampling"]`` is ``"exhaustive"``.
        seed: seed of ``space.sample_unique(numpy.random.default_rng(seed), n)``.
        progress: show a progress bar.
        command: the command line to record (default: this process's ``sys.argv``).
        diagnose: name the failed ``VerifyGPUCode`` check in each message (:func:`diagnose_gpu`).

    Returns:
        The labels, with ``meta`` saying how they were made.
    """
    from tune_gym.host import host_fingerprint
    from tune_gym.tvm_support import tvm

    task_id = task if isinstance(task, str) and "://" not in task else None
    task = task if isinstance(task, Task) else Task.parse(task)
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    t0 = time.time()
    space = KnobSpace.for_task(task, preset)
    space_secs = time.time() - t0
    exhaustive = n >= space.size
    configs = list(space) if exhaustive else space.sample_unique(np.random.default_rng(seed), n)
    t1, c1 = time.time(), time.process_time()
    valid, reason, message = label_configs(space, configs, progress=progress, diagnose=diagnose,
                                           desc=f"{task_id or task.uri} {preset}")
    secs, cpu_secs = time.time() - t1, time.process_time() - c1
    target = space.target
    limits = {"max_shared_memory_per_block": int(target.attrs["max_shared_memory_per_block"]),
              "max_threads_per_block": int(target.attrs["max_threads_per_block"]),
              "thread_warp_size": int(target.attrs["thread_warp_size"]), **_FIXED_LIMITS} \
        if task.target.kind == "cuda" else {}
    meta = {
        "task_id": task_id,
        "command": command if command is not None else shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "seed": int(seed), "n_requested": int(n), "sampling": "exhaustive" if exhaustive else "uniform",
        "sampler": "flat index order" if exhaustive else "KnobSpace.sample_unique(numpy.random.default_rng(seed), n)",
        "exhaustive": exhaustive, "diagnosed": bool(diagnose),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "tvm": str(tvm().__version__),
        "target": task.target.resolved(), "verify_limits": limits, "gpu_used": False,
        "knobs": list(space.names), "host": host_fingerprint(), "seconds": round(secs, 3),
        "seconds_per_config": round(secs / max(1, len(configs)), 5), "cpu_seconds": round(cpu_secs, 3),
        "cpu_seconds_per_config": round(cpu_secs / max(1, len(configs)), 5), "space_seconds": round(space_secs, 3),
    }
    table = np.array(configs, dtype=np.int64).reshape(len(configs), space.n_knobs)
    return ValidityLabels(task=task.uri, preset=preset, space_fingerprint=space_fingerprint(space),
                          space_size=int(space.size), configs=table, valid=valid, reason=reason, message=message,
                          meta=meta)


# ---------------------------------------------------------------------------------- Parquet
#: The columns of a label file, in file order.
COLUMNS = ("config", "valid", "reason", "message")
_WHAT = "validity label file"


def _table(labels: ValidityLabels) -> Any:
    pa, _ = parquet_io.arrow(ValidityError)
    return pa.table({
        "config": pa.array(labels.configs.tolist(), pa.list_(pa.int32())),
        "valid": pa.array(labels.valid.tolist(), pa.bool_()),
        "reason": pa.array(labels.reason, pa.string()),
        "message": pa.array(labels.message, pa.string()),
    })


def save_validity(labels: ValidityLabels, path: str | os.PathLike[str]) -> Path:
    """Write labels to ``path`` (Parquet, zstd), atomically (a temp file, then rename).

    Returns:
        The path written.
    """
    table = _table(labels)
    header = {
        "schema": VALIDITY_SCHEMA, "task": labels.task, "preset": labels.preset,
        "space_fingerprint": labels.space_fingerprint, "space_size": int(labels.space_size),
        "rows": len(labels), "valid": labels.n_valid, "checksum": parquet_io.rows_checksum(table),
        "meta": labels.meta,
    }
    path = parquet_io.write_table(table, META_KEY, header, path, ValidityError)
    labels.source = str(path)
    return path


def read_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata of a label file (reads only its footer); raises ValidityError naming it."""
    header = parquet_io.read_footer(path, META_KEY, _WHAT, ValidityError,
                                    other=" (a measurement dataset is read with tune_gym.datasets.load_dataset)")
    parquet_io.check_schema(header, VALIDITY_SCHEMA, path, _WHAT, ValidityError,
                            "Collect it again with scripts/cuda_validity.py")
    return header


def load_validity(path: str | os.PathLike[str], space: KnobSpace | None = None, verify: bool = True) -> ValidityLabels:
    """Read a label file, refusing what cannot be trusted.

    Args:
        path: a file written by :func:`save_validity`.
        space: the space the labels will be used with (default: the task's space today,
            ``KnobSpace.for_task(Task.from_uri(task), preset)``); its fingerprint must match.
        verify: check the rows' checksum (on by default).

    Raises:
        ValidityError: naming the file: missing or unreadable, no ``tune_gym_validity``
            metadata, another layout version, a missing column, rows that do not match the
            checksum, a space whose fingerprint changed (collect the labels again), a config
            out of its space, or counts in the metadata that are not the rows'.
    """
    path = Path(path)
    header = read_header(path)
    table = parquet_io.read_rows(path, COLUMNS, _WHAT, ValidityError)
    task, preset = header.get("task"), header.get("preset")
    if not isinstance(task, str) or not isinstance(preset, str):
        raise ValidityError(f"validity label file {path}: its metadata names no task and preset")
    redo = (f"collect it again: python scripts/cuda_validity.py --tasks '{task}' --presets {preset} "
            f"--out {path.parent}")
    if verify and parquet_io.rows_checksum(table) != header.get("checksum"):
        raise ValidityError(f"validity label file {path}: checksum mismatch: its rows are not the rows it was written "
                            f"with (the file was edited or corrupted). Restore it, or {redo}")
    if space is None:
        try:
            space = KnobSpace.for_task(Task.from_uri(task), preset)
        except TuneGymError as err:
            raise ValidityError(f"validity label file {path}: its task: {err}") from None
    if (space.task.uri, space.preset) != (task, preset):
        raise ValidityError(f"validity label file {path} holds {task} (preset {preset}), not {space.task.uri} "
                            f"(preset {space.preset})")
    current = space_fingerprint(space)
    if header.get("space_fingerprint") != current:
        raise ValidityError(
            f"validity label file {path} was made for a knob space with fingerprint {header.get('space_fingerprint')} "
            f"({header.get('space_size')} configs); the space of {task} (preset {preset}) is now {current} "
            f"({space.size} configs, knobs {', '.join(space.names)}): its indices now mean other schedules "
            f"(another TVM or space code). Recollect the labels: {redo}")
    configs = parquet_io.config_array(table, space.dims, space.names, f"{_WHAT} {path}", ValidityError)
    valid, reason, message = _label_columns(table, path)
    _check_counts(header, space, valid, path)
    meta = header.get("meta", {})
    if not isinstance(meta, dict):
        raise ValidityError(f"validity label file {path}: its metadata's meta is a JSON {type(meta).__name__}, "
                            "not an object")
    return ValidityLabels(
        task=task, preset=preset, space_fingerprint=current, space_size=space.size,
        configs=configs.astype(np.int64), valid=valid, reason=reason, message=message, meta=dict(meta),
        source=str(path),
    )


def _label_columns(table: Any, path: Path) -> tuple[np.ndarray, list[str], list[str]]:
    """The ``valid``, ``reason`` and ``message`` columns, their types and values checked."""
    pa, _ = parquet_io.arrow(ValidityError)
    for name, is_type, want in (("valid", pa.types.is_boolean, "booleans"), ("reason", pa.types.is_string, "strings"),
                                ("message", pa.types.is_string, "strings")):
        col = table.column(name)
        if not is_type(col.type):
            raise ValidityError(f"validity label file {path}: column {name} holds {col.type}, not {want}")
        if col.null_count:
            row = int(np.flatnonzero(np.asarray(col.is_null().to_numpy(zero_copy_only=False)))[0])
            raise ValidityError(f"validity label file {path}: row {row}: {name} is missing")
    valid = np.asarray(table.column("valid").to_numpy(zero_copy_only=False), dtype=bool)
    return valid, table.column("reason").to_pylist(), table.column("message").to_pylist()


def _check_counts(header: dict[str, Any], space: KnobSpace, valid: np.ndarray, path: Path) -> None:
    """The metadata's space size, row count and valid count against the space and rows."""
    for name, want in (("space_size", space.size), ("rows", len(valid)), ("valid", int(valid.sum()))):
        got = header.get(name)
        if got != want or isinstance(got, bool):
            raise ValidityError(f"validity label file {path}: its metadata says {name} {str(got)[:40]}, but it is "
                                f"{want}")


# ---------------------------------------------------------------------------------- summary
def wilson_interval(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``k / n`` (95% by default); ``(0, 1)`` if n = 0."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def summary(labels: ValidityLabels) -> dict[str, Any]:
    """Counts of one label set.

    Returns:
        ``task``, ``preset``, ``space_size``, ``n``, ``valid`` (count), ``valid_ratio``,
        ``valid_ci95`` (Wilson interval), ``exhaustive``, ``reasons`` (count per reason of
        the invalid rows, most common first) and ``causes`` (count per failed
        ``VerifyGPUCode`` check, when diagnosed).
    """
    n, k = len(labels), labels.n_valid
    lo, hi = wilson_interval(k, n)
    reasons = Counter(r for r, v in zip(labels.reason, labels.valid) if not v)
    causes = Counter(c for c in labels.causes if c)
    return {
        "task": labels.task, "preset": labels.preset, "space_size": labels.space_size, "n": n, "valid": k,
        "valid_ratio": k / n if n else math.nan, "valid_ci95": (lo, hi), "exhaustive": labels.exhaustive,
        "reasons": dict(reasons.most_common()), "causes": dict(causes.most_common()),
    }
