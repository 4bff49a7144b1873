"""A whole network as tuning tasks: import a PyTorch model into TVM Relax, extract its kernels,
compile it with tuned records.

    >>> from tune_gym.networks import import_network
    >>> net = import_network("resnet18")                 # a model of tune_gym.networks.models
    >>> for t in net.tasks: print(t.weight, t.task.uri, t.anchor)
    >>> lib = net.compile(database)                      # a MetaSchedule database of tuned records

Import: ``torch.export`` of the model in eval mode, TVM's PyTorch frontend
(``from_exported_program``, the weights bound as constants), then the passes MetaSchedule's
network tuning runs before it extracts tasks (``DecomposeOpsForInference``,
``CanonicalizeBindings`` and Relax's ``zero`` pipeline: ``LegalizeOps``, ``AnnotateTIROpPattern``,
``FoldConstant``, ``FuseOps``, ``FuseTIR``). The tasks are MetaSchedule's
``extract_tasks`` of that module: each distinct fused PrimFunc once, with its occurrence count
as ``weight``; each is a :class:`~tune_gym.tasks.prim_func.PrimFuncTask` (``tir://`` URI), so
it has a knob space and runs on every backend like an op-builder task.

Anchors: a fused kernel built around a convolution or a matrix product (``fused_conv2d_add_relu``)
is given the op-builder task of that op (:attr:`NetworkTask.anchor`, e.g. ``conv2d_nchw`` with
the same shapes), read from the kernel's main block. That is how a network's kernels map onto the
hand-written suites (:mod:`tune_gym.tasks.suites`): :func:`suite_mapping`.

Compile: :meth:`Network.compile` runs Relax's ``MetaScheduleApplyDatabase`` over the fused
module, so each kernel with a record in the database is built with the record's schedule and the
others with TVM's default lowering (on CPUs: no schedule, one thread), then ``tvm.compile``.
:meth:`Network.default_build` compiles with no database.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tune_gym.errors import TaskError
from tune_gym.tasks.prim_func import PrimFuncTask, register
from tune_gym.tasks.targets import TargetSpec
from tune_gym.tasks.task import Task

__all__ = ["Network", "NetworkTask", "anchor_task", "import_network", "import_torch", "suite_mapping"]


@dataclass(frozen=True)
class NetworkTask:
    """One distinct kernel of a network: its task, how often the network calls it, and the
    op-builder task of its anchor op (``None`` for kernels without a convolution or matmul)."""

    task: PrimFuncTask
    weight: int
    anchor: Task | None = None

    @property
    def tunable(self) -> bool:
        """True when the kernel's design space has more than one config."""
        from tune_gym.space import KnobSpace

        return KnobSpace.for_task(self.task).size > 1


