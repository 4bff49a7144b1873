"""Tasks: operators, targets, versioned URIs and network suites."""

from tune_gym.tasks.ops import OPS, OpDef, get_op
from tune_gym.tasks.suites import SUITES, Suite, SuiteTask, get_suite, task_by_id
from tune_gym.tasks.targets import TargetSpec, host_cores, host_cpu
from tune_gym.tasks.task import Task

__all__ = [
    "OPS",
    "SUITES",
    "OpDef",
    "Suite",
    "SuiteTask",
    "TargetSpec",
    "Task",
    "get_op",
    "get_suite",
    "host_cores",
    "host_cpu",
    "task_by_id",
]
