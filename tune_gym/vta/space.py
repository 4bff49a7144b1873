"""The knob space of VTA's conv2d template, as a :class:`~tune_gym.space.KnobSpace`.

Knobs, in order (VTA's AutoTVM template ``vta/python/vta/top/vta_conv2d.py`` plus the loop
permutations that Rieber et al. added):

=============== =========== ==============================================================
knob            kind        choices
=============== =========== ==============================================================
``tile_b``      split       ``(outer, inner)`` factor pairs of the packed batch ``N/BATCH``
``tile_h``      split       ... of the output rows ``OH``
``tile_w``      split       ... of the output columns ``OW``
``tile_ci``     split       ... of the input-channel blocks ``C/BLOCK_IN``
``tile_co``     split       ... of the output-channel blocks ``K/BLOCK_OUT``
``h_threading`` categorical virtual threads over the row tiles: 1, 2 (template: ``h_nthread``)
``oc_threading`` categorical ... over the output-channel tiles: 1, 2 (``oc_nthread``)
``loop_order``  categorical 0-3, the GEMM loop order (:data:`~tune_gym.vta.model.LOOP_ORDERS`);
                            ``full`` preset only
=============== =========== ==============================================================

Split choices are every ordered pair of positive factors (AutoTVM's ``define_split`` default
policy), in the order of :func:`~tune_gym.space.perfect_tiles` (outer factor ascending); the
inner factor is the tile. Presets: ``full`` is the paper's template (with ``loop_order``),
``compact`` the upstream one (loop order 0 fixed), a quarter the size; there is no ``medium``. The template defines
``tile_b`` but never applies it; here, like the other tiles, its inner factor is the batch tile
of one output tile (the batch rows computed together).

A config is valid when :func:`~tune_gym.vta.model.violations` finds nothing; validity is exact
and cheap (no build), so :meth:`VTASpace.is_valid` serves presampling like a compile-time
check. There is no TVM schedule behind a config: :meth:`VTASpace.trace` and the other schedule
methods raise :class:`SpaceError`.

Example:
    >>> space = KnobSpace.for_task(Task.parse("deepbench:3"))   # a VTASpace
    >>> space.size, space.plan(space.config(0)), space.violation(space.config(0))
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from tune_gym.errors import SpaceError
from tune_gym.space import PRESETS, Config, Knob, ScheduleFreeSpace, perfect_tiles
from tune_gym.tasks.task import Task
from tune_gym.vta.model import (
    LOOP_ORDERS,
    Violation,
    VTAConv,
    VTAEstimate,
    VTAPlan,
    VTATiming,
    estimate,
    violations,
)

__all__ = ["THREAD_CHOICES", "VTASpace"]

#: Virtual-thread choices of ``h_threading`` and ``oc_threading`` (the template's ``[1, 2]``).
THREAD_CHOICES = (1, 2)


class VTASpace(ScheduleFreeSpace):
    """The conv2d template space of a ``vta_conv2d`` task (see the module docstring).

    Build with :meth:`for_task` (or :meth:`KnobSpace.for_task`, which dispatches here for
    ``vta`` targets); cached per process.

    Attributes:
        conv: the task's conv in packed units, with its hardware (:class:`VTAConv`).
    """

    no_schedule_hint = ("the vta target is simulated, so a config has no TVM {what}; use VTASpace.plan / violation / "
                        "estimate (and observation='knobs' in Tune-v0)")

    def __init__(self, task: Task, preset: str = "full") -> None:
        if task.target.kind != "vta":
            raise SpaceError(f"VTASpace is for tasks on target vta, not {task.target.kind} ({task.uri})")
        if preset not in PRESETS:
            raise SpaceError(f"unknown space preset {preset!r}; known: {', '.join(PRESETS)}")
        if preset == "medium":
            raise SpaceError(f"{task.uri}: the VTA template has presets full and compact only (medium is a CPU "
                             "rule set of MetaSchedule spaces)")
        self.conv = VTAConv.from_task(task)
        c = self.conv
        knobs = [
            Knob("tile_b", "split", perfect_tiles(c.nb, 2, 0)),
            Knob("tile_h", "split", perfect_tiles(c.oh, 2, 0)),
            Knob("tile_w", "split", perfect_tiles(c.ow, 2, 0)),
            Knob("tile_ci", "split", perfect_tiles(c.nci, 2, 0)),
            Knob("tile_co", "split", perfect_tiles(c.nco, 2, 0)),
            Knob("h_threading", "categorical", THREAD_CHOICES),
            Knob("oc_threading", "categorical", THREAD_CHOICES),
        ]
        if preset == "full":
            knobs.append(Knob("loop_order", "categorical", tuple(range(len(LOOP_ORDERS)))))
        self._init_one_sketch(task, preset, knobs)
        self.mod = None  # no TVM module: the target is simulated
        self.target = None

    @classmethod
    def for_task(cls, task: Task, preset: str = "full") -> VTASpace:
        """The space of ``task`` (built once per process and preset)."""
        return _cached_vta_space(task, preset)

    def __repr__(self) -> str:
        knobs = ", ".join(f"{k.name}:{len(k)}" for k in self.knobs)
        return f"VTASpace({self.task.uri}, preset={self.preset}, size={self.size}, knobs=[{knobs}])"

    # ------------------------------------------------------------------ decisions
    def plan(self, config: Sequence[Any]) -> VTAPlan:
        """The tiles, threads and loop order of a config (checked; SpaceError names a bad knob)."""
        values = self.to_dict(self.check(config))
        return VTAPlan(
            b=values["tile_b"][1], h=values["tile_h"][1], w=values["tile_w"][1], ci=values["tile_ci"][1],
            co=values["tile_co"][1], h_threads=values["h_threading"], oc_threads=values["oc_threading"],
            loop_order=values.get("loop_order", 0),
        )

    def violations(self, config: Sequence[Any]) -> list[Violation]:
        """Every validity rule the config breaks (:func:`tune_gym.vta.model.violations`)."""
        return violations(self.conv, self.plan(config))

    def violation(self, config: Sequence[Any]) -> Violation | None:
        """The first rule the config breaks, ``None`` for a valid config."""
        found = violations(self.conv, self.plan(config), first=True)
        return found[0] if found else None

    def is_valid(self, config: Config) -> bool:
        """True when the config fits the simulated VTA (exact; no build, microseconds)."""
        return self.violation(config) is None

    def estimate(self, config: Sequence[Any], timing: VTATiming | None = None) -> VTAEstimate:
        """Simulated latency of a valid config (ValueError for an invalid one)."""
        return estimate(self.conv, self.plan(config), timing)



@functools.lru_cache(maxsize=64)
def _cached_vta_space(task: Task, preset: str) -> VTASpace:
    return VTASpace(task, preset)