@dataclass
class Network:
    """A network imported into Relax, with its kernels as tasks.

    Attributes:
        name: the model's name.
        mod: the fused Relax module (weights bound as constants); what is compiled.
        target: the target its tasks are on.
        tasks: the distinct kernels, in MetaSchedule's extraction order.
        inputs: example inputs (numpy arrays) in the order ``main`` takes them.
        model: the PyTorch module it was imported from (eval mode), for the reference output.
        weights: how kernels read the weights (``given`` or ``packed``; :func:`import_network`).
        layout: the convolutions' data layout (``NCHW`` or ``NCHW<n>c``; :func:`import_torch`).
    """

    name: str
    mod: Any
    target: TargetSpec
    tasks: list[NetworkTask]
    inputs: tuple[np.ndarray, ...]
    model: Any = field(default=None, repr=False)
    weights: str = "given"
    layout: str = "NCHW"

    def compile(self, database: Any) -> Any:
        """The network built with ``database``'s records (a Relax ``VMExecutable``).

        Relax's ``MetaScheduleApplyDatabase`` replaces each kernel that has a record with its
        scheduled form (with ``weights="packed"``, ``SplitLayoutRewritePreproc`` then splits each
        kernel's weight layout transform off and ``FoldConstant`` applies it to the constant weights
        at compile time, so inference runs the kernels on pre-packed weights), then ``tvm.compile``
        builds the module. (TVM 0.27's one-call
        ``compile_relax`` builds a network as slow as the untuned one: measured 2.81 vs
        0.21 ms for ``tiny`` with the same database, so it is not used.)
        """
        from tune_gym.tvm_support import tvm

        tv = tvm()
        from tvm import relax

        target = self.target.tvm_target()
        with target, database:
            mod = relax.transform.MetaScheduleApplyDatabase()(self.mod)
        if self.weights == "packed":  # the weight layout transforms, split off and folded into the constants
            passes = [relax.transform.SplitLayoutRewritePreproc(), relax.transform.FoldConstant(),
                      relax.transform.DeadCodeElimination()]
            mod = tv.transform.Sequential(passes)(mod)
        return tv.compile(mod, target=target)

    def applied(self, database: Any) -> list[str]:
        """Names of the kernels that ``database`` gives a schedule (what :meth:`compile` tunes)."""
        from tune_gym.tvm_support import tvm

        tv = tvm()
        import tvm_ffi
        from tvm import relax

        with self.target.tvm_target(), database:
            mod = relax.transform.MetaScheduleApplyDatabase()(self.mod)
        return [gv.name_hint for gv, f in self.mod.functions.items()
                if isinstance(f, tv.tirx.PrimFunc) and not tvm_ffi.structural_equal(f, mod[gv])]

    def tuned_seconds(self, database: Any) -> dict[str, float]:
        """Per kernel that ``database`` has a record for: the mean of that record's measured
        times (seconds), i.e. what the tuner timed the kernel at, alone. Set next to the
        kernel's time inside the network (:func:`tune_gym.networks.timing.profile_executable`),
        it shows what a kernel loses there. Records are found by the kernel's module (its
        task's ``ir_module()``), as tune_gym's and MetaSchedule's databases commit them."""
        target = self.target.tvm_target()
        out: dict[str, float] = {}
        for nt in self.tasks:
            rec = database.query_tuning_record(nt.task.ir_module(), target, "main")
            if rec is not None and rec.run_secs:
                out[nt.task.name] = float(np.mean([float(s) for s in rec.run_secs]))
        return out

    def default_build(self) -> Any:
        """The network built by TVM without tuning records (``tvm.compile``'s default pipeline)."""
        from tune_gym.tvm_support import tvm

        return tvm().compile(self.mod, target=self.target.tvm_target())

    def run(self, executable: Any) -> list[np.ndarray]:
        """The outputs of a built network on :attr:`inputs` (host CPU)."""
        from tune_gym.tvm_support import tvm

        tv = tvm()
        vm = tv.relax.VirtualMachine(executable, tv.cpu())
        out = vm["main"](*(tv.runtime.tensor(x) for x in self.inputs))
        return [np.asarray(o.numpy()) for o in _flatten(out)]

    def torch_outputs(self) -> list[np.ndarray]:
        """PyTorch's outputs of :attr:`model` on :attr:`inputs`."""
        import torch

        with torch.no_grad():
            out = self.model(*(torch.from_numpy(x) for x in self.inputs))
        return [np.asarray(o.numpy()) for o in _flatten(out)]

    def max_rel_error(self, executable: Any, reference: list[np.ndarray] | None = None) -> float:
        """Largest ``|built - PyTorch|`` over the outputs, relative to ``max(1, |PyTorch|)``
        (``reference``: PyTorch's outputs, if already computed)."""
        ref = self.torch_outputs() if reference is None else reference
        return max(float(np.abs(a - b).max() / max(1.0, float(np.abs(b).max())))
                   for a, b in zip(self.run(executable), ref))

    def weighted_flops(self) -> int:
        return sum(t.weight * t.task.flops for t in self.tasks)


def _flatten(out: Any) -> list[Any]:
    if isinstance(out, (list, tuple)) or type(out).__name__ in ("Array", "Tuple"):
        return [y for x in out for y in _flatten(x)]
    return [out]


#: A blocked convolution data layout, ``NCHW<n>c``.
_BLOCKED = re.compile(r"NCHW([1-9][0-9]*)c")


def channel_block(layout: str) -> int:
    """The channel block of a convolution data layout: 0 for ``NCHW``, ``n`` for ``NCHW<n>c``;
    :class:`TaskError` for any other."""
    if layout == "NCHW":
        return 0
    found = _BLOCKED.fullmatch(layout)
    if not found:
        raise TaskError(f"import_network: layout={layout!r}; accepted: NCHW, or NCHW<n>c with a channel block n "
                        "(e.g. NCHW16c)")
    return int(found.group(1))


