"""TLP-style features: a schedule as a sequence of primitive vectors (Zhai et al., ASPLOS 2023).

Each instruction of a MetaSchedule trace becomes one row laid out as
``[one-hot kind | numeric arguments | string arguments as integer tokens]``, cropped or
zero-padded to ``vec_len``; the rows are cropped or zero-padded to ``max_len``. Arguments keep
their order (inputs, then attrs, then any decision). TLP's defaults are 25 x 22 on CPU and
20 x 40 on GPU (:func:`default_shape`).

Which instructions become rows:
    * Lookups (:data:`LOOKUP_KINDS`, e.g. ``GetSBlock``/``GetLoops``) only name existing
      blocks and loops, so they get no row. The block names they fetch are carried by the
      rows that use the block (as tokens); loops are numbered in order of creation.
    * Sampling instructions (:data:`SAMPLE_KINDS`) get no row either: their decided values are
      written into the rows that consume them, as Ansor's steps (which TLP encodes) carry
      them. A ``Split`` row holds its factors, an ``Annotate`` of ``unroll_explicit`` holds
      the unroll step (the candidate value, not its index), a ``ComputeAt`` holds the
      sampled location (-2 inline, -1 root, i >= 0 a loop). Rows seen: CPU 7-12 (compact)
      and 8-17 (full), so 25 keeps every decision; CUDA 13-18 (compact) but 24-31 (full),
      where the 20-row GPU default drops the ``cooperative_fetch`` and unroll rows (pass
      ``max_len=32`` to keep them).
    * Every other instruction is a row; kinds outside :data:`PRIMITIVE_KINDS` use ``other``.

Argument values: ints, bools (0/1), floats and ``IntImm``/``FloatImm`` as they are; a sampled
variable as its value; a loop as its creation number (1, 2, ...); ``None`` as 0; a block and
any string as a token from :func:`token_id`. A one-hot of 11 kinds leaves 11 argument columns
at ``vec_len`` 22, enough for a ``Split`` with 5 factors (only ``Reorder`` rows get cropped).

Example:
    >>> space = KnobSpace.for_task(Task.parse("resnet18:1"), "compact")
    >>> encode_configs(space, space.sample(np.random.default_rng(0), 8)).shape
    (8, 25, 22)
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "HASH_BUCKETS", "KNOWN_TOKENS", "LOOKUP_KINDS", "PRIMITIVE_KINDS", "SAMPLE_KINDS", "SequenceEncoder",
    "default_shape", "encode_configs", "encode_trace", "token_id", "trace_rows",
]

#: Kinds with their own one-hot column (all row kinds seen in the tune_gym spaces), then ``other``.
PRIMITIVE_KINDS = ("Split", "Reorder", "Fuse", "Bind", "Annotate", "CacheRead", "CacheWrite",
                   "ComputeAt", "ReverseComputeAt", "ComputeInline", "other")
#: Lookups: no row (see the module docstring).
LOOKUP_KINDS = ("GetSBlock", "GetLoops", "GetChildBlocks", "GetProducers", "GetConsumers",
                "GetOutputBlocks")
#: Samplers: no row; their values are folded into the instructions that use them.
SAMPLE_KINDS = ("SamplePerfectTile", "SampleCategorical", "SampleComputeLocation",
                "SamplePartitionedTile")
#: Strings with fixed token ids 1..len (append only: ids must never change).
KNOWN_TOKENS = (
    "root", "global", "shared", "shared.dyn", "local", "warp",
    "blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z",
    "vthread.x", "vthread.y", "vthread.z",
    "meta_schedule.tiling_structure", "meta_schedule.parallel", "meta_schedule.vectorize",
    "meta_schedule.unroll_explicit", "meta_schedule.unroll_implicit", "meta_schedule.cooperative_fetch",
    "meta_schedule.thread_extent_low_inclusive", "meta_schedule.thread_extent_high_inclusive",
    "meta_schedule.auto_tensorize", "meta_schedule.auto_tensorize_init",
    "SRS", "SSRS", "SSRSRS", "SSSRRSRS",
    "pad_temp", "conv2d_nchw", "DepthwiseConv2d", "PaddedInput", "T_matmul_NT", "T_batch_matmul_NT",
    "compute", "data_dilate", "data_pad", "kernel_transform",
)
#: Other strings hash (CRC-32, stable across processes) into this many ids after the known ones.
HASH_BUCKETS = 1000
_TOKEN = {s: i + 1 for i, s in enumerate(KNOWN_TOKENS)}
_KIND = {k: i for i, k in enumerate(PRIMITIVE_KINDS)}
_CPU_SHAPE, _GPU_SHAPE = (25, 22), (20, 40)

Row = tuple[str, list[float], list[int]]


def token_id(text: str) -> int:
    """Integer token of a string: 1..len(KNOWN_TOKENS) for known ones, else a CRC-32 bucket."""
    known = _TOKEN.get(text)
    if known is not None:
        return known
    return len(KNOWN_TOKENS) + 1 + zlib.crc32(text.encode("utf-8")) % HASH_BUCKETS


def default_shape(target_kind: str) -> tuple[int, int]:
    """TLP's ``(max_len, vec_len)``: ``(25, 22)`` for ``llvm``/``cpu``, ``(20, 40)`` for ``cuda``/``gpu``."""
    kind = str(target_kind).lower()
    if kind in ("llvm", "cpu"):
        return _CPU_SHAPE
    if kind in ("cuda", "gpu"):
        return _GPU_SHAPE
    raise ValueError(f"unknown target kind {target_kind!r}; known: llvm, cpu, cuda, gpu")


