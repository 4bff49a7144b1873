"""The ``kt`` target kind as the core sees it (:class:`tune_gym.kinds.TaskKind`): spaces measured
with Kernel Tuner, as tasks that are replayed from the files.

* tasks: ``kt://<kernel>/<device>?digest=...&spec=...&target=kt`` (:mod:`tune_gym.external.task`);
* space: :class:`tune_gym.external.space.KTSpace` (the T1 problem's parameters and restrictions);
* data: :func:`tune_gym.external.replay.kt_dataset`, which the core ``replay`` (and
  ``surrogate``) backend serves; the kind has no backend of its own (nothing is measured here);
* suite: ``external`` (:func:`tune_gym.external.suite.external_suite`);
* observation ``knobs`` (there is no TVM program behind a config).

This module imports only :mod:`tune_gym.kinds`; everything it names is imported on first use.
"""

from __future__ import annotations

from tune_gym.kinds import TaskKind

__all__ = ["KIND"]

KIND = TaskKind(
    name="kt",
    summary="spaces measured with Kernel Tuner (cache or T4 file + T1 problem), replayed from the files "
            "(tune_gym.external)",
    space="tune_gym.external.space:KTSpace.for_task",
    uri_schemes={"kt://": "tune_gym.external.task:parse_uri"},
    suites={"external": "tune_gym.external.suite:external_suite"},
    dataset="tune_gym.external.replay:kt_dataset",
    default_observation="knobs",
    has_schedules=False,
    no_tvm_target="is a space measured with Kernel Tuner on another machine; it has no TVM target. Replay it "
                  "(backend='replay') from its files.",
    is_gpu=True,
)