def import_torch(model: Any, inputs: tuple[Any, ...], layout: str = "NCHW", target: TargetSpec | None = None) -> Any:
    """The fused Relax module of a PyTorch module (eval mode) on example ``inputs`` (tensors).

    ``layout="NCHW<n>c"`` converts every convolution whose input and output channels ``n``
    divides to that blocked layout (Relax's ``ConvertLayout``; weights ``OIHW<n>i<n>o``, folded
    into the constants at compile time): elementwise ops between convolutions follow the layout,
    so a layout transform runs only where the blocked chain starts and ends. Each blocked
    convolution is TOPI's ``conv2d_NCHWc`` compute (:func:`_legalize_blocked_conv2d`, legalized
    under ``target``), the computation of the ``conv2d_nchwc`` op's blocked stage.
    ``ConvertLayout`` leaves grouped (depthwise) convolutions in NCHW, with transforms around
    them."""
    import torch

    from tune_gym.tvm_support import tvm

    tv = tvm()
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    block = channel_block(layout)
    model = model.eval()
    with torch.no_grad():
        exported = torch.export.export(model, tuple(inputs))
    mod = relax.transform.DecomposeOpsForInference()(from_exported_program(exported))
    if block:
        mod = relax.transform.ConvertLayout({"relax.nn.conv2d": [layout, f"OIHW{block}i{block}o"]})(mod)
        mod = relax.transform.EliminateCommonSubexpr()(mod)  # one transform of a tensor two convs read
        with (target or TargetSpec.coerce("llvm")).tvm_target():
            mod = relax.transform.LegalizeOps({"relax.nn.conv2d": _legalize_blocked_conv2d})(mod)
    passes = [relax.transform.CanonicalizeBindings(), relax.get_pipeline("zero")]
    return tv.transform.Sequential(passes)(mod)


def _legalize_blocked_conv2d(bb: Any, call: Any) -> Any:
    """Relax ``nn.conv2d`` in a blocked layout (``NCHW<n>c``) as TOPI's ``conv2d_NCHWc``; a
    convolution in another layout is left to the default legalization."""
    from tvm import topi

    attrs = call.attrs
    if not _BLOCKED.fullmatch(str(attrs.data_layout)):
        return call
    if int(attrs.groups) != 1:
        raise TaskError(f"import_network: a convolution with groups={int(attrs.groups)} has no blocked "
                        f"{attrs.data_layout} kernel here; import with layout='NCHW'")
    data, kernel = call.args
    return bb.call_te(topi.nn.conv2d_NCHWc, data, kernel, [int(x) for x in attrs.strides],
                      [int(x) for x in attrs.padding], [int(x) for x in attrs.dilation], str(attrs.data_layout),
                      str(attrs.out_layout), str(attrs.out_dtype) or "float32", primfunc_name_hint="conv2d_NCHWc")


def import_network(model: str | Any, target: str | TargetSpec = "llvm", seed: int = 0,
                   inputs: tuple[Any, ...] | None = None, name: str | None = None, weights: str = "given",
                   layout: str = "NCHW") -> Network:
    """Import a model and extract its kernels as tasks on ``target``.

    Args:
        model: a name of :data:`tune_gym.networks.models.MODELS` (built with ``seed``), or a
            ``torch.nn.Module`` (then give ``inputs``).
        target: as in a task URI (``"llvm"``, ``"llvm&cores=1"``, ``"cuda"``).
        seed: the seed of a named model's weights and example inputs.
        inputs: example input tensors (a named model's defaults when omitted).
        name: the network's name (default: the model name or the module's class name).
        weights: ``given`` (kernels read the weights as the network passes them) or ``packed``
            (``llvm`` only: weights marked ``layout_free_buffers``, re-laid out per schedule and
            pre-packed at compile time; see :mod:`tune_gym.tasks.prim_func`).
        layout: the convolutions' data layout: ``NCHW`` (PyTorch's), or ``NCHW<n>c`` (``llvm``
            only), channel blocks of ``n`` innermost, the layout vendor libraries compute in
            (:func:`import_torch`).
    """
    from tune_gym.tvm_support import ms

    spec = TargetSpec.coerce(target)
    if isinstance(model, str):
        from tune_gym.networks.models import get_model

        desc = get_model(model)
        name = name or desc.name
        module = desc.build(seed=seed)
        inputs = desc.inputs(seed=seed) if inputs is None else inputs
    else:
        if inputs is None:
            raise TaskError(f"import_network: give example inputs for the module {type(model).__name__}")
        module, name = model, name or type(model).__name__
    if weights not in ("given", "packed"):
        raise TaskError(f"import_network: weights={weights!r}; accepted: given, packed")
    if weights == "packed" and spec.kind != "llvm":
        raise TaskError(f"import_network: weights='packed' needs an llvm target, not {spec.kind}")
    if channel_block(layout) and spec.kind != "llvm":
        raise TaskError(f"import_network: layout={layout!r} needs an llvm target, not {spec.kind}")
    mod = import_torch(module, inputs, layout, spec)
    if weights == "packed":
        from tvm import relax

        with spec.tvm_target():
            mod = relax.transform.AttachAttrLayoutFreeBuffers()(mod)
    extracted = ms().relax_integration.extract_tasks(mod, spec.tvm_target())
    tasks = []
    for ext in extracted:
        task = register(ext.dispatched[0], ext.task_name, spec)
        tasks.append(NetworkTask(task, int(ext.weight), anchor_task(task)))
    arrays = tuple(np.asarray(x.detach().numpy()) for x in inputs)
    return Network(name, mod, spec, tasks, arrays, module, weights, layout)


