"""Surrogate: a model fitted on a task's dataset answers ANY config of its knob space.

A dataset (:mod:`tune_gym.datasets`) holds some, often all, configs of one task's space.
Replay (:mod:`tune_gym.measure.replay`) answers exactly those; the surrogate answers every
config, recorded or not, with a prediction, so agents can run against spaces too large to
measure exhaustively (and replay can use it as its ``fallback``).

The model (:class:`SurrogateModel`), fitted per (task, preset):

* **Features** (:class:`KnobFeatures`): per knob, split knobs give ``log2`` of each tile
  factor, categorical knobs ``log2(1 + value)`` (e.g. the unroll step), compute-at knobs the
  location index, and the sketch knob and nominal knobs (unordered values) a one-hot; knobs
  the config's sketch does not use are 0; plus the log2 tile volume of each tiling level
  (summed over split knobs). A whole batch is featurized with a few NumPy lookups.
* **Cost**: XGBoost regression of ``log(mean seconds per call)`` on the successful rows.
* **Failures**: when the dataset has failed rows (and successful ones), an XGBoost
  classifier of failed vs ok; a config with predicted failure probability >= 0.5 comes back
  as a failure of the dataset's most common error kind, with message
  ``"surrogate: predicted to fail (p=0.87)"``.
* **Noise** (``noise=True``): each of the dataset's usual number of repeats costs
  ``prediction x r``, where ``r`` is drawn from the pooled relative deviations of recorded
  repeats from their row's mean (``costs / mean(costs)`` of every successful row). The
  draw is a hash of ``(seed, config, repeat)`` (SplitMix64), so a config always gets the
  same answer from the same seed, in whatever order or batch it is asked; another seed
  gives other noise (the fitted model is the same). ``noise=False`` returns the prediction
  itself for every repeat.
* **Drift** (``drift=s``, default 0): a host whose speed wanders between measurements (on
  shared or virtual machines a kernel's time can move by 2x between runs minutes apart). Each
  measurement of a config scales all its repeats by one factor ``exp(s * z)``, ``z`` a standard
  normal drawn from a hash of ``(seed, config, n)`` (Box-Muller on two SplitMix64 draws), ``n``
  the number of times this backend measured the config before: averaging repeats does not
  remove it, measuring again draws afresh, and the n-th measurement of a config is the same in
  whatever order or batch it comes. The fastest of many such measurements is often a lucky one
  (the winner's curse): :meth:`SurrogateModel.predict` gives the noise-free cost of the configs
  a tuner picked, which is how ``benchmarks/network_track.py --drift`` scores them.
* **Simulated clock**: a predicted success takes the median ``build_secs`` and
  ``run_secs`` of the dataset's successful rows, a predicted failure those of its failed
  rows, so sessions on the surrogate advance a plausible tuning clock.

Hyperparameters are fixed (:data:`REGRESSOR_PARAMS`, :data:`CLASSIFIER_PARAMS`); XGBoost
runs single-threaded (``nthread=1``) without row or column subsampling, so fits are
deterministic.

Fidelity: :func:`fidelity` fits the model on a seeded split of the rows and reports, on the
held-out successful rows, the Spearman rank correlation of predicted and measured cost,
the recall of the held-out top 1% / 5% / 10% configs within the predicted top 1% / 5% / 10%, the
median relative error, and the failure accuracy on all held-out rows.
:class:`SurrogateBackend` computes this report (holdout 0.2) whenever it fits a model
(:meth:`SurrogateBackend.report`), then fits the model it serves on all rows. Measured on
the committed data (holdout 0.2, seed 0): ``resnet18_7_compact`` (640 configs) Spearman
0.94, top-5% recall 0.86, top-10% recall 0.77, median relative error 5%; the tiny dense
dataset of the tests (200 configs) Spearman 0.93; the other committed conv2d datasets
0.77-0.98 (the 160-config ones, with 32 held-out rows, vary most). Good enough to rank
schedules and to study search behaviour; the predicted optimum is not a measurement, so
results on the surrogate are no substitute for replayed or live numbers.

Speed (one core, loaded machine): about 1e5 configs/s in batches of 4096 and 1e4 in
batches of 8 (XGBoost's per-call overhead dominates small batches). Fitting a 640-row
dataset (report and final model) takes well under a second.

Example:
    >>> backend = SurrogateBackend("benchmarks/datasets/resnet18_7_compact.parquet", seed=0)
    >>> backend.measure(task, space, space.sample(np.random.default_rng(0), 4096))
    >>> backend.report(task, "compact")  # {"spearman": 0.94, "top_5pct_recall": 0.86, ...}
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np

from tune_gym.datasets.source import DATA
from tune_gym.errors import TuneGymError
from tune_gym.measure.base import Backend
from tune_gym.measure.reference import Reference
from tune_gym.measure.result import MeasureResult
from tune_gym.options import Bool, Float, Int, checked_options
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["CLASSIFIER_PARAMS", "REGRESSOR_PARAMS", "KnobFeatures", "SurrogateBackend", "SurrogateModel",
           "fidelity"]

#: XGBoost parameters of the cost regressor (target: log seconds per call).
REGRESSOR_PARAMS: dict[str, Any] = {
    "objective": "reg:squarederror", "eta": 0.1, "max_depth": 8, "min_child_weight": 1.0,
    "lambda": 1.0, "tree_method": "hist", "nthread": 1, "num_boost_round": 300,
}
#: XGBoost parameters of the failure classifier (target: 1 = failed).
CLASSIFIER_PARAMS: dict[str, Any] = {
    "objective": "binary:logistic", "eta": 0.1, "max_depth": 6, "min_child_weight": 1.0,
    "lambda": 1.0, "tree_method": "hist", "nthread": 1, "num_boost_round": 100,
}
#: Failure probability from which a config is predicted to fail.
FAIL_THRESHOLD = 0.5


# ---------------------------------------------------------------------- features
class KnobFeatures:
    """``configs (n x n_knobs ints) -> features (n x dim float32)``, one lookup table per knob.

    Columns, knob by knob: split knobs ``log2`` of each factor; categorical knobs
    ``log2(1 + value)`` (or the value itself when a choice is negative); compute-at knobs the
    location index; the sketch knob a one-hot over sketches, a nominal knob (strings,
    booleans) a one-hot over its choices. The columns of knobs that a config's sketch does
    not use are 0. Then one column per tile level: the log2 tile volume
    at that level (level 0 sums the innermost factor of every split knob, level 1 the next),
    an interaction trees would otherwise need many splits to express (it raises the held-out
    Spearman of the committed conv2d datasets by about 0.02).
    """

    def __init__(self, space: KnobSpace) -> None:
        self.space = space
        self.tables: list[np.ndarray] = []  # knob -> (choices x width) feature rows
        for knob in space.knobs:
            if knob.kind == "split":
                table = np.log2(np.array(knob.choices, dtype=np.float64).reshape(len(knob), -1))
            elif knob.kind in ("sketch", "nominal"):  # unordered choices: one-hot
                table = np.eye(len(knob))
            elif knob.kind == "categorical" and min(knob.choices) >= 0:
                table = np.log2(1.0 + np.array(knob.choices, dtype=np.float64))[:, None]
            else:  # compute_at (location indices), categorical with negative values
                table = np.array(knob.choices, dtype=np.float64)[:, None]
            self.tables.append(table.astype(np.float32))
        widths = [t.shape[1] for t in self.tables]
        #: sketch x knob column: 1 where the sketch uses the column's knob, else 0.
        self.active_columns = np.repeat(space.active_mask, widths, axis=1).astype(np.float32)
        # Tile volumes: level l (0 = innermost) sums log2 of the l-th innermost factor of every split knob.
        split_widths = [w for w, k in zip(widths, space.knobs) if k.kind == "split"]
        self.volume = np.zeros((sum(widths), max(split_widths, default=0)), dtype=np.float32)
        start = 0
        for width, knob in zip(widths, space.knobs):
            if knob.kind == "split":
                for level in range(width):
                    self.volume[start + width - 1 - level, level] = 1.0
            start += width
        self.dim = sum(widths) + self.volume.shape[1]

    def __call__(self, configs: np.ndarray | Sequence[Config]) -> np.ndarray:
        idx = np.asarray(configs, dtype=np.int64).reshape(-1, len(self.tables))
        knobs = np.concatenate([table[idx[:, j]] for j, table in enumerate(self.tables)], axis=1)
        knobs *= self.active_columns[self.space.sketches(idx)]
        return np.concatenate([knobs, knobs @ self.volume], axis=1)


# ---------------------------------------------------------------------- training data
@dataclass
class _Rows:
    """The rows a model is fitted on: the datasets of one (task, preset), merged."""

    configs: np.ndarray  # n x n_knobs
    costs: list[tuple[float, ...]]
    error: list[str | None]
    build_secs: np.ndarray
    run_secs: np.ndarray

    @classmethod
    def merge(cls, datasets: Sequence[Any]) -> _Rows:
        """The rows of ``datasets``; a config recorded twice keeps its first row."""
        configs = np.concatenate([ds.configs for ds in datasets]).astype(np.int64)
        _, first = np.unique(configs, axis=0, return_index=True)
        first = np.sort(first)
        costs = [c for ds in datasets for c in ds.costs]
        error = [e for ds in datasets for e in ds.error]
        build = np.concatenate([ds.build_secs for ds in datasets])
        run = np.concatenate([ds.run_secs for ds in datasets])
        return cls(configs[first], [costs[i] for i in first], [error[i] for i in first], build[first], run[first])

    def take(self, rows: np.ndarray) -> _Rows:
        return _Rows(self.configs[rows], [self.costs[i] for i in rows], [self.error[i] for i in rows],
                     self.build_secs[rows], self.run_secs[rows])

    @property
    def ok(self) -> np.ndarray:
        return np.array([e is None and len(c) > 0 for c, e in zip(self.costs, self.error)], dtype=bool)

    @property
    def mean_cost(self) -> np.ndarray:
        """Mean seconds per call of each row (``inf`` for failed rows)."""
        return np.array([sum(c) / len(c) if ok else math.inf for c, ok in zip(self.costs, self.ok)])


def _train(params: dict[str, Any], x: np.ndarray, y: np.ndarray, seed: int) -> Any:
    import xgboost as xgb

    params = dict(params)
    rounds = params.pop("num_boost_round")
    return xgb.train({**params, "seed": seed, "verbosity": 0}, xgb.DMatrix(x, label=y), num_boost_round=rounds)


# ---------------------------------------------------------------------- the model
class SurrogateModel:
    """Cost and failure models of one (task, preset), fitted on its dataset(s).

    Args:
        dataset: a :class:`tune_gym.datasets.Dataset`, or a list of datasets of the same
            task, preset and space fingerprint (merged; the first row of a config wins).
        seed: XGBoost's seed (the fit is deterministic anyway) and the default noise seed.

    Attributes:
        space, task, preset, fingerprint: what the data was recorded on.
        flops: FLOPs of one call of the task.
        error_kind: the dataset's most common error kind (the kind of predicted failures).
        repeats: the number of repeats of a predicted result (the dataset's most common).
        deviations: the pooled relative deviations ``cost / row mean`` of recorded repeats.
        build_secs, run_secs: simulated seconds of a predicted success (dataset medians).
        fail_build_secs, fail_run_secs: the same of a predicted failure.
        n_rows: rows fitted on.

    The models are fitted on all rows on the first prediction (:meth:`fidelity` fits its own
    on a split).

    Raises:
        TuneGymError: the data holds no successful row, or datasets of different spaces.
    """

    def __init__(self, dataset: Any, seed: int = 0) -> None:
        datasets = list(dataset) if isinstance(dataset, (list, tuple)) else [dataset]
        if not datasets:
            raise TuneGymError("surrogate: no dataset to fit")
        first = datasets[0]
        for ds in datasets[1:]:
            if (ds.task.uri, ds.preset, ds.meta.get("fingerprint")) != (
                    first.task.uri, first.preset, first.meta.get("fingerprint")):
                raise TuneGymError(
                    f"surrogate: cannot fit one model on {first.task.uri} (preset {first.preset}, fingerprint "
                    f"{first.meta.get('fingerprint')}) and {ds.task.uri} (preset {ds.preset}, fingerprint "
                    f"{ds.meta.get('fingerprint')}); give each task's data its own model")
        self.task: Task = first.task
        self.preset: str = first.preset
        self.space: KnobSpace = first.space
        self.fingerprint: str = str(first.meta.get("fingerprint", ""))
        self.flops: int = first.flops
        self.seed = seed
        self.features = KnobFeatures(self.space)
        rows = _Rows.merge(datasets)
        self.n_rows = len(rows.configs)
        ok = rows.ok
        if not ok.any():
            raise TuneGymError(f"surrogate: the data of {self.task.uri} (preset {self.preset}) has no successful "
                               f"row ({self.n_rows} failed), so there is no cost to learn")
        errors = collections.Counter(e for e in rows.error if e is not None)
        self.error_kind: str = errors.most_common(1)[0][0] if errors else "build_error"
        lengths = collections.Counter(len(c) for c, good in zip(rows.costs, ok) if good)
        self.repeats: int = lengths.most_common(1)[0][0]
        ratios = [np.asarray(c) / (sum(c) / len(c)) for c, good in zip(rows.costs, ok) if good and len(c) > 1]
        self.deviations: np.ndarray = np.concatenate(ratios) if ratios else np.ones(1)
        self.build_secs = float(np.median(rows.build_secs[ok]))
        self.run_secs = float(np.median(rows.run_secs[ok]))
        self.fail_build_secs = float(np.median(rows.build_secs[~ok])) if (~ok).any() else self.build_secs
        self.fail_run_secs = float(np.median(rows.run_secs[~ok])) if (~ok).any() else 0.0
        self._rows = rows
        self._fitted: tuple[Any, Any | None] | None = None  # (regressor, classifier) on all rows, on first use

    def _fit(self, rows: _Rows, seed: int) -> tuple[Any, Any | None]:
        """``(cost regressor, failure classifier or None)`` fitted on ``rows``."""
        x = self.features(rows.configs)
        ok = rows.ok
        regressor = _train(REGRESSOR_PARAMS, x[ok], np.log(rows.mean_cost[ok]), seed)
        classifier = None
        if 0 < ok.sum() < len(ok):  # both classes present
            classifier = _train(CLASSIFIER_PARAMS, x, (~ok).astype(np.float32), seed)
        return regressor, classifier

    # ------------------------------------------------------------------ prediction
    def predict(self, configs: np.ndarray | Sequence[Config]) -> tuple[np.ndarray, np.ndarray]:
        """``(predicted mean seconds per call, failure probability)`` of each config."""
        if self._fitted is None:
            self._fitted = self._fit(self._rows, self.seed)
        return self._predict(*self._fitted, configs)

    def _predict(self, regressor: Any, classifier: Any | None,
                 configs: np.ndarray | Sequence[Config]) -> tuple[np.ndarray, np.ndarray]:
        x = self.features(configs)
        if not len(x):
            return np.zeros(0), np.zeros(0)
        cost = np.exp(regressor.inplace_predict(x).astype(np.float64))
        p_fail = classifier.inplace_predict(x).astype(np.float64) if classifier is not None else np.zeros(len(x))
        return cost, p_fail

    def config_hash(self, configs: np.ndarray | Sequence[Config], seed: int) -> np.ndarray:
        """A SplitMix64 hash of the seed and each config's knob indices (uint64 per config).
        Indices of knobs the config's sketch does not use are zeroed first, so every spelling
        of one config hashes alike."""
        idx = np.asarray(configs, dtype=np.int64).reshape(-1, self.space.n_knobs)
        if self.space.n_sketches > 1:
            idx = idx * self.space.active_mask[self.space.sketches(idx)]
        h = np.full(len(idx), np.uint64(seed % 2**64), dtype=np.uint64)
        for j in range(idx.shape[1]):
            h = _splitmix64(h ^ idx[:, j].astype(np.uint64))
        return h

    def noise(self, configs: np.ndarray | Sequence[Config], seed: int) -> np.ndarray:
        """``n x repeats`` relative deviations (drawn from :attr:`deviations`) of each config.

        Deterministic for ``(seed, config)``: the draw of repeat ``r`` indexes the pool with
        a SplitMix64 hash of the seed, the config's knob indices and ``r``.
        """
        h = self.config_hash(configs, seed)
        draws = _splitmix64(h[:, None] + np.arange(self.repeats, dtype=np.uint64)[None, :])
        return self.deviations[draws % np.uint64(len(self.deviations))]

    def drift(self, configs: np.ndarray | Sequence[Config], seed: int, scale: float,
              nth: np.ndarray | None = None) -> np.ndarray:
        """One factor ``exp(scale * z)`` per config, ``z`` standard normal, deterministic for
        ``(seed, config, nth)`` (Box-Muller on two hashes of it, independent of :meth:`noise`'s
        draws); ``nth``: per config, how many times it was measured before (default 0)."""
        h = _splitmix64(self.config_hash(configs, seed) ^ _U64(0xD1B54A32D192ED03))  # another stream than noise's
        if nth is not None:
            n = np.asarray(nth, dtype=np.uint64)
            h = np.where(n > 0, _splitmix64(h + n), h)
        u1 = ((h >> _U64(11)).astype(np.float64) + 0.5) / 2.0**53  # in (0, 1)
        u2 = ((_splitmix64(h) >> _U64(11)).astype(np.float64) + 0.5) / 2.0**53
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
        return np.exp(scale * z)

    def results(self, configs: np.ndarray | Sequence[Config], seed: int | None = None,
                noise: bool = True, drift: float = 0.0, nth: np.ndarray | None = None) -> list[MeasureResult]:
        """One simulated :class:`MeasureResult` per config (see the module docstring).

        Args:
            configs: configs of the model's space.
            seed: the noise seed (default: the model's seed).
            noise: draw each repeat's deviation; ``False``: every repeat is the prediction.
            drift: the scale of the per-measurement factor shared by its repeats
                (:meth:`drift`); 0: none.
            nth: per config, how many times it was measured before (the drift's draw).
        """
        if not len(configs):
            return []
        seed = self.seed if seed is None else seed
        cost, p_fail = self.predict(configs)
        if drift:
            cost = cost * self.drift(configs, seed, drift, nth)
        costs = cost[:, None] * (self.noise(configs, seed) if noise else np.ones((len(cost), self.repeats)))
        extra = {"source": "surrogate"}
        out = []
        for row, p in zip(costs.tolist(), p_fail.tolist()):
            if p >= FAIL_THRESHOLD:
                out.append(MeasureResult.failure(
                    self.error_kind, f"surrogate: predicted to fail (p={p:.2f})", flops=self.flops,
                    build_secs=self.fail_build_secs, run_secs=self.fail_run_secs, extra=extra))
            else:
                out.append(MeasureResult(costs=tuple(row), flops=self.flops, build_secs=self.build_secs,
                                         run_secs=self.run_secs, extra=extra))
        return out

    # ------------------------------------------------------------------ fidelity
    def fidelity(self, holdout: float = 0.2, seed: int = 0) -> dict[str, Any]:
        """How well this model's recipe predicts rows it has not seen: see :func:`fidelity`."""
        if not 0 < holdout < 1:
            raise ValueError(f"holdout must be in (0, 1), not {holdout}")
        rows = self._rows
        n = len(rows.configs)
        order = np.random.default_rng(seed).permutation(n)
        n_test = max(1, round(holdout * n))
        test, train = np.sort(order[:n_test]), np.sort(order[n_test:])
        train_rows, test_rows = rows.take(train), rows.take(test)
        report: dict[str, Any] = {"holdout": holdout, "seed": seed, "n_train": len(train), "n_test": len(test)}
        if not train_rows.ok.any():
            return {**report, "spearman": math.nan, "top_1pct_recall": math.nan, "top_5pct_recall": math.nan,
                    "top_10pct_recall": math.nan, "median_rel_error": math.nan, "failure_accuracy": math.nan}
        regressor, classifier = self._fit(train_rows, self.seed)
        cost, p_fail = self._predict(regressor, classifier, test_rows.configs)
        ok = test_rows.ok
        true, pred = test_rows.mean_cost[ok], cost[ok]
        report["n_test_ok"] = int(ok.sum())
        report["spearman"] = _spearman(pred, true)
        report["top_1pct_recall"] = _top_recall(pred, true, 0.01)
        report["top_5pct_recall"] = _top_recall(pred, true, 0.05)
        report["top_10pct_recall"] = _top_recall(pred, true, 0.10)
        report["median_rel_error"] = float(np.median(np.abs(pred / true - 1))) if ok.any() else math.nan
        report["failure_accuracy"] = float(np.mean((p_fail >= FAIL_THRESHOLD) == ~ok))
        report["failure_model"] = classifier is not None
        return report


def fidelity(dataset: Any, holdout: float = 0.2, seed: int = 0) -> dict[str, Any]:
    """Fit the surrogate on a seeded split of ``dataset`` and score it on the held-out rows.

    Args:
        dataset: a :class:`tune_gym.datasets.Dataset` (or a list of one task's datasets).
        holdout: the fraction of rows held out.
        seed: the split's seed.

    Returns:
        ``{"spearman", "top_1pct_recall", "top_5pct_recall", "top_10pct_recall", "median_rel_error",
        "failure_accuracy", "failure_model", "n_train", "n_test", "n_test_ok", "holdout",
        "seed"}``: on the held-out successful rows, the Spearman rank correlation of predicted
        and measured cost; of the held-out true top 1% (5%, 10%) configs (at least one), the
        fraction in the predicted top 1% (5%, 10%); the median of ``|predicted / measured - 1|``;
        on all held-out rows, the fraction whose failed/ok is predicted right (the failure
        model is absent, i.e. "never fails", when the training rows hold no failure).
    """
    return SurrogateModel(dataset, seed=seed).fidelity(holdout, seed)


def _spearman(pred: np.ndarray, true: np.ndarray) -> float:
    if len(true) < 3 or np.ptp(true) == 0 or np.ptp(pred) == 0:
        return math.nan
    from scipy.stats import spearmanr

    return float(spearmanr(pred, true).statistic)


def _top_recall(pred: np.ndarray, true: np.ndarray, fraction: float) -> float:
    """Of the ``k`` lowest true costs (``k = ceil(fraction * n)``), the share among the ``k``
    lowest predicted ones."""
    if not len(true):
        return math.nan
    k = max(1, math.ceil(fraction * len(true)))
    best_true = set(np.argsort(true, kind="stable")[:k].tolist())
    best_pred = set(np.argsort(pred, kind="stable")[:k].tolist())
    return len(best_true & best_pred) / k


_U64 = np.uint64


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function on a uint64 array: a fast, well-mixed hash (wraps mod 2**64)."""
    x = x + _U64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


# ---------------------------------------------------------------------- the backend
class SurrogateBackend(Backend):
    """Answers any config of a task's space with a fitted :class:`SurrogateModel`.
    ``name = "surrogate"``.

    A model is fitted per (task, preset) the first time the task is measured (or its
    :meth:`report` asked for): first on a held-out split for the fidelity report, then on all
    rows for the model it serves.

    Options (declared in the signature; the table: :func:`tune_gym.measure.backend_options`):
    ``dataset`` is the data to fit on; the same ``seed`` gives the same results.
    """

    name = "surrogate"

    @checked_options(who="surrogate")
    def __init__(self, dataset: Annotated[Any, DATA] = None,
                 seed: Annotated[int, Int(0, help="the noise seed (and XGBoost's)")] = 0,
                 noise: Annotated[bool, Bool(help="draw per-repeat noise from the recorded repeats (False: the "
                                                  "prediction for every repeat)")] = True,
                 drift: Annotated[float, Float(0.0, 2.0, help="scale s of a per-measurement factor exp(s * z), "
                                                              "z ~ N(0, 1), shared by its repeats: a host whose "
                                                              "speed wanders between measurements (0: none)")] = 0.0,
                 ) -> None:
        self.seed = seed
        self.noise = noise
        self.drift = drift
        self._times: dict[tuple[str, str], collections.Counter[int]] = {}  # config hash -> measurements (drift)
        from tune_gym.datasets.source import DataSource

        self.data = DataSource(dataset, "surrogate")
        self._models: dict[tuple[str, str], SurrogateModel] = {}
        self._reports: dict[tuple[str, str], dict[str, Any]] = {}
        self._checked: dict[tuple[str, str], KnobSpace] = {}  # spaces whose fingerprint matched

    @property
    def sources(self) -> list[str]:
        return self.data.sources

    def datasets(self, task: Task, preset: str) -> list[Any]:
        """The datasets of ``task``'s ``preset`` space (from the catalog on first use when the
        backend was made without data)."""
        return self.data.datasets(task, preset)

    def model(self, task: Task | str, preset: str) -> SurrogateModel:
        """The fitted model of ``task``'s ``preset`` space (fitted, with its report, on first use)."""
        task = task if isinstance(task, Task) else Task.parse(task)
        key = (task.uri, preset)
        model = self._models.get(key)
        if model is None:
            datasets = self.datasets(task, preset)
            if not datasets:
                space = KnobSpace.for_task(task, preset)
                raise TuneGymError(
                    f"surrogate: no data of {task.uri} (preset {preset}, space fingerprint "
                    f"{_fingerprint(space)}); it was given data of {self._describe()}. Pass a dataset of this task "
                    f"(dataset=...) or collect one: tune-gym collect {task.uri} --preset {preset}")
            model = SurrogateModel(datasets, seed=self.seed)
            self._reports[key] = model.fidelity(holdout=0.2, seed=self.seed)
            self._models[key] = model
        return model

    def report(self, task: Task | str, preset: str) -> dict[str, Any]:
        """The fidelity report (:func:`fidelity`, holdout 0.2, the backend's seed) of the model
        of ``task``'s ``preset`` space."""
        task = task if isinstance(task, Task) else Task.parse(task)
        self.model(task, preset)
        return dict(self._reports[(task.uri, preset)])

    def reference(self, task: Task, preset: str | None = None) -> Reference | None:
        """The reference throughput recorded with the task's data (that of ``preset`` first), if any."""
        return self.data.reference(task, preset)

    def measure(self, task: Task, space: KnobSpace, configs: Sequence[Config]) -> list[MeasureResult]:
        model = self.model(task, space.preset)
        key = (task.uri, space.preset)
        if self._checked.get(key) is not space:
            current = _fingerprint(space)
            if current != model.fingerprint or (space.task.uri, space.preset) != (model.task.uri, model.preset):
                raise TuneGymError(
                    f"surrogate: the model of {model.task.uri} (preset {model.preset}) was fitted on data of a space "
                    f"with fingerprint {model.fingerprint}, but the space of {space.task.uri} (preset "
                    f"{space.preset}) has fingerprint {current}: its indices mean other schedules. Fit the surrogate "
                    f"on data collected for this space: tune-gym collect {space.task.uri} --preset {space.preset}")
            self._checked[key] = space
        nth = None
        if self.drift:  # the n-th measurement of a config draws the n-th factor
            times = self._times.setdefault(key, collections.Counter())
            nth = np.zeros(len(configs), dtype=np.int64)
            for i, h in enumerate(model.config_hash(configs, self.seed).tolist()):
                nth[i] = times[h]
                times[h] += 1
        return model.results(configs, seed=self.seed, noise=self.noise, drift=self.drift, nth=nth)

    def tasks(self) -> dict[tuple[str, str], int]:
        """``{(task URI, preset): rows}`` of the data loaded so far."""
        return {key: sum(len(ds) for ds in dss) for key, dss in self.data.loaded.items()}

    def _describe(self) -> str:
        pairs = [f"{uri} (preset {preset}, fingerprint {dss[0].meta.get('fingerprint')})"
                 for (uri, preset), dss in self.data.loaded.items() if dss]
        return "; ".join(pairs) or "no task"

    def close(self) -> None:
        """Nothing to release (models live in memory)."""


def _fingerprint(space: KnobSpace) -> str:
    from tune_gym.datasets.dataset import space_fingerprint

    return space_fingerprint(space)
