"""Train PPO / MaskablePPO across the tasks of a ``MultiTune-v0`` split, and score it on held-out tasks.

Two commands (run from the repository root)::

    python scripts/train_rl.py train --algo maskable-ppo --split by-network-v1 --seed 0 --steps 200000
    python scripts/train_rl.py evaluate benchmarks/results/rl/runs/*/policy.zip --budget 64 --seeds 10

``train`` runs stable-baselines3 PPO (``--algo ppo``) or sb3-contrib MaskablePPO (``maskable-ppo``,
which samples only values the task has, ``env.action_masks()``) on the split's train part
through the native vector env (:class:`~tune_gym.envs.multi_vector.MultiTuneVectorEnv`, replayed
from the committed exhaustive datasets, ``reward_norm="optimum"``: an episode's return is its
best config over the task's optimum). Every episode lasts exactly ``budget / batch_size`` steps
(the step limit; a repeated config wastes its slot), so with ``n_steps`` a multiple of it every
rollout starts on fresh episodes. That makes training resumable exactly: a checkpoint, taken at
the start of a rollout every ``--checkpoint-every`` steps, holds the model and optimizer, the
random generators (Python, NumPy, PyTorch, the env's task draws), the sub-envs' tasks and the
learning curve so far; a killed run started again with the same command continues from it and
ends with the same policy as an uninterrupted run. The run directory
(``<out>/<algo>-<split>-s<seed>``) gets ``checkpoint/`` while training, and at the end
``policy.zip`` + ``policy.json`` (what :mod:`agents.rl_policy` loads), ``curve.csv`` and
``curve.png``: the mean return of the training episodes of each rollout and, every
``--eval-every`` steps, the mean return of ``--eval-episodes`` episodes on the validation part.
``--hide PART ...`` trains without some observation parts (zeroed, :func:`agents.rl_policy.hide_parts`;
``policy.json`` records them and the ``rl-policy`` agent zeroes them too). ``scripts/cleanrl_ppo.py``
trains a plain-PyTorch PPO with the same settings and helpers (algo ``cleanrl-ppo``, ``policy.pt``).

``evaluate`` scores policies on the split's test part at a fixed trial budget through the
leaderboard's runner (:func:`benchmarks.leaderboard.runner.run_one`, the ``Tune-v0`` replay env
of ``tune-gym bench``), next to random search and the best search agent of LEADERBOARD.md that
runs on these tasks at that budget (``meta-bo``: ``one-shot``, first, declines the BERT operators
of by-network's test part, and ``xgb-sa-transfer``, second, has no records of those operators to
transfer and measures random configs for its first 64 trials; at 64 trials ``meta-bo`` leads the
leaderboard's best-so-far table): per run the
best GFLOPS found within the budget over the task's optimum, mean and 95% band over the
(task, seed) runs, and a paired Wilcoxon signed-rank test of the policy against each baseline
(:func:`benchmarks.leaderboard.significance.paired_test`). It writes ``rl_eval.json``,
``rl_eval.md`` and ``rl_eval.png`` under ``--out`` (``benchmarks/results/rl``). ``--part
validation`` scores on the validation part instead, to choose between training settings without
looking at the test part; ``--deterministic`` makes the policies take their most likely action.

Determinism: a seed fixes the run (one PyTorch thread, CPU). Speed: see docs/environments.md, "RL across tasks".
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pickle
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnvWrapper

sys.path.insert(0, str(Path(__file__).resolve().parent))

from training_common import command_line, display

from agents.rl_policy import ALGOS, MASKED_ALGOS, algo_class, hide_parts, write_meta
from tune_gym.envs.multi_task import observation_slices
from tune_gym.envs.task_sets import load_split
from tune_gym.options import OptionError

__all__ = ["TrainConfig", "evaluate", "make_vec_env", "native_vec_env", "train"]

RESULTS = Path("benchmarks/results/rl")
#: The algorithms ``train`` runs (stable-baselines3's); ``cleanrl-ppo`` is scripts/cleanrl_ppo.py's.
SB3_ALGOS = ("ppo", "maskable-ppo")
#: The search agent ``evaluate`` runs next to random search and the policies.
SEARCH_AGENT = "meta-bo"


@dataclass(frozen=True)
class TrainConfig:
    """What one training run is (all of it goes into ``policy.json`` and the checkpoint)."""

    algo: str = "maskable-ppo"
    split: str = "by-network-v1"
    seed: int = 0
    steps: int = 200_000
    n_envs: int = 16
    batch_size: int = 8  # configs per env step
    budget: int = 64  # trials per episode
    rollout_episodes: int = 4  # n_steps = rollout_episodes * budget / batch_size
    minibatch: int = 256
    epochs: int = 4
    learning_rate: float = 3e-4
    ent_coef: float = 0.01
    net: tuple[int, ...] = (256, 256)
    eval_every: int = 10_000
    eval_episodes: int = 16
    checkpoint_every: int = 10_000
    hide: tuple[str, ...] = ()  # observation parts zeroed (the policy trains and runs without them)

    @property
    def horizon(self) -> int:
        """Steps per episode: the budget in batches."""
        return self.budget // self.batch_size

    @property
    def n_steps(self) -> int:
        """Steps per sub-env per rollout (whole episodes)."""
        return self.rollout_episodes * self.horizon

    def check(self) -> None:
        """Refuse settings the exact resume and the fixed episode length need (one line each)."""
        if self.algo not in ALGOS:
            raise OptionError(f"--algo must be one of {', '.join(ALGOS)}, not {self.algo!r}")
        for name in ("steps", "n_envs", "batch_size", "budget", "rollout_episodes", "minibatch", "epochs",
                     "eval_every", "eval_episodes", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise OptionError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        unknown = [name for name in self.hide if name not in observation_slices(self.batch_size)]
        if unknown:
            raise OptionError(f"--hide: {unknown[0]!r} is not an observation part "
                              f"({', '.join(observation_slices(self.batch_size))})")
        if self.budget % self.batch_size:
            raise OptionError(f"--budget {self.budget} must be a multiple of --batch-size {self.batch_size} "
                              "(every episode lasts budget / batch_size steps)")


# ---------------------------------------------------------------------------------------------- envs
def native_vec_env(cfg: TrainConfig, part: str, n_envs: int) -> Any:
    """The split part's native vector env (:class:`~tune_gym.envs.multi_vector.MultiTuneVectorEnv`):
    episodes of exactly ``horizon`` steps, autoreset in the same step; refused where a task has
    no more configs than the budget."""
    from tune_gym.envs.multi_vector import MultiTuneVectorEnv

    venv = MultiTuneVectorEnv(num_envs=n_envs, max_episode_steps=cfg.horizon, autoreset_mode="same_step",
                              split=cfg.split, part=part, batch_size=cfg.batch_size, budget=cfg.budget,
                              reward_norm="optimum")
    smallest = min(engine.env.space.size for engine in venv.engines)
    if smallest <= cfg.budget:
        venv.close()
        raise OptionError(f"--budget {cfg.budget}: a task of {cfg.split} part {part} has only {smallest} configs; "
                          "the budget must be below every space's size (episodes of a fixed length)")
    return venv


def make_vec_env(cfg: TrainConfig, part: str, n_envs: int) -> Any:
    """:func:`native_vec_env` as an SB3 ``VecEnv`` whose episode ends are terminal
    (:class:`BudgetEnds`) and whose observations lack the parts of ``cfg.hide`` (:class:`Hide`)."""
    from tune_gym.envs.sb3 import SB3VecEnv

    env = BudgetEnds(SB3VecEnv(native_vec_env(cfg, part, n_envs)))
    return Hide(env, cfg.hide, cfg.batch_size) if cfg.hide else env


def inner_env(env: Any) -> Any:
    """The ``MultiTuneVectorEnv`` inside :func:`make_vec_env`'s env."""
    while not hasattr(env, "task_rng"):
        env = env.venv
    return env


