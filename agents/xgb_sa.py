"""``xgb-sa`` and ``xgb-sa-transfer``: AutoTVM's XGBoost tuner (paper: TVM / AutoTVM, 2018).

Follows TVM's ``python/tvm/autotvm/tuner/xgboost_tuner.py`` (``XGBTuner``),
``model_based_tuner.py`` (``ModelBasedTuner``), ``xgboost_cost_model.py`` and
``sa_model_optimizer.py``:

* plans of ``plan_size`` = 64 configs, the last 5% of each random (``next_batch``); the model is
  refitted after every plan on all measurements, invalid configs as throughput 0; until the
  first fit the plan is random;
* cost model :class:`~agents.models.xgb.XGBModel`: ``rank:pairwise``, AutoTVM's tree
  parameters, up to 8000 rounds with early stopping (20 rounds) on the training set's
  average recall@plan_size;
* search: simulated annealing over the model, 128 parallel points that start random and
  persist between rounds, up to 500 steps, early stop after 50 steps without a change of the
  top set, temperature 1 -> 0 (:class:`~agents.optimizers.sa.SimulatedAnnealing`).

Features (``features``): ``"knob"`` (default), ``"itervar"`` or ``"loop"``. AutoTVM's
``XGBTuner`` defaults to ``"itervar"`` and says "'itervar' is more accurate but 'knob' is much
faster". Measured here (2-core dev machine, shared with other jobs): an uncached itervar row
costs 1.6 ms on a 32x32x32 dense (compact) and 12 ms on resnet18:1 (full), 11 ms of which is
``space.apply`` (replaying the trace and the postprocs); a cached row 6-17 us; a knob row
0.1-0.3 us. One xgb-sa round on resnet18:1 (full) scored 54,674 distinct configs (500 SA
steps): 2.1 s with knob features, fit included, versus about 11 minutes of itervar extraction
(AutoTVM spread that cost over a process pool of all cores and cached it per config index,
as :mod:`agents.models.itervar` caches per config). Hence the default is ``"knob"``;
``features="itervar"`` gives AutoTVM's default model, affordable on small compact spaces
(every config is extracted at most once: 200 dense configs cost 0.3 s in all).

Transfer (``xgb-sa-transfer``, ``ModelBasedTuner.load_history`` + ``fit_log``): see
:class:`XGBTransferAgent`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from agents.base import register
from agents.model_based import (
    EPS,
    INVALID_OPTION,
    N_INIT,
    PLAN_SIZE,
    SA_EARLY_STOP,
    SA_POINTS,
    SA_STEPS,
    ModelGuidedAgent,
    make_sa,
)
from agents.models.features import KnobFeaturizer, loop_features
from agents.models.itervar import ItervarFeaturizer, ItervarLayout, raw_itervar
from agents.models.xgb import (
    FIT_MAX_ROUNDS,
    FIT_STOPPING_ROUNDS,
    LOSS,
    MAX_ROUNDS,
    NTHREAD,
    NUM_ROUNDS,
    STOPPING_ROUNDS,
    XGBModel,
)
from tune_gym.options import Check, Choice, Int, OptionError, show
from tune_gym.space import KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["FEATURES", "XGBSAAgent", "XGBTransferAgent"]

FEATURES = ("knob", "itervar", "loop")


@register("xgb-sa", "AutoTVM: XGBoost rank model on knob features + simulated annealing, 5% random")
class XGBSAAgent(ModelGuidedAgent):
    """AutoTVM's XGBTuner. Its defaults are AutoTVM's (plan_size 64, eps 0.05, SA's
    ``parallel_size`` 128, ``n_iter`` 500, ``early_stop`` 50, XGBoost up to 8000 rounds stopping
    after 20), except ``features`` (see the module docstring) and ``nthread`` (1, not all cores:
    the models are the same, and on these few hundred rows one thread trains faster, 1.5 vs
    4-20 ms per boosting round on the 2-core dev machine). Options: ``tune-gym agents xgb-sa``.
    """

    def __init__(self, plan_size: Annotated[int, PLAN_SIZE] = 64, eps: Annotated[float, EPS] = 0.05,
                 features: Annotated[str, Choice(FEATURES, help="the model's input: 'knob' (cheap), 'itervar' "
                                                 "(AutoTVM's default) or 'loop' (MetaSchedule's per-store "
                                                 "features); the last two cost milliseconds per config")] = "knob",
                 loss: Annotated[str, LOSS] = "rank", num_rounds: Annotated[int | None, NUM_ROUNDS] = None,
                 max_rounds: Annotated[int, MAX_ROUNDS] = FIT_MAX_ROUNDS,
                 stopping_rounds: Annotated[int, STOPPING_ROUNDS] = FIT_STOPPING_ROUNDS,
                 invalid: Annotated[str, INVALID_OPTION] = "zero", sa_points: Annotated[int, SA_POINTS] = 128,
                 sa_steps: Annotated[int, SA_STEPS] = 500, sa_early_stop: Annotated[int, SA_EARLY_STOP] = 50,
                 n_init: Annotated[int | None, N_INIT] = None, nthread: Annotated[int | None, NTHREAD] = 1) -> None:
        super().__init__(plan_size, eps, n_init, invalid, make_sa(sa_points, sa_steps, sa_early_stop))
        self.features = features
        self.needs_schedules = self.features != "knob"  # the other features read the TVM program
        self.loss, self.num_rounds, self.nthread = loss, num_rounds, nthread
        self.max_rounds, self.stopping_rounds = max_rounds, stopping_rounds

    def new_model(self, seed: int) -> XGBModel:
        """An unfitted cost model with this agent's settings."""
        return XGBModel(self.loss, self.num_rounds, seed=seed, nthread=self.nthread, max_rounds=self.max_rounds,
                        stopping_rounds=self.stopping_rounds, plan_size=self.plan_size)

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        self.model = self.new_model(int(self.rng.integers(2**31)))
        self._featurizer = self.make_featurizer(space)

    def make_featurizer(self, space: KnobSpace) -> Any:
        """The ``configs -> features`` function of ``self.features`` for ``space``."""
        if self.features == "knob":
            return KnobFeaturizer(space)
        if self.features == "itervar":
            return ItervarFeaturizer(space)
        return lambda configs: loop_features(space, [tuple(int(v) for v in c) for c in configs])

    def featurize(self, configs: np.ndarray) -> np.ndarray:
        return np.asarray(self._featurizer(np.asarray(configs, dtype=np.int64)))

    def fit(self, configs: np.ndarray, y: np.ndarray) -> bool:
        if y.max() <= 1e-6:  # AutoTVM fits only once some config ran (flops_max > 1e-6)
            return False
        self.model.fit(self.featurize(configs), y, self.plan_size)
        return True

    def score(self, configs: np.ndarray) -> np.ndarray:
        return self.model.predict(self.featurize(configs))


