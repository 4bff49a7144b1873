"""Tasks: operators, targets, versioned URIs and network suites.

Every task is checked when it is made (:mod:`tune_gym.tasks.task` lists the checks): shape
parameters and output dimensions up to ``MAX_DIM = 2**16``, at most ``MAX_ELEMENTS = 2**28``
tensor elements and ``MAX_FLOPS = 2**40`` FLOPs per call, the ops' shape rules
(:mod:`tune_gym.tasks.ops`), and target options in range (:mod:`tune_gym.tasks.targets`).
A network's fused kernels are tasks too (:class:`PrimFuncTask`, ``tir://`` URIs,
:mod:`tune_gym.tasks.prim_func`).
"""

from tune_gym.tasks.ops import MAX_DIM, MAX_ELEMENTS, MAX_FLOPS, OPS, OpDef, get_op
from tune_gym.tasks.prim_func import PrimFuncTask
from tune_gym.tasks.suites import SUITES, Suite, SuiteTask, get_suite, suite_names, task_by_id
from tune_gym.tasks.targets import MAX_CORES, TargetSpec
from tune_gym.tasks.task import Task

__all__ = [
    "MAX_CORES",
    "MAX_DIM",
    "MAX_ELEMENTS",
    "MAX_FLOPS",
    "OPS",
    "SUITES",
    "OpDef",
    "PrimFuncTask",
    "Suite",
    "SuiteTask",
    "TargetSpec",
    "Task",
    "get_op",
    "get_suite",
    "suite_names",
    "task_by_id",
]