class BudgetEnds(VecEnvWrapper):
    """An episode's end is the end of the tuning run (its budget is spent), not a cut: SB3 must
    not bootstrap a value past it, so ``TimeLimit.truncated`` is cleared."""

    def reset(self) -> Any:
        return self.venv.reset()

    def step_wait(self) -> Any:
        obs, rewards, dones, infos = self.venv.step_wait()
        for info in infos:
            info["TimeLimit.truncated"] = False
        return obs, rewards, dones, infos


class Hide(VecEnvWrapper):
    """Observations with some parts zeroed (:func:`agents.rl_policy.hide_parts`), as the
    ``rl-policy`` agent shows them to a policy trained so."""

    def __init__(self, venv: Any, hide: tuple[str, ...], batch_size: int) -> None:
        super().__init__(venv)
        self.hide, self.batch_size = hide, batch_size

    def reset(self) -> Any:
        obs = self.venv.reset()
        assert isinstance(obs, np.ndarray)
        return hide_parts(obs, self.hide, self.batch_size)

    def step_wait(self) -> Any:
        obs, rewards, dones, infos = self.venv.step_wait()
        assert isinstance(obs, np.ndarray)
        return hide_parts(obs, self.hide, self.batch_size), rewards, dones, infos


def validation_return(model: Any, cfg: TrainConfig, env: Any, seed: int) -> float:
    """Mean return of ``eval_episodes`` episodes on the validation part (``env``, of
    :func:`make_vec_env`), the tasks drawn and the policy's actions sampled from generators
    seeded by ``seed`` (the training generators are left as they were)."""
    import torch

    masked = cfg.algo in MASKED_ALGOS
    env.seed(seed)
    obs, total = env.reset(), np.zeros(cfg.eval_episodes)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(cfg.horizon):
            kwargs = {"action_masks": inner_env(env).action_masks()} if masked else {}
            action, _ = model.predict(obs, deterministic=False, **kwargs)
            obs, rewards, _, _ = env.step(action)
            total += rewards
    return float(total.mean())