@register("xgb-sa-transfer", "AutoTVM transfer: XGBoost base model from other tasks' records of the same op")
class XGBTransferAgent(XGBSAAgent):
    """``xgb-sa`` whose model starts from records of other tasks (AutoTVM's ``load_history``).

    * Records are those of the same op on the same target kind (``Task.op``,
      ``target.kind``; AutoTVM: ``inp.task.name == self.task.name``, a name such as
      ``conv2d_nchw.x86`` that names one template of one target, across shapes), minus the
      task being tuned (that would not be transfer; AutoTVM kept them). Failed measurements
      count, as throughput 0.
    * With fewer than ``min_seed_records`` usable records nothing is transferred: a warning
      says so and :attr:`transfer_status` tells why (AutoTVM: ``min_seed_records=500``).
    * The base model is trained as AutoTVM's ``fit_log``: all records one ranking group,
      normalized by their common best, up to 400 rounds with early stopping (100) on the
      average recall@(2 * plan_size).
    * The first plan is simulated annealing on the base model (the rest as ``xgb-sa``, with
      the full SA). Afterwards each fit adds the base model's margin scaled by
      ``1 / 2 ** (n / 64)`` (n measurements of this task), dropped below 0.05, i.e. after
      277 measurements.

    Features: ``"knob"`` (default) maps other tasks' records onto this task's knobs by name
    from the records' knob values (no space is built for the source tasks); a knob that a
    record lacks is missing (NaN). Knob names agree across shapes of one op here (they come
    from the op's loop names: e.g. both conv2d shapes of the tests have sketch, tile_n,
    tile_f, tile_y, tile_x, unroll_explicit), and their values (tile sizes, unroll steps) mean
    the same things, which is what AutoTVM's "knob" features assume. ``"itervar"``
    (AutoTVM's default; one layout covering the sources and this task) and ``"loop"`` also
    work but cost milliseconds per config (see :mod:`agents.xgb_sa`), on every source
    record too. Its other options are :class:`XGBSAAgent`'s.

    ``records``: a bare file name that is not a path here is looked up in the dataset catalog's
    directories; ``"catalog"`` is every dataset of the catalog (as the catalog grows, so does the
    transfer: list files for a reproducible benchmark). Only records of other tasks of the same
    op and target are used. Options: ``tune-gym agents xgb-sa-transfer``.
    """

    def __init__(self, records: Annotated[str | Path | Sequence[str | Path],
                                          Check(_check_records, "'catalog', a file or a list of files",
                                                help="record files (.jsonl) or datasets (.parquet) of other tasks "
                                                     "to transfer from, or 'catalog'")] = (),
                 min_seed_records: Annotated[int, Int(0, help="fewest usable records to transfer from (AutoTVM: "
                                                         "500)")] = 500,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.from_catalog = records == "catalog"
        self.record_paths = [] if self.from_catalog else _record_paths(records)
        self.min_seed_records = min_seed_records

    def make_featurizer(self, space: KnobSpace) -> Any:
        if self.features == "knob":
            return KnobFeaturizer(space, inactive_nan=True)
        return super().make_featurizer(space)

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        self.base: XGBModel | None = None
        self.n_transfer_records = 0
        self.transfer_status = "no records given"
        self._pretrain()
        self.model.base = self.base
        self.fitted = self.base is not None  # the first plan is SA on the base model

    def _source_records(self) -> list[Any]:
        family: dict[str, tuple[str, str] | None] = {}  # task URI -> (op, target kind)
        mine = (self.task.op, self.task.target.kind)
        out = []
        for rec in self._all_records():
            if rec.task not in family:
                try:
                    task = Task.from_uri(rec.task)
                    family[rec.task] = (task.op, task.target.kind)
                except Exception:  # an unknown op or URI: not this op family
                    family[rec.task] = None
            if rec.task != self.task.uri and family[rec.task] == mine:
                out.append(rec)
        return out

    def _all_records(self) -> Iterator[Any]:
        from tune_gym.datasets import load_dataset
        from tune_gym.records import load_records

        paths = [_resolve(p) for p in self.record_paths]
        if self.from_catalog:
            from tune_gym.datasets.catalog import catalog

            paths = [e.path for e in catalog() if e.task != self.task.uri and _family(e.task) == _family(self.task.uri)]
        for path in paths:
            yield from (load_dataset(path, verify=False).to_records() if path.suffix == ".parquet"
                        else load_records(path))

    def _pretrain(self) -> None:
        records = self._source_records()
        self.n_transfer_records = len(records)
        if len(records) < self.min_seed_records:
            if self.record_paths or self.from_catalog:
                self.transfer_status = (f"no transfer: {len(records)} records of other {self.task.op} tasks, "
                                        f"fewer than min_seed_records={self.min_seed_records}")
                warnings.warn(f"xgb-sa-transfer: {self.transfer_status}", stacklevel=2)
            return
        x = self._source_features(records)
        y = np.array([r.result.gflops if r.result.ok else 0.0 for r in records])
        if y.max() <= 1e-6:
            self.transfer_status = "no transfer: no source record ran"
            warnings.warn(f"xgb-sa-transfer: {self.transfer_status}", stacklevel=2)
            return
        self.base = self.new_model(self.model.seed).fit_log(x, y, self.plan_size)
        self.transfer_status = f"transferred from {len(records)} records"

    def _source_features(self, records: list[Any]) -> np.ndarray:
        if self.features == "knob":
            return np.asarray(self._featurizer.from_knobs([r.knobs for r in records]))
        groups: dict[tuple[str, str], list[Any]] = {}
        for r in records:
            groups.setdefault((r.task, r.preset), []).append(r)
        spaces = {key: KnobSpace.for_task(Task.from_uri(key[0]), key[1]) for key in groups}
        if self.features == "loop":
            rows = {id(r): row for key, recs in groups.items()
                    for r, row in zip(recs, loop_features(spaces[key], [tuple(r.config) for r in recs]))}
            return np.stack([rows[id(r)] for r in records])
        # itervar: one layout for the sources and this task (loop rows: the most; access slots: all)
        raws = {id(r): raw_itervar(spaces[(r.task, r.preset)], tuple(r.config)) for r in records}
        own = self._featurizer.layout
        layout = ItervarLayout(
            max([own.n_loops] + [len(v.loops) for v in raws.values() if v is not None]),
            tuple(sorted(set(own.keys).union(*(v.keys for v in raws.values() if v is not None)))))
        self._featurizer = ItervarFeaturizer(self.space, layout)
        return np.stack([layout.flatten(raws[id(r)]) for r in records])


def _family(uri: str) -> tuple[str, str]:
    """``(op, target kind)`` of a task URI: the records a transfer model may learn from."""
    task = Task.from_uri(uri)
    return task.op, task.target.kind


def _resolve(path: Path) -> Path:
    """``path``, or a bare file name found in the dataset catalog's directories."""
    if path.exists() or path.parent != Path("."):
        return path
    from tune_gym.datasets.catalog import data_dirs

    return next((d / path.name for d in data_dirs() if (d / path.name).exists()), path)


def _record_paths(records: Any) -> list[Path]:
    """The ``records`` option of ``xgb-sa-transfer`` as paths: a path, or a list of paths."""
    items = [records] if isinstance(records, (str, Path)) else records
    if not isinstance(items, (list, tuple)) or not all(isinstance(p, (str, Path)) and str(p) for p in items):
        raise OptionError(f"records must be 'catalog', a record or dataset file, or a list of them, "
                          f"got {show(records)}")
    return [Path(p) for p in items]


def _check_records(name: str, records: Any) -> Any:
    """The ``records`` option, checked: ``"catalog"``, or what :func:`_record_paths` takes."""
    if records != "catalog":
        _record_paths(records)
    return records