def _sampled_values(inst: Any, decision: Any) -> list[float]:
    """The value each output of a sampling instruction takes under ``decision``."""
    if inst.kind.name == "SampleCategorical":
        value = inst.attrs[0][int(decision)]
        return [float(getattr(value, "value", value))] * len(inst.outputs)
    if isinstance(decision, (int, float)):
        return [float(decision)] * len(inst.outputs)
    values = [float(d) for d in decision]
    return values if len(values) == len(inst.outputs) else [0.0] * len(inst.outputs)


def trace_rows(trace: Any) -> list[Row]:
    """The rows of a trace before one-hot encoding, cropping and padding.

    Args:
        trace: a ``tvm.s_tir.schedule.Trace`` (e.g. :meth:`KnobSpace.trace`).

    Returns:
        ``[(kind, numbers, tokens), ...]``, one per encoded instruction, in trace order;
        ``len()`` is the sequence length before cropping.
    """
    decisions = dict(trace.decisions.items())
    sampled: dict[Any, float] = {}
    loops: dict[Any, int] = {}
    blocks: dict[Any, str] = {}
    rows: list[Row] = []

    def collect(x: Any, nums: list[float], toks: list[int]) -> None:
        if x is None:
            nums.append(0.0)
        elif isinstance(x, str):
            toks.append(token_id(str(x)))
        elif isinstance(x, (bool, int, float)):
            nums.append(float(x))
        elif isinstance(getattr(x, "value", None), (int, float)):  # IntImm / FloatImm
            nums.append(float(x.value))
        elif isinstance(x, (list, tuple)) or type(x).__name__ == "Array":
            for y in x:
                collect(y, nums, toks)
        elif x in sampled:
            nums.append(sampled[x])
        elif x in loops:
            nums.append(float(loops[x]))
        elif x in blocks:
            toks.append(token_id(blocks[x]))
        else:  # an unresolved variable
            nums.append(0.0)

    for inst in trace.insts:
        kind = inst.kind.name
        decision = decisions.get(inst)
        if decision is not None:
            sampled.update(zip(inst.outputs, _sampled_values(inst, decision)))
        if kind == "GetSBlock":
            blocks[inst.outputs[0]] = str(inst.attrs[0])
        else:  # name derived blocks, number new loops
            src = next((blocks[x] for x in inst.inputs if type(x).__name__ == "SBlockRV" and x in blocks), "")
            stem = "/".join([src, kind, *(str(a) for a in inst.attrs)])
            for j, out in enumerate(inst.outputs):
                name = type(out).__name__
                if name == "SBlockRV":
                    blocks[out] = stem if len(inst.outputs) == 1 else f"{stem}#{j}"
                elif name == "LoopRV" and out not in sampled:
                    loops[out] = len(loops) + 1
        if kind in LOOKUP_KINDS or kind in SAMPLE_KINDS:
            continue
        nums: list[float] = []
        toks: list[int] = []
        for x in (*inst.inputs, *inst.attrs):
            collect(x, nums, toks)
        if decision is not None:
            collect(decision, nums, toks)
        rows.append((kind if kind in _KIND else "other", nums, toks))
    return rows


def encode_trace(trace: Any, max_len: int = 25, vec_len: int = 22) -> np.ndarray:
    """Encode one trace as a ``(max_len, vec_len)`` float32 matrix.

    Args:
        trace: a ``tvm.s_tir.schedule.Trace``.
        max_len: rows kept (later primitives are cropped; missing rows are zeros).
        vec_len: columns per row: ``len(PRIMITIVE_KINDS)`` one-hot columns, then numeric
            arguments, then string tokens, cropped or zero-padded.

    Returns:
        ``float32`` array of shape ``(max_len, vec_len)``.
    """
    if vec_len < len(PRIMITIVE_KINDS):
        raise ValueError(f"vec_len must be >= {len(PRIMITIVE_KINDS)} (the one-hot width), got {vec_len}")
    out = np.zeros((max_len, vec_len), dtype=np.float32)
    width = vec_len - len(PRIMITIVE_KINDS)
    for r, (kind, nums, toks) in enumerate(trace_rows(trace)[:max_len]):
        out[r, _KIND[kind]] = 1.0
        args = (nums + [float(t) for t in toks])[:width]
        out[r, len(PRIMITIVE_KINDS):len(PRIMITIVE_KINDS) + len(args)] = args
    return out