# ---------------------------------------------------------------------------------------------- training
class _Stopped(Exception):
    """Raised after a checkpoint when ``stop_at`` steps are reached (a kill, for tests)."""


def _callback(cfg: TrainConfig, state: dict[str, Any], run_dir: Path, val_env: Any, stop_at: int | None) -> Any:
    """The SB3 callback that sums episode returns, evaluates, writes the curve and checkpoints,
    all at rollout starts (where every sub-env is on a fresh episode)."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Callback(BaseCallback):
        def _on_step(self) -> bool:
            state["partial"] += self.locals["rewards"]
            done = self.locals["dones"]
            state["returns"].extend(state["partial"][done].tolist())
            state["partial"][done] = 0.0
            return True

        def _on_rollout_start(self) -> None:
            step = self.model.num_timesteps
            if step == state["step"]:  # just resumed here: this rollout start is already done
                return
            if state["returns"]:
                state["curve"].append(("train", step, float(np.mean(state["returns"])), len(state["returns"])))
                state["returns"] = []
            if step >= state["next_eval"]:
                state["curve"].append(("validation", step, validation_return(self.model, cfg, val_env, cfg.seed + step),
                                       cfg.eval_episodes))
                state["next_eval"] += cfg.eval_every
            if step >= state["next_checkpoint"]:
                state["next_checkpoint"] += cfg.checkpoint_every
                state["step"] = step
                save_checkpoint(self.model, state, run_dir)
                write_curve(state["curve"], run_dir)
                if stop_at is not None and step >= stop_at:
                    raise _Stopped

        def _on_training_end(self) -> None:
            if state["returns"]:
                state["curve"].append(("train", self.model.num_timesteps, float(np.mean(state["returns"])),
                                       len(state["returns"])))
                state["returns"] = []

    return Callback()


def save_checkpoint(model: Any, state: dict[str, Any], run_dir: Path) -> None:
    """Write the checkpoint atomically (a new directory renamed over the old one)."""
    import torch

    if np.any(state["partial"]):
        raise RuntimeError("checkpoint in mid-episode: the episodes must end at rollout boundaries")
    tmp, final = run_dir / "checkpoint.tmp", run_dir / "checkpoint"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save(tmp / "model.zip")
    venv = inner_env(model.get_env())
    extra = {"state": {k: v for k, v in state.items() if k != "partial"}, "num_timesteps": model.num_timesteps,
             "n_updates": model._n_updates, "last_obs": model._last_obs,
             "episode_starts": model._last_episode_starts, "task_index": venv.task_index.copy(),
             "env_rng": venv.task_rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
             "numpy_rng": np.random.get_state(), "python_rng": random.getstate()}
    with open(tmp / "state.pkl", "wb") as f:
        pickle.dump(extra, f)
    old = run_dir / "checkpoint.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def _restore(cfg: TrainConfig, run_dir: Path, env: Any) -> tuple[Any, dict[str, Any]]:
    """The model and the callback state of the run's checkpoint, the env put back where it was."""
    import torch

    with open(run_dir / "checkpoint" / "state.pkl", "rb") as f:
        extra = pickle.load(f)
    model = algo_class(cfg.algo).load(run_dir / "checkpoint" / "model.zip", env=env, device="cpu")
    venv = inner_env(env)
    obs, _ = venv.reset(options={"task": [venv.env.tasks[int(t)].task for t in extra["task_index"]]})
    obs = hide_parts(obs, cfg.hide, cfg.batch_size)
    venv.task_rng.bit_generator.state = extra["env_rng"]
    if not np.array_equal(obs, extra["last_obs"]):
        raise RuntimeError(f"{run_dir}/checkpoint: the env does not come back to its saved observation")
    model.num_timesteps, model._n_updates = extra["num_timesteps"], extra["n_updates"]
    model._last_obs, model._last_episode_starts = extra["last_obs"], extra["episode_starts"]
    torch.set_rng_state(extra["torch_rng"])
    np.random.set_state(extra["numpy_rng"])
    random.setstate(extra["python_rng"])
    return model, {**extra["state"], "partial": np.zeros(cfg.n_envs)}