# ---------------------------------------------------------------------------- anchors
def _blocks(mod: Any) -> list[Any]:
    from tune_gym.tvm_support import tvm

    sch = tvm().s_tir.Schedule(mod)
    out, todo = [], [sch.get_sblock("root")]
    while todo:
        for rv in sch.get_child_blocks(todo.pop(0)):
            out.append(sch.get(rv))
            todo.append(rv)
    return out


def _shape(buffer: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in buffer.shape)


def _stride(size: int, padded: int, kernel: int, out: int) -> int | None:
    """The smallest stride that maps a padded input of ``padded`` onto ``out`` outputs."""
    for s in range(1, max(2, padded) + 1):
        if (padded - kernel) // s + 1 == out:
            return s
    return None


@functools.lru_cache(maxsize=1024)
def anchor_task(task: PrimFuncTask) -> Task | None:
    """The op-builder task of a kernel's convolution or matmul (``None`` if it has none or its
    shapes are not an op-builder task's: a grouped convolution, a non-square image ...)."""
    try:
        return _anchor(task)
    except TaskError:
        return None


def _anchor(task: PrimFuncTask) -> Task | None:
    blocks = {b.name_hint: b for b in _blocks(task.ir_module())}
    target = task.target
    for name in ("conv2d_nchw", "DepthwiseConv2d", "group_conv2d_nchw"):
        if name not in blocks:
            continue
        b = blocks[name]
        extents = [int(v.dom.extent) for v in b.iter_vars]
        n, k, oh, ow = extents[:4]
        padded, weight = (_shape(r.source) for r in b.reads[:2])
        pad = blocks.get("pad_temp") or blocks.get("PaddedInput")
        data = _shape(pad.reads[0].source) if pad is not None else padded
        c, h, w = data[1:]
        r, s_ = weight[2:]
        p = (padded[2] - h) // 2
        if r != s_ or h != w or oh != ow or padded[2] - h != padded[3] - w:
            return None
        stride = _stride(h, padded[2], r, oh)
        if stride is None:
            return None
        if name == "conv2d_nchw":
            return Task.make("conv2d_nchw", target, n=n, c=c, h=h, w=w, k=k, r=r, s=stride, p=p)
        if weight[1] == 1 and k == c:
            return Task.make("depthwise_conv2d_nchw", target, n=n, c=c, h=h, w=w, r=r, s=stride, p=p)
        return None
    for name in ("matmul", "T_matmul_NT", "T_dense"):
        if name not in blocks:
            continue
        extents = [int(v.dom.extent) for v in blocks[name].iter_vars]
        if len(extents) == 3:
            m, n, k = extents
            return Task.make("dense", target, m=m, n=n, k=k)
        if len(extents) >= 4 and all(e == 1 for e in extents[:-4]):
            b, m, n, k = extents[-4:]
            return Task.make("batch_matmul", target, b=b, m=m, n=n, k=k)
    return None


def suite_mapping(network: Network, suite: str | None = None) -> list[dict[str, Any]]:
    """How the network's kernels map onto a hand-written suite (default: the suite of the
    network's name), one row per anchor op task of either side: ``anchor`` (URI), ``network``
    (occurrences in the imported network), ``suite`` (weight in the suite), ``suite_index``
    (the task's index there, or None) and ``kernels`` (names of the fused kernels built on it)."""
    from tune_gym.tasks.suites import get_suite

    name = suite or network.name
    tasks = get_suite(name, network.target).tasks
    suite_weights = {st.task.with_weights("").uri: (i, st.weight) for i, st in enumerate(tasks)}
    counts: Counter[str] = Counter()
    kernels: dict[str, list[str]] = {}
    for nt in network.tasks:
        if nt.anchor is None:
            continue
        uri = nt.anchor.uri
        counts[uri] += nt.weight
        kernels.setdefault(uri, []).append(nt.task.name)
    rows = []
    for uri in [*counts, *(u for u in suite_weights if u not in counts)]:
        index, weight = suite_weights.get(uri, (None, 0))
        rows.append({"anchor": uri, "network": counts.get(uri, 0), "suite": weight, "suite_index": index,
                     "kernels": kernels.get(uri, [])})
    return rows
