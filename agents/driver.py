"""One-call tuning of a task with an agent (``tune-gym tune`` and ``make demo`` use it)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from agents.base import RunResult, make_agent, run
from tune_gym import kinds
from tune_gym.session import Trial
from tune_gym.tasks.task import Task

__all__ = ["TuneSummary", "plot_best_so_far", "print_summary", "tune"]


@dataclass
class TuneSummary:
    task: Task
    agent: str
    run: RunResult
    reference_gflops: float | None  # None: rewards were raw GFLOPS (reward_norm="none")
    reference_method: str
    space_size: int
    log: Path | None
    plot: Path | None
    export: Path | None


def tune(
    task: Task, agent: str = "random", agent_options: dict[str, Any] | None = None, trials: int = 64,
    batch: int = 8, log: str | Path | None = None, resume: bool = False, seed: int = 0, preset: str = "full",
    plot: str | Path | None = None, export: str | Path | None = None, progress: bool = True,
    backend: str = "live", backend_options: dict[str, Any] | None = None, reward_norm: str | float = "torch",
    allow_suspect_reference: bool = False,
) -> TuneSummary:
    """Tune ``task`` with an agent on a ``Tune-v0`` env; write records, plot and database if asked.

    ``reward_norm`` and ``allow_suspect_reference`` are the env's: ``"torch"`` (PyTorch on the
    same op: recorded with the data, else measured here on a quiet host), ``"none"`` (raw
    GFLOPS) or a number; and whether a recorded reference the reference audit marks suspect
    may be used."""
    tuner = make_agent(agent, **(agent_options or {}))
    # the env observes what the task's kind observes by default (knobs where configs have no schedule)
    env = gym.make("tune_gym/Tune-v0", task=task, backend=backend, batch_size=batch, budget=trials,
                   preset=preset, log=log, resume=resume, backend_options=backend_options,
                   disable_env_checker=True, observation=kinds.default_observation(task),
                   reward_norm=reward_norm, allow_suspect_reference=allow_suspect_reference,
                   max_episode_steps=-1)  # the run loop ends the run (agents.base.EnvRunner), not a step limit
    base: Any = env.unwrapped
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=trials, desc=f"{agent} {task.op}", unit="trial", dynamic_ncols=True)

    def on_step(new: Sequence[Trial]) -> None:
        if bar is not None:
            bar.update(len(new))
            best = base.session.best
            if task.flops_nominal:  # no FLOP count: show the time per call
                bar.set_postfix(best=f"{best.result.mean * 1e3:.4g} ms" if best is not None else "-")
            else:
                bar.set_postfix(best=f"{base.best[1]:.1f} GFLOPS")

    try:
        result = run(tuner, env, seed=seed, callback=on_step)
    finally:
        if bar is not None:
            bar.close()
        env.close()
    reference = None if reward_norm == "none" else base.reference_gflops
    if plot is not None:
        plot_best_so_far(result, reference, plot)
    if export is not None and log is not None:
        from tune_gym.records import export_database, load_records

        export_database(load_records(log, task=task.uri), export)
    method = base.reference.method if base.reference is not None else "given"
    return TuneSummary(task, agent, result, reference, method, base.space.size,
                       Path(log) if log else None, Path(plot) if plot else None,
                       Path(export) if export and log else None)


def plot_best_so_far(result: RunResult, reference_gflops: float | None, path: str | Path) -> Path:
    """Best-so-far GFLOPS against unique trials (PNG), with PyTorch's GFLOPS as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    best = result.best_so_far()
    unit = "nominal GFLOPS (a decreasing function of time; no FLOP count)" if result.task.flops_nominal else "GFLOPS"
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    ax.plot(range(1, len(best) + 1), best, label=f"{result.agent} (best so far)")
    ok = [(t.index, t.result.gflops) for t in result.trials if t.result.ok]
    if ok:
        xs, ys = zip(*ok)
        ax.scatter(xs, ys, s=6, alpha=0.35, label="measured configs")
    if reference_gflops:
        label = "reference" if result.task.flops_nominal else f"PyTorch {reference_gflops:.1f} GFLOPS"
        ax.axhline(reference_gflops, color="gray", linestyle="--", label=label)
    ax.set_xlabel("unique trials")
    ax.set_ylabel(unit)
    ax.set_title(result.task.uri, fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def print_summary(summary: TuneSummary, top: int = 5) -> None:
    """A plain-text result table."""
    run = summary.run
    trials = run.trials
    errors = Counter(t.result.error for t in trials if not t.result.ok)
    measured = [t for t in trials if t.source == "measured"]
    build = sum(t.result.build_secs for t in measured)
    timing = sum(t.result.run_secs for t in measured)
    print(f"\ntask      {summary.task.uri}")
    print(f"agent     {summary.agent}   space {summary.space_size:.4g} configs")
    print(f"trials    {len(trials)} unique ({len(measured)} measured now, {len(trials) - len(measured)} from the log)"
          f"   failed: {dict(errors) if errors else 0}")
    print(f"time      {run.seconds:.1f} s wall  (build {build:.1f} s, timing {timing:.1f} s)")
    adaptive = [t.result.extra for t in measured if "seconds_saved_estimate" in t.result.extra]
    if adaptive:
        runs = sum(e["runs"] for e in adaptive)
        full = sum(e["max_runs"] for e in adaptive)
        saved = sum(e["seconds_saved_estimate"] for e in adaptive)
        print(f"adaptive  {runs} of {full} timing runs used ({1 - runs / full:.0%} saved, "
              f"about {saved:.1f} s of kernel timing saved)")
    nominal = summary.task.flops_nominal  # "GFLOPS" would be a nominal count over time: show times
    ranked = sorted((t for t in trials if t.result.ok), key=lambda t: -t.result.gflops)[:top]
    if ranked:
        head = "" if nominal else f" {'GFLOPS':>9}"
        print(f"\n{'rank':>4} {'trial':>6}{head} {'ms':>9} {'std ms':>8}  config")
        for i, t in enumerate(ranked, 1):
            r = t.result
            rate = "" if nominal else f" {r.gflops:>9.2f}"
            print(f"{i:>4} {t.index:>6}{rate} {r.mean * 1e3:>9.3f} {r.std * 1e3:>8.3f}  {list(t.config)}")
    best, reference = run.best, summary.reference_gflops
    if best is not None and not reference:
        speed = f"{best.result.mean * 1e3:.4g} ms per call" if nominal else f"{best.result.gflops:8.2f} GFLOPS"
        print(f"\nbest tuned kernel  {speed}   (no reference: reward_norm none)")
    elif best is not None and reference:
        ratio = best.result.gflops / reference
        if nominal:
            print(f"\nbest tuned kernel  {best.result.mean * 1e3:.4g} ms per call   -> {ratio:.2f}x the reference's "
                  "speed")
        else:
            print(f"\nbest tuned kernel  {best.result.gflops:8.2f} GFLOPS")
            ref = "simulated peak" if "simulated" in (summary.reference_method or "") else "PyTorch (same op)"
            print(f"{ref:<18} {reference:8.2f} GFLOPS   -> tuned/{ref.split(' (')[0]} = {ratio:.2f}x")
        print(f"                   ({summary.reference_method})")
    for label, path in (("records", summary.log), ("plot", summary.plot), ("database", summary.export)):
        if path is not None:
            print(f"{label:<9} {path}")