def _new_model(cfg: TrainConfig, env: Any) -> Any:
    """A fresh PPO / MaskablePPO model of ``cfg`` on ``env``."""
    env.seed(cfg.seed)
    return algo_class(cfg.algo)("MlpPolicy", env, n_steps=cfg.n_steps, batch_size=cfg.minibatch,
                                n_epochs=cfg.epochs, learning_rate=cfg.learning_rate, ent_coef=cfg.ent_coef,
                                gamma=1.0, seed=cfg.seed, device="cpu", verbose=0,
                                policy_kwargs={"net_arch": list(cfg.net)})


def train(cfg: TrainConfig, out: Path = RESULTS / "runs", stop_at: int | None = None,
          argv: list[str] | None = None) -> Path:
    """Train (or resume) the run of ``cfg`` under ``out``; returns the run directory.

    ``stop_at``: stop right after the first checkpoint at or past that many steps (what a kill
    after it leaves behind; the next call resumes from it). PyTorch's distribution checks are
    off while it trains (:func:`agents.rl.unchecked_distributions`: the same policy, faster)."""
    from agents.rl import unchecked_distributions

    with unchecked_distributions():
        return _train(cfg, out, stop_at, argv)


def _train(cfg: TrainConfig, out: Path, stop_at: int | None, argv: list[str] | None) -> Path:
    """:func:`train`'s work."""
    import torch
    from stable_baselines3.common.logger import Logger

    cfg.check()
    if cfg.algo not in SB3_ALGOS:
        raise OptionError(f"--algo {cfg.algo} is trained by scripts/cleanrl_ppo.py; train_rl.py trains "
                          f"{', '.join(SB3_ALGOS)}")
    torch.set_num_threads(1)
    run_dir = out / f"{cfg.algo}-{cfg.split}-s{cfg.seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    env = make_vec_env(cfg, "train", cfg.n_envs)
    val_env = make_vec_env(cfg, "validation", cfg.eval_episodes)
    started = time.perf_counter()
    try:
        if (run_dir / "checkpoint" / "state.pkl").is_file():
            model, state = _restore(cfg, run_dir, env)
            print(f"resuming {display(run_dir)} at step {model.num_timesteps}", flush=True)
        else:
            model = _new_model(cfg, env)
            state = {"curve": [], "returns": [], "partial": np.zeros(cfg.n_envs), "step": -1,
                     "next_eval": 0, "next_checkpoint": cfg.checkpoint_every}
        model.set_logger(Logger(folder=None, output_formats=[]))
        first = model.num_timesteps
        try:
            model.learn(cfg.steps - model.num_timesteps, reset_num_timesteps=False,
                        callback=_callback(cfg, state, run_dir, val_env, stop_at))
        except _Stopped:
            return run_dir
        seconds = time.perf_counter() - started
        final = validation_return(model, cfg, val_env, cfg.seed + model.num_timesteps)
        state["curve"].append(("validation", model.num_timesteps, final, cfg.eval_episodes))
        model.save(run_dir / "policy.zip")
        write_meta(run_dir / "policy.zip", {
            "algo": cfg.algo, "split": cfg.split, "seed": cfg.seed, "timesteps": model.num_timesteps,
            "batch_size": cfg.batch_size, "budget": cfg.budget, "reward_norm": "optimum", "hide": list(cfg.hide),
            "config": asdict(cfg),
            "command": command_line("train_rl.py", argv),
            "env_steps_per_second": round((model.num_timesteps - first) / seconds, 1)})
        write_curve(state["curve"], run_dir)
        plot_curve(state["curve"], run_dir / "curve.png", f"{cfg.algo} on {cfg.split} (seed {cfg.seed})")
        print(f"{cfg.algo}: {model.num_timesteps - first} env steps in {seconds:.1f} s "
              f"({(model.num_timesteps - first) / seconds:.1f} steps/s); wrote {display(run_dir)}/policy.zip",
              flush=True)
    finally:
        env.close()
        val_env.close()
    return run_dir


