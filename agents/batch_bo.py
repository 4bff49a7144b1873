"""``batch-bo``: a generic GP batch Bayesian optimization over the knobs, with BoTorch.

This is the *search* half of MetaTune (Ryu & Sung; METHODS.md section 3) with a plain
Gaussian process as its model: MetaTune's defining part, the meta-learned graph cost model
that drives the BO, is not in this agent (the ``prior_mean`` / ``featurizer`` hooks below are
where it plugs in), so results of ``batch-bo`` are those of a generic GP batch BO, not of
MetaTune. MetaTune replaces AutoTVM's simulated annealing by an exploitation-centric batch BO
that needs far fewer model queries and batches all of them. The paper names the ingredients
(botorch, each knob an input, batched acquisition evaluation, inspired by batch GP-UCB, the
reparameterized MC acquisitions and parallel knowledge gradient) but not its settings; the
choices below are ours.

One planning round (:class:`ModelGuidedAgent` owns the loop):

1. **fit** a ``SingleTaskGP`` (BoTorch defaults: RBF kernel with ARD lengthscales and
   dimension-scaled priors, inferred noise, ``Standardize`` outcome transform) by maximum
   marginal likelihood (``fit_gpytorch_mll``), in double precision, on
   ``log2(1 + GFLOPS)`` of the measured configs. At most ``max_train`` points (500): the
   best half of the cap plus the most recent of the rest, so a fit stays fast.
2. **search**: build a candidate pool of ``pool_size`` (2000) unmeasured configs -- the
   best configs that a short simulated annealing (:mod:`agents.optimizers.sa`, 64 points,
   100 steps) finds on the single-point analytic ``LogExpectedImprovement`` (a quarter of
   the pool), the distance-1 neighbours of the ``n_anchors`` (8) best measured configs,
   and uniform random configs for the rest -- then choose the ``plan_size`` (16) batch by
   sequential greedy maximization of ``qLogExpectedImprovement`` (``acquisition="qlogei"``,
   the default) or ``qLogNoisyExpectedImprovement`` (``"qlognei"``, for noisy live
   measurements) with ``mc_samples`` (128) seeded QMC samples
   (:func:`agents.optimizers.bo.greedy_q_batch`): the first pick scores the whole pool, the
   later, joint picks only the ``shortlist`` (256) candidates with the best single-point
   values (on a 2000-candidate test the batch's 1024-sample qLogEI was the same to 1e-6
   as with the full pool, at a tenth of the cost). Every acquisition evaluation is one
   batched tensor call over (a chunk of) the candidates.

Input encoding (``encoding``): ``"index"`` (the default) is each knob's choice index scaled
to [0, 1] (:meth:`KnobSpace.normalized`), the paper's "each knob is an input of the BO";
``"knob"`` is :class:`KnobFeaturizer` features -- log2 of every split factor, log2(1 + value)
of categorical knobs, one-hot sketch and nominal knobs -- min-max scaled to [0, 1] by the range of each column
over the knob's choices. On the replay conv2d and dense tasks (12 seeds, 80 trials) both
found the optimum in a similar median number of trials, but "knob" left some conv2d runs
stuck below it (mean best 0.97 of the optimum against 1.00), so the paper's encoding stays
the default. Columns that cannot vary (one-choice knobs) are dropped.

A learned cost model plugs in two ways (MetaTune's fine-tuned GCN is the intended one):

* ``featurizer``: ``configs (n x n_knobs int) -> features (n x d)`` replaces the encoding
  (columns are min-max scaled by their range over the training points of each fit);
* ``prior_mean``: ``configs -> predicted score`` becomes the GP's prior mean
  ``a + b * prior(x)`` (:class:`PriorMean`; the prediction enters the model as an extra
  input column that the kernel ignores, scaled to [0, 1] over the training points).
  ``a`` and ``b`` start from a least-squares fit of the standardized targets on the
  prediction and are then fitted with the kernel by marginal likelihood, so the
  prediction's offset and scale do not matter (a rank score works); its shape does, and
  predictions of ``log2(1 + GFLOPS)`` match the GP's target best. The GP then models what
  the prior gets wrong, and the acquisition sees prior + correction.

Other defaults: ``n_init`` = 16 random configs before the first fit (the GP needs data;
with a trusted ``prior_mean`` a smaller ``n_init`` jump-starts the search sooner, but at
least 2 measured configs with distinct throughputs are needed to fit); no epsilon-random
slots (``eps`` = 0: expected improvement and the random part of the pool already explore);
invalid configs enter the GP as throughput 0 (``invalid="zero"``) or are left out
(``"drop"``). Randomness: each fit and each search run under ``torch`` seeded from the
agent's ``rng`` (in a forked RNG state, so the global torch generator is untouched), and the
QMC sampler gets its own seed, so a seed gives the same proposals. The paper ran the BO on
a GPU; ``device`` (default ``"cpu"``) selects where the GP and the acquisitions run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import numpy as np
import torch
from botorch.acquisition import LogExpectedImprovement, qLogExpectedImprovement, qLogNoisyExpectedImprovement
from botorch.exceptions import ModelFittingError
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from botorch.models.transforms.outcome import Standardize
from botorch.models.utils.gpytorch_modules import get_covar_module_with_dim_scaled_prior
from botorch.sampling import SobolQMCNormalSampler
from gpytorch.means import Mean
from gpytorch.mlls import ExactMarginalLogLikelihood

from agents.base import register
from agents.model_based import (
    EPS,
    INVALID_OPTION,
    PLAN_SIZE,
    SA_EARLY_STOP,
    SA_POINTS,
    SA_STEPS,
    ModelGuidedAgent,
    make_sa,
)
from agents.models.features import KnobFeaturizer, log_gflops
from agents.optimizers.bo import greedy_q_batch, refined_pool
from agents.optimizers.sa import Scorer
from tune_gym.options import Check, Choice, Func, Int, OptionError, check_str
from tune_gym.space import Config, KnobSpace
from tune_gym.tasks.task import Task

__all__ = ["BatchBOAgent", "PriorMean"]

ConfigFn = Callable[[np.ndarray], np.ndarray]

ENCODINGS = ("index", "knob")
ACQUISITIONS = ("qlogei", "qlognei")


def _check_device(name: str, device: Any) -> str:
    """The ``device`` option: a torch device's name (``"cpu"``, ``"cuda:0"``)."""
    try:
        torch.device(check_str(name, device))
    except RuntimeError:
        raise OptionError(f"{name} must be a torch device such as 'cpu' or 'cuda:0', got {device!r}") from None
    return str(device)


