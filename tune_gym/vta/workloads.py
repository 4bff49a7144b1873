"""VTA workloads: the DeepBench conv layers of Rieber et al.'s HW-aware study, and ResNet-18's convs.

Suites (task ids ``<suite>:<id>``, registered in :attr:`tune_gym.vta.kind.KIND`'s ``suites``):

* ``deepbench``: the 13 DeepBench inference-server conv layers of the paper's Table II, with
  the paper's ids (``deepbench:3`` ... ``deepbench:107``) and its numbers for each space
  (:attr:`DeepBenchLayer.paper_size`, :attr:`DeepBenchLayer.paper_valid_ratio`). Shapes are the
  table's. The ids follow DeepBench's ``inference_server_set`` (``code/kernels/conv_problems.h``)
  counted from 0 for ids 3-17 and from 1 for ids 42-107 (presumably one more row in the version
  the paper used). One orientation question: the table writes ids 3 and 5 as image 79x341,
  kernel 10x5, while DeepBench's tuple puts the 10 along the 341-wide axis. The paper's space
  size of id 3 (768) needs the table's reading (output 35x169), that of id 5 (3072) needs
  DeepBench's (output 38x166), so each is defined the way that reproduces its size
  (:attr:`DeepBenchLayer.note`).
* ``resnet18_vta``: ResNet-18's convs that VTA runs (all but the first, whose 3 input channels
  are not a multiple of ``BLOCK_IN``: VTA deployments run it on the CPU), with the ids of the ``resnet18``
  suite (``resnet18_vta:1`` is ``resnet18:1`` on VTA) and its weights.

Tasks are ``vta_conv2d`` int8 tasks on a ``vta`` target (default hardware unless another is
given: ``deepbench:3@vta&log_block=5``).
"""

from __future__ import annotations

from dataclasses import dataclass

from tune_gym.errors import TaskError
from tune_gym.tasks.suites import Suite, SuiteTask, get_suite
from tune_gym.tasks.targets import TargetSpec
from tune_gym.tasks.task import Task
from tune_gym.vta.hardware import VTAHardware

__all__ = ["DEEPBENCH", "PAPER_MEAN_VALID_RATIO", "DeepBenchLayer", "deepbench_suite", "deepbench_task",
           "resnet18_vta_suite", "vta_conv_task"]

#: The paper's mean valid ratio over its 13 workloads (Section III).
PAPER_MEAN_VALID_RATIO = 0.083


@dataclass(frozen=True)
class DeepBenchLayer:
    """One conv layer of the study (Table II of Rieber et al.).

    Attributes:
        id: the DeepBench id the paper gives.
        n, k, h, w, kh, kw, c, s, p: batch, output channels, input height and width, kernel
            height and width, input channels, stride, padding (both axes).
        paper_size: the search-space size in Table II.
        paper_valid_ratio: the share of valid configs in Table II (measured on VTA hardware).
        note: how the shape was read where the table is ambiguous.
    """

    id: int
    n: int
    k: int
    h: int
    w: int
    kh: int
    kw: int
    c: int
    s: int
    p: int
    paper_size: int
    paper_valid_ratio: float
    note: str = ""

    def params(self) -> dict[str, int]:
        return {"n": self.n, "c": self.c, "h": self.h, "w": self.w, "k": self.k, "kh": self.kh, "kw": self.kw,
                "sh": self.s, "sw": self.s, "ph": self.p, "pw": self.p}


_L = DeepBenchLayer
#: The 13 workloads of Table II in the paper's order.
DEEPBENCH: tuple[DeepBenchLayer, ...] = (
    _L(3, 1, 32, 79, 341, 10, 5, 32, 2, 0, 768, 0.060,
       "Table II's reading: kernel 10 along the 79-pixel axis (DeepBench's tuple has it along the 341 axis, "
       "which gives a 1024-config space)"),
    _L(5, 4, 32, 79, 341, 5, 10, 32, 2, 0, 3072, 0.068,
       "DeepBench's orientation: kernel 10 along the 341-pixel axis (Table II's reading gives 2304 configs)"),
    _L(8, 1, 64, 12, 120, 3, 3, 32, 1, 1, 9216, 0.067),
    _L(17, 1, 256, 56, 56, 3, 3, 128, 1, 1, 20480, 0.027),
    _L(42, 1, 64, 56, 56, 3, 3, 64, 1, 1, 9216, 0.047),
    _L(48, 1, 1024, 14, 14, 1, 1, 256, 2, 0, 2240, 0.151),
    _L(53, 2, 128, 28, 28, 3, 3, 128, 1, 1, 18433, 0.035),
    _L(59, 2, 512, 7, 7, 1, 1, 2048, 2, 3, 6145, 0.008),
    _L(76, 1, 64, 112, 112, 1, 1, 64, 1, 0, 14400, 0.088),
    _L(78, 1, 64, 56, 56, 1, 1, 256, 1, 0, 15361, 0.099),
    _L(92, 2, 64, 112, 112, 1, 1, 64, 1, 0, 28800, 0.082),
    _L(106, 2, 2048, 14, 14, 1, 1, 1024, 2, 0, 7169, 0.122),
    _L(107, 2, 512, 7, 7, 1, 1, 2048, 1, 0, 6144, 0.231),
)
_BY_ID = {layer.id: layer for layer in DEEPBENCH}


def vta_conv_task(params: dict[str, int], target: str | TargetSpec = "vta") -> Task:
    """A ``vta_conv2d`` int8 task (``params`` as the op names them)."""
    return Task("vta_conv2d", tuple(params.items()), "int8", TargetSpec.coerce(target))


def deepbench_task(layer_id: int, target: str | TargetSpec = "vta") -> Task:
    """The task of one of the study's DeepBench ids."""
    if layer_id not in _BY_ID:
        raise TaskError(f"DeepBench id {layer_id!r} is not one of the study's: {', '.join(map(str, _BY_ID))}")
    return vta_conv_task(_BY_ID[layer_id].params(), target)


def deepbench_suite(target: str | TargetSpec = "vta") -> Suite:
    """The ``deepbench`` suite: the study's 13 layers, ids = DeepBench ids, weight 1 each."""
    tasks = tuple(SuiteTask(deepbench_task(layer.id, target), 1) for layer in DEEPBENCH)
    return Suite("deepbench", "DeepBench inference conv layers of Rieber et al.'s HW-aware VTA study "
                              "(int8, simulated VTA; ids are DeepBench ids)", tasks, ids=tuple(_BY_ID))


def resnet18_vta_suite(target: str | TargetSpec = "vta") -> Suite:
    """The ``resnet18_vta`` suite: ResNet-18's convs that fit VTA, with ``resnet18``'s ids and weights."""
    spec = TargetSpec.coerce(target)
    hw = VTAHardware.from_target(spec)
    tasks, ids = [], []
    for i, st in enumerate(get_suite("resnet18").tasks):
        q = st.task.param_dict
        if st.task.op != "conv2d_nchw" or q["n"] % hw.batch or q["c"] % hw.block_in or q["k"] % hw.block_out:
            continue
        params = {"n": q["n"], "c": q["c"], "h": q["h"], "w": q["w"], "k": q["k"], "kh": q["r"], "kw": q["r"],
                  "sh": q["s"], "sw": q["s"], "ph": q["p"], "pw": q["p"]}
        tasks.append(SuiteTask(vta_conv_task(params, spec), st.weight))
        ids.append(i)
    return Suite("resnet18_vta", "ResNet-18's convs on VTA (int8, simulated; all but the first conv, ids of the "
                                 "resnet18 suite)", tuple(tasks), ids=tuple(ids))