def write_curve(curve: list[tuple[str, int, float, int]], run_dir: Path) -> None:
    """The learning curve as CSV: ``part, step, mean_return, episodes``."""
    with open(run_dir / "curve.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["part", "step", "mean_return", "episodes"])
        writer.writerows(curve)


def plot_curve(curve: list[tuple[str, int, float, int]], path: Path, title: str) -> None:
    """Mean episode return (best / optimum) against env steps, train and validation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for part, style in (("train", "-"), ("validation", "o-")):
        rows = [(s, r) for p, s, r, _ in curve if p == part]
        if rows:
            ax.plot(*zip(*rows), style, label=part, markersize=3)
    ax.set_xlabel("env steps")
    ax.set_ylabel("mean return (best / optimum)")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------- evaluation
def _specs(agent: str, options: dict[str, Any], split: str, part: str, budget: int, batch: int,
           seeds: int) -> list[Any]:
    """The runs of one agent on the split's part."""
    from benchmarks.leaderboard.suite import RunSpec

    refs = load_split(split).tasks(part)
    return [RunSpec(agent, ref.task, ref.preset, "replay", seed, budget, batch, options)
            for ref in refs for seed in range(seeds)]


def test_optima(split: str, part: str = "test") -> dict[str, float]:
    """The optimum GFLOPS of each task of the split's ``part``, from the data the leaderboard's
    runner replays (refused where that is not the split's host's data)."""
    from tune_gym.datasets.catalog import find_dataset
    from tune_gym.envs.multi_task import MultiTuneEnv, dataset_path

    env = MultiTuneEnv(split=split, part=part, reward_norm="optimum")
    try:
        for ref in env.tasks:
            entry = find_dataset(ref.task, ref.preset)
            if entry is None or str(entry.path) != dataset_path(ref):
                raise OptionError(f"{split}: {part} task {ref.task} is replayed by tune-gym bench from another host's "
                                  "data than the split's; evaluate a split whose test data is the catalog's")
        return {ref.task: e.reference_gflops for ref, e in zip(env.tasks, env.envs)}
    finally:
        env.close()


def evaluate(policies: list[Path], budget: int, seeds: int, out: Path = RESULTS, batch: int = 8,
             deterministic: bool = False, part: str = "test") -> dict[str, Any]:
    """Score ``policies`` and the baselines on their split's test part (see the module docstring);
    ``deterministic``: the policies take their most likely action (the ``rl-policy`` agent's
    option) instead of sampling it; ``part="validation"`` scores them on the validation part
    instead (to choose between training settings without looking at the test part)."""
    import torch

    from agents.rl_policy import load_policy
    from benchmarks.leaderboard.metrics import score_band
    from benchmarks.leaderboard.runner import run_one
    from benchmarks.leaderboard.significance import paired_test

    torch.set_num_threads(1)
    splits = {load_policy(p)[1]["split"] for p in policies}
    if len(splits) != 1:
        raise OptionError(f"the policies were trained on different splits ({', '.join(sorted(splits))}); "
                          "evaluate one split at a time")
    split = splits.pop()
    optima = test_optima(split, part)
    entries: dict[str, tuple[str, dict[str, Any]]] = {
        "random": ("random", {}), SEARCH_AGENT: (SEARCH_AGENT, {})}
    names = [path.parent.name for path in policies]
    for path in policies:
        options = {"checkpoint": str(path), **({"deterministic": True} if deterministic else {})}
        name = path.parent.name if names.count(path.parent.name) == 1 else "/".join(path.parts[-3:-1])
        entries[f"rl-policy:{name}"] = ("rl-policy", options)
    scores: dict[str, dict[tuple[str, int], float]] = {}
    for name, (agent, options) in entries.items():
        scores[name] = {}
        for spec in _specs(agent, options, split, part, budget, batch, seeds):
            line = run_one(spec)
            best = float("nan") if "not_applicable" in line else line["best_gflops"] / optima[line["task_uri"]]
            scores[name][(spec.task, spec.seed)] = best
        print(f"{name}: mean {np.nanmean(list(scores[name].values())):.3f}", flush=True)
    result = _summary(scores, split, part, budget, seeds, batch, paired_test, score_band)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rl_eval.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "rl_eval.md").write_text(_markdown(result))
    _plot_eval(result, out / "rl_eval.png")
    print(f"wrote {display(out)}/rl_eval.json, .md, .png", flush=True)
    return result