# Options batch-bo shares with meta-bo, declared once.
ACQUISITION = Choice(ACQUISITIONS, help="the batch acquisition: qLogEI, or qLogNEI for noisy live measurements")
POOL_SIZE = Int(1, help="candidates scored per plan")
N_ANCHORS = Int(0, help="best measured configs whose neighbours join the pool")
MAX_TRAIN = Int(2, help="most training points of the GP (the best half, then the most recent)")
MC_SAMPLES = Int(1, help="QMC samples of the batch acquisition")
SHORTLIST = Int(1, help="candidates (best single-point values) the joint greedy steps consider")
CHUNK = Int(1, help="candidates per batched acquisition call")
DEVICE = Check(_check_device, "torch device", help="where the GP and the acquisitions run ('cpu', 'cuda')")


class PriorMean(Mean):
    """GP mean ``constant + weight * x[..., -1]``: a linear map of a prior model's prediction.

    The last input column holds the (scaled) prediction; the kernel is restricted to the
    other columns, so the prediction shapes the mean only.
    """

    def __init__(self, constant: float = 0.0, weight: float = 1.0) -> None:
        super().__init__()
        self.register_parameter("constant", torch.nn.Parameter(torch.tensor(float(constant))))
        self.register_parameter("weight", torch.nn.Parameter(torch.tensor(float(weight))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.constant + self.weight * x[..., -1]


class _MinMax:
    """Column-wise scaling to [0, 1] by fixed bounds; columns with no range are dropped (or kept at 0)."""

    def __init__(self, lo: np.ndarray, hi: np.ndarray, drop_constant: bool = True) -> None:
        varies = hi - lo > 1e-12
        self.keep = varies if drop_constant else np.ones_like(varies)
        self.lo, self.span = lo[self.keep], np.where(varies, hi - lo, 1.0)[self.keep]

    @classmethod
    def fit(cls, x: np.ndarray, drop_constant: bool = True) -> _MinMax:
        """Bounds from the rows of ``x``."""
        return cls(x.min(axis=0), x.max(axis=0), drop_constant)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return (x[:, self.keep] - self.lo) / self.span


@register("batch-bo", "generic GP batch BO (MetaTune's search without its learned model): qLogEI batches, BoTorch")
class BatchBOAgent(ModelGuidedAgent):
    """Generic GP batch Bayesian optimization over the knobs (MetaTune's search, plain GP model;
    see the module docstring). Options: ``tune-gym agents batch-bo``; ``plan_size`` is the
    acquisition's ``q``."""

    def __init__(self, plan_size: Annotated[int, PLAN_SIZE] = 16,
                 n_init: Annotated[int, Int(0, help="random configs measured before the first GP fit")] = 16,
                 eps: Annotated[float, EPS] = 0.0, invalid: Annotated[str, INVALID_OPTION] = "zero",
                 encoding: Annotated[str, Choice(ENCODINGS, help="GP inputs: scaled knob indices ('index') or scaled "
                                                 "KnobFeaturizer features ('knob'); not with featurizer")] = "index",
                 featurizer: Annotated[ConfigFn | None, Func(help="configs -> features, replacing the "
                                                                  "encoding")] = None,
                 prior_mean: Annotated[ConfigFn | None, Func(help="configs -> predicted score, the GP's prior "
                                                                  "mean")] = None,
                 acquisition: Annotated[str, ACQUISITION] = "qlogei", pool_size: Annotated[int, POOL_SIZE] = 2000,
                 n_anchors: Annotated[int, N_ANCHORS] = 8, max_train: Annotated[int, MAX_TRAIN] = 500,
                 mc_samples: Annotated[int, MC_SAMPLES] = 128, shortlist: Annotated[int, SHORTLIST] = 256,
                 sa_points: Annotated[int, SA_POINTS] = 64, sa_steps: Annotated[int, SA_STEPS] = 100,
                 sa_early_stop: Annotated[int, SA_EARLY_STOP] = 20, chunk: Annotated[int, CHUNK] = 512,
                 device: Annotated[str, DEVICE] = "cpu") -> None:
        super().__init__(plan_size, eps, n_init, invalid, make_sa(sa_points, sa_steps, sa_early_stop))
        self.encoding = encoding
        self.featurizer = featurizer
        self.prior_mean = prior_mean
        self.acquisition = acquisition
        self.pool_size = pool_size
        self.n_anchors = n_anchors
        self.max_train = max_train
        self.mc_samples = mc_samples
        self.shortlist = shortlist
        self.chunk = chunk
        self.device = torch.device(device)

    def reset(self, space: KnobSpace, task: Task, seed: int | None = None) -> None:
        super().reset(space, task, seed)
        self.model: SingleTaskGP | None = None
        self._scale_x: _MinMax | None = None
        self._scale_prior: _MinMax | None = None
        self._best_f = 0.0
        self._train_x: torch.Tensor | None = None
        if self.featurizer is None and self.encoding == "index":
            self._features: ConfigFn = space.normalized
            self._scale_x = _MinMax(np.zeros(space.n_knobs), (space.dims > 1).astype(np.float64))
        elif self.featurizer is None:
            knob = KnobFeaturizer(space)
            self._features = knob
            self._scale_x = _MinMax(np.concatenate([t.min(axis=0) for t in knob.tables]).astype(np.float64),
                                    np.concatenate([t.max(axis=0) for t in knob.tables]).astype(np.float64))
        else:
            self._features = self.featurizer  # scaled by the training points at each fit

    # ------------------------------------------------------------------ model
    def _raw_features(self, configs: np.ndarray) -> np.ndarray:
        return np.asarray(self._features(configs), dtype=np.float64).reshape(len(configs), -1)

    def _raw_prior(self, configs: np.ndarray) -> np.ndarray:
        return np.asarray(self.prior_mean(configs), dtype=np.float64).reshape(len(configs), 1)  # type: ignore[misc]

    def encode(self, configs: np.ndarray | list[Config]) -> torch.Tensor:
        """GP inputs of ``configs``: scaled features, plus the scaled prior as last column."""
        configs = np.asarray(configs, dtype=np.int64).reshape(-1, self.space.n_knobs)
        x = self._scale_x(self._raw_features(configs))  # type: ignore[misc]
        if self.prior_mean is not None:
            x = np.concatenate([x, self._scale_prior(self._raw_prior(configs))], axis=1)  # type: ignore[misc]
        return torch.as_tensor(x, dtype=torch.float64, device=self.device)

    def _subset(self, y: np.ndarray) -> np.ndarray:
        """Training rows: all, or the best ``max_train // 2`` plus the most recent of the rest."""
        if len(y) <= self.max_train:
            return np.arange(len(y))
        best = np.argsort(-y, kind="stable")[: self.max_train // 2]
        rest = np.setdiff1d(np.arange(len(y)), best)[-(self.max_train - len(best)):]
        return np.sort(np.concatenate([best, rest]))

    def fit(self, configs: np.ndarray, y: np.ndarray) -> bool:
        rows = self._subset(y)
        configs, target = configs[rows], log_gflops(y[rows])
        if len(target) < 2 or np.ptp(target) <= 0:
            return False  # nothing to learn yet (e.g. every measurement failed)
        if self.featurizer is not None:
            self._scale_x = _MinMax.fit(self._raw_features(configs))
        mean_module = None
        if self.prior_mean is not None:
            prior = self._raw_prior(configs)
            self._scale_prior = _MinMax.fit(prior, drop_constant=False)
            mean_module = _initial_prior_mean(self._scale_prior(prior)[:, 0], target)
        x = self.encode(configs)
        d = x.shape[1] - (self.prior_mean is not None)
        covar = get_covar_module_with_dim_scaled_prior(ard_num_dims=d, active_dims=list(range(d)))
        train_y = torch.as_tensor(target, dtype=torch.float64, device=self.device).unsqueeze(-1)
        with self._seeded():
            model = SingleTaskGP(x, train_y, covar_module=covar, mean_module=mean_module,
                                 outcome_transform=Standardize(m=1))
            try:
                fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
            except ModelFittingError:
                return False  # every restart failed: this round is random, the next one refits
        model.eval()
        self.model, self._train_x, self._best_f = model, x, float(target.max())
        return True

    def score(self, configs: np.ndarray) -> np.ndarray:
        """Single-point analytic log expected improvement over the best measured target."""
        assert self.model is not None, "score before fit"
        acqf = LogExpectedImprovement(self.model, best_f=self._best_f)
        x = self.encode(configs).unsqueeze(-2)
        with torch.no_grad():
            values = torch.cat([acqf(part) for part in x.split(self.chunk)])
        return values.cpu().numpy()

    # ------------------------------------------------------------------ search
    def search(self, n: int) -> list[Config]:
        """The next ``n`` configs: greedy q-batch acquisition over an SA-refined candidate pool."""
        with self._seeded():
            pool = self.candidates(self.score)
            if not pool:
                return []
            acqf = self._batch_acquisition()
            picked = greedy_q_batch(acqf, self.encode(pool), n, self.shortlist, self.chunk)
        return [pool[i] for i in picked]

    def candidates(self, score: Scorer) -> list[Config]:
        """The pool of unmeasured configs a plan chooses from (:func:`agents.optimizers.bo.refined_pool`):
        SA over ``score`` from the best measured configs, their neighbours, random configs."""
        return refined_pool(self.space, self.sa, score, self.rng, self.pool_size,
                            self._top_measured(self.sa.n_points // 2), self.n_anchors, self.proposed)

    def _batch_acquisition(self) -> qLogExpectedImprovement | qLogNoisyExpectedImprovement:
        assert self.model is not None and self._train_x is not None, "search before fit"
        sampler = SobolQMCNormalSampler(torch.Size([self.mc_samples]), seed=int(self.rng.integers(2**31)))
        if self.acquisition == "qlognei":
            return qLogNoisyExpectedImprovement(self.model, X_baseline=self._train_x, sampler=sampler)
        return qLogExpectedImprovement(self.model, best_f=self._best_f, sampler=sampler)

    @contextlib.contextmanager
    def _seeded(self) -> Iterator[None]:
        """Seed torch from the agent's rng without disturbing the global generator."""
        with torch.random.fork_rng(devices=None if self.device.type == "cuda" else []):
            torch.manual_seed(int(self.rng.integers(2**31)))
            yield


def _initial_prior_mean(prior: np.ndarray, target: np.ndarray) -> PriorMean:
    """:class:`PriorMean` started at the least-squares fit of the standardized target on ``prior``."""
    z = (target - target.mean()) / target.std(ddof=1)
    if np.ptp(prior) <= 0:
        return PriorMean(0.0, 0.0)
    weight, constant = np.polyfit(prior, z, 1)
    return PriorMean(constant, weight)