def encode_configs(space: Any, configs: Sequence[Sequence[int]], max_len: int | None = None,
                   vec_len: int | None = None) -> np.ndarray:
    """Encode configs of a :class:`~tune_gym.space.KnobSpace` through ``space.trace(config)``.

    Args:
        space: the knob space the configs belong to.
        configs: ``n`` configs (knob index tuples).
        max_len: rows per config; default from :func:`default_shape` of the space's target.
        vec_len: columns per row; default likewise.

    Returns:
        ``float32`` array of shape ``(n, max_len, vec_len)``.
    """
    default_len, default_vec = default_shape(space.task.target.kind)
    max_len = default_len if max_len is None else max_len
    vec_len = default_vec if vec_len is None else vec_len
    out = np.zeros((len(configs), max_len, vec_len), dtype=np.float32)
    for i, config in enumerate(configs):
        out[i] = encode_trace(space.trace(tuple(config)), max_len, vec_len)
    return out


class SequenceEncoder:
    """Vectorised :func:`encode_configs` for one space: the same arrays, about 1,000x faster.

    A sketch's trace has a fixed list of instructions; a config only changes the decisions, and
    each decision lands in fixed cells of the encoding (a ``Split`` row's factors, an unroll
    value, a compute-at location). So the encoder probes once per space: per sketch, the
    encoding with every knob at choice 0, then each knob at each of its other choices, which
    gives the cells the knob writes and their value for every choice. Encoding a batch is then a
    copy of the sketch's base plus one gather per knob. The probe costs one exact encoding per
    knob choice (about 800-1,600 on the full presets of the suites, 1-5 s).

    ``verify`` random configs per sketch are checked against the exact encoding after the
    probe; if any differs (a space where one decision moved another's cells), the encoder falls
    back to the exact path (``exact`` is then True), so its output is always exact.

    Args:
        space: a :class:`~tune_gym.space.KnobSpace`.
        max_len, vec_len: as :func:`encode_configs`.
        verify: random configs per sketch checked against the exact encoding.
        seed: seed of those configs.
    """

    def __init__(self, space: Any, max_len: int | None = None, vec_len: int | None = None, verify: int = 16,
                 seed: int = 0) -> None:
        default_len, default_vec = default_shape(space.task.target.kind)
        self.space = space
        self.shape = (default_len if max_len is None else max_len, default_vec if vec_len is None else vec_len)
        self.exact = False
        n_knobs = space.n_knobs
        self._base: list[np.ndarray] = []
        self._cells: list[list[tuple[int, np.ndarray, np.ndarray]]] = []  # per sketch: (knob, cells, values)
        sketch_knob = 0 if space.n_sketches > 1 else -1
        for s in range(space.n_sketches):
            base_cfg = [0] * n_knobs
            if sketch_knob == 0:
                base_cfg[0] = s
            base = self._exact([tuple(base_cfg)])[0].ravel()
            per_knob = []
            for k in space.active(tuple(base_cfg)):
                if k == sketch_knob or len(space.knobs[k]) < 2:
                    continue
                variants = [tuple(base_cfg[:k] + [c] + base_cfg[k + 1:]) for c in range(1, len(space.knobs[k]))]
                enc = self._exact(variants).reshape(len(variants), -1)
                cells = np.flatnonzero((enc != base).any(axis=0))
                if cells.size:
                    per_knob.append((k, cells, np.vstack([base[cells], enc[:, cells]])))
            self._base.append(base)
            self._cells.append(per_knob)
        if verify:
            rng = np.random.default_rng(seed)
            probe = np.asarray(space.sample(rng, verify * space.n_sketches), dtype=np.int64)
            if not np.array_equal(self._fast(probe), self._exact([tuple(c) for c in probe])):
                self.exact = True

    def _exact(self, configs: Sequence[Sequence[int]]) -> np.ndarray:
        return encode_configs(self.space, configs, *self.shape)

    def _fast(self, configs: np.ndarray) -> np.ndarray:
        sketches = self.space.sketches(configs)
        out = np.empty((len(configs), self.shape[0] * self.shape[1]), dtype=np.float32)
        for s in np.unique(sketches):
            rows = np.flatnonzero(sketches == s)
            block = np.repeat(self._base[s][None, :], len(rows), axis=0)
            for k, cells, values in self._cells[s]:
                block[:, cells] = values[configs[rows, k]]
            out[rows] = block
        return out.reshape(len(configs), *self.shape)

    def __call__(self, configs: np.ndarray | Sequence[Sequence[int]]) -> np.ndarray:
        """Encode an ``n x n_knobs`` batch of valid configs: ``float32 (n, max_len, vec_len)``."""
        table = np.asarray(configs, dtype=np.int64).reshape(-1, self.space.n_knobs)
        if self.exact:
            return self._exact([tuple(c) for c in table])
        return self._fast(table)