def _summary(scores: dict[str, dict[tuple[str, int], float]], split: str, part: str, budget: int, seeds: int,
             batch: int, paired_test: Any, score_band: Any) -> dict[str, Any]:
    """Mean, 95% band and the Wilcoxon tests of each policy against each baseline."""
    rows = {}
    for name, runs in scores.items():
        band = score_band(np.array([v for v in runs.values()], dtype=float))
        rows[name] = {"mean": band["mean"], "lower": band["lower"], "upper": band["upper"], "runs": band["n"],
                      "per_task": {task: float(np.nanmean([v for (t, _), v in runs.items() if t == task]))
                                   for task in dict.fromkeys(t for t, _ in runs)}}
    tests = []
    for name in scores:
        if not name.startswith("rl-policy:"):
            continue
        for base in ("random", SEARCH_AGENT):
            pairs, p, direction, why = paired_test(scores[name], scores[base])
            tests.append({"policy": name, "baseline": base, "pairs": pairs, "p": p, "direction": direction,
                          "why": why})
    return {"split": split, "part": part, "budget": budget, "batch": batch, "seeds": seeds,
            "metric": "best GFLOPS within the budget / the task's optimum", "agents": rows, "wilcoxon": tests}


def _markdown(result: dict[str, Any]) -> str:
    lines = [f"# RL policies on {result['split']} ({result['part']} part), budget {result['budget']} trials",
             "", f"{result['metric']}; mean and 95% band over {result['seeds']} seeds x the {result['part']} tasks.",
             "",
             "| agent | mean | 95% band | runs |", "|---|---:|---|---:|"]
    for name, row in result["agents"].items():
        lines.append(f"| {name} | {row['mean']:.3f} | [{row['lower']:.3f}, {row['upper']:.3f}] | {row['runs']} |")
    lines += ["", "Wilcoxon signed-rank test, paired over task x seed (two-sided):", "",
              "| policy | baseline | pairs | p | policy is |", "|---|---|---:|---:|---|"]
    for t in result["wilcoxon"]:
        verdict = t["why"] or ("higher" if t["direction"] > 0 else "lower")
        lines.append(f"| {t['policy']} | {t['baseline']} | {t['pairs']} | {t['p']:.4f} | {verdict} |")
    return "\n".join(lines) + "\n"


def _plot_eval(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["agents"])
    rows = [result["agents"][n] for n in names]
    fig, ax = plt.subplots(figsize=(1.4 * len(names) + 2, 3.5))
    means = np.array([r["mean"] for r in rows])
    err = np.array([[r["mean"] - r["lower"] for r in rows], [r["upper"] - r["mean"] for r in rows]])
    ax.bar(range(len(names)), means, yerr=np.nan_to_num(err), capsize=4)
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("best / optimum")
    ax.set_title(f"{result['split']} {result['part']}, budget {result['budget']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


#: The help of each ``train`` option (``TrainConfig``'s fields).
TRAIN_HELP = {
    "algo": f"one of {', '.join(SB3_ALGOS)} (cleanrl-ppo is scripts/cleanrl_ppo.py's)",
    "split": "the split whose train part it learns on (tune_gym/envs/splits)",
    "seed": "seed of the run (the policy and the sub-envs' task draws)",
    "steps": "env steps to train for (all sub-envs together)",
    "n_envs": "sub-envs of the native vector env",
    "batch_size": "configs proposed per env step",
    "budget": "trials per episode (a multiple of --batch-size)",
    "rollout_episodes": "whole episodes per sub-env in each rollout",
    "minibatch": "PPO minibatch size",
    "epochs": "PPO epochs per rollout",
    "learning_rate": "Adam learning rate",
    "ent_coef": "entropy bonus coefficient",
    "eval_every": "env steps between evaluations on the validation part",
    "eval_episodes": "episodes per evaluation",
    "checkpoint_every": "env steps between checkpoints (a killed run resumes from the last one)",
    "hide": "observation parts the policy trains and runs without (zeroed), e.g. task slot_extents",
}


# ---------------------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train (or resume) one run")
    defaults = TrainConfig()
    for field, value in asdict(defaults).items():
        if field == "net":
            t.add_argument("--net", type=int, nargs="+", default=list(value), help="hidden layer widths")
        elif field == "hide":
            t.add_argument("--hide", nargs="*", default=list(value), metavar="PART",
                           choices=list(observation_slices(defaults.batch_size)), help=f"{TRAIN_HELP[field]} "
                           f"(of {', '.join(observation_slices(defaults.batch_size))}; default none)")
        else:
            t.add_argument(f"--{field.replace('_', '-')}", type=type(value), default=value,
                           help=f"{TRAIN_HELP[field]} (default {value})")
    t.add_argument("--out", type=Path, default=RESULTS / "runs", help="folder of the runs (default %(default)s)")
    e = sub.add_parser("evaluate", help="score policies on their split's test (or validation) part")
    e.add_argument("policies", type=Path, nargs="+", help="policy.zip / policy.pt files of one split")
    e.add_argument("--budget", type=int, default=64, help="trials per run (default %(default)s)")
    e.add_argument("--seeds", type=int, default=10, help="runs per task and agent (default %(default)s)")
    e.add_argument("--batch", type=int, default=8, help="configs per env step (default %(default)s)")
    e.add_argument("--out", type=Path, default=RESULTS, help="folder of rl_eval.{json,md,png} (default %(default)s)")
    e.add_argument("--part", choices=("test", "validation"), default="test",
                   help="the split's part to score on (default %(default)s; validation: to choose settings)")
    e.add_argument("--deterministic", action="store_true",
                   help="the policies take their most likely action instead of sampling it")
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            fields = {k: getattr(args, k) for k in asdict(defaults)}
            train(TrainConfig(**{**fields, "net": tuple(args.net), "hide": tuple(args.hide)}), args.out, argv=argv)
        else:
            evaluate(args.policies, args.budget, args.seeds, args.out, args.batch, args.deterministic, args.part)
    except (OptionError, ValueError) as err:
        parser.exit(2, f"train_rl.py: error: {err}\n")


if __name__ == "__main__":
    main()
