"""Benchmark suites: data files (``benchmarks/suites/<name>.toml``) naming agents, tasks, seeds.

A suite file::

    name = "quick"
    description = "..."
    backend = "replay"      # default backend of its tasks: replay | surrogate | live
    seeds = 10              # runs per (agent, task), seeds 0..seeds-1
    batch = 8               # configs per env step
    agents = ["*"]          # agent ids, "*" = every registered agent that is available,
                            # "kt:NAME" = Kernel Tuner's strategy NAME (kt_entries)
    [agent_options]         # optional per-agent options
    rl-ppo = { n_steps = 64 }
    "meta-bo/no-fine-tune" = { fine_tune = false }   # a variant: ID/NAME runs agent ID with these options
    [agent_seeds]           # optional: fewer seeds for an entry too costly to run them all
    "kt:bayes_opt" = 10     # seeds 0..9 only; its leaderboard band is wider, and says so

    [[task]]
    id = "resnet18:7"       # suite task id or task URI
    preset = "compact"
    budget = 128            # unique trials per run
    weight = 3              # occurrences in its network (the geometric mean's weight)
    backend = "surrogate"   # optional override of the suite's backend

An agent entry ``ID/NAME`` is a variant of agent ``ID`` (an ablation, another checkpoint): it runs
``ID`` with the options listed under its own name, and is a row of its own on the leaderboard.

Every run of a suite is a :class:`RunSpec`; its :attr:`RunSpec.key` names it in the
results file, so a resumed benchmark skips what is done, and a suite that grows (more
tasks, agents or seeds) keeps the runs it already has.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.leaderboard import kt_entries

__all__ = ["SUITE_DIR", "RunSpec", "Suite", "SuiteError", "SuiteTask", "base_agent", "list_suites", "load_suite"]

SUITE_DIR = Path(__file__).resolve().parents[1] / "suites"
_BACKENDS = ("replay", "surrogate", "live")


def base_agent(name: str) -> str:
    """The registered agent id of a suite's agent entry (``meta-bo/no-augment`` -> ``meta-bo``)."""
    return name.split("/", 1)[0]


class SuiteError(ValueError):
    """A suite file that cannot be run: unknown keys, bad values, unknown agents or tasks."""


@dataclass(frozen=True)
class SuiteTask:
    id: str
    preset: str
    budget: int
    weight: int = 1
    backend: str = "replay"


@dataclass(frozen=True)
class RunSpec:
    """One run of the leaderboard: an agent tuning a task with a seed."""

    agent: str
    task: str
    preset: str
    backend: str
    seed: int
    budget: int
    batch: int
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Names the run: two runs with the same key give the same results (on replay)."""
        key = f"{self.agent}|{self.task}|{self.preset}|{self.backend}|{self.budget}|{self.batch}|{self.seed}"
        return key + (f"|{json.dumps(self.options, sort_keys=True)}" if self.options else "")


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    agents: tuple[str, ...]
    seeds: int
    batch: int
    tasks: tuple[SuiteTask, ...]
    agent_options: dict[str, dict[str, Any]]
    path: Path | None = None
    agent_seeds: dict[str, int] = field(default_factory=dict)

    def seeds_of(self, agent: str) -> int:
        """How many seeds ``agent`` runs: the suite's, or fewer where ``[agent_seeds]`` says so."""
        return self.agent_seeds.get(agent, self.seeds)

    def runs(self, agents: list[str] | None = None, seeds: int | None = None) -> list[RunSpec]:
        """Every run, task-major then seed then agent (so early results cover every agent); ``seeds``
        runs only the first that many seeds, and an agent never more than :meth:`seeds_of` it."""
        chosen = list(self.agents if agents is None else agents)
        n_seeds = self.seeds if seeds is None else seeds
        return [RunSpec(a, t.id, t.preset, t.backend, s, t.budget, self.batch, self.agent_options.get(a, {}))
                for t in self.tasks for s in range(n_seeds) for a in chosen if s < self.seeds_of(a)]

    @classmethod
    def from_dict(cls, d: Any) -> Suite:
        """The suite as a results file's header stores it; SuiteError names a missing or bad field."""
        if not isinstance(d, dict):
            raise SuiteError(f"a suite is a JSON object, got {type(d).__name__}")
        if missing := [k for k in _SUITE_FIELDS if k not in d]:
            raise SuiteError(f"suite lacks {', '.join(missing)}")
        if unknown := sorted(set(d) - {*_SUITE_FIELDS, "agent_seeds"}):
            raise SuiteError(f"suite has unknown fields {unknown}")
        name, agents, options = d["name"], d["agents"], d["agent_options"]
        if not isinstance(name, str) or not isinstance(d["description"], str):
            raise SuiteError("suite name and description must be strings")
        if not isinstance(agents, list) or not agents or not all(isinstance(a, str) and a for a in agents):
            raise SuiteError(f"suite {name!r}: agents must be a non-empty list of agent ids, got {agents!r}")
        if len(set(agents)) != len(agents):
            raise SuiteError(f"suite {name!r}: agents {agents} list an agent twice")
        seeds, batch = _positive(d["seeds"], f"suite {name!r}: seeds"), _positive(d["batch"], f"suite {name!r}: batch")
        if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
            raise SuiteError(f"suite {name!r}: agent_options must map agent ids to option objects")
        tasks = d["tasks"]
        if not isinstance(tasks, list) or not tasks:
            raise SuiteError(f"suite {name!r}: tasks must be a non-empty list")
        return cls(name, d["description"], tuple(agents), seeds, batch,
                   tuple(_suite_task(t, f"suite {name!r}: task {i + 1}") for i, t in enumerate(tasks)),
                   {k: dict(v) for k, v in options.items()},
                   agent_seeds=_agent_seeds(d.get("agent_seeds", {}), agents, seeds, f"suite {name!r}"))

    @property
    def digest(self) -> str:
        """A hash of what the suite runs (results of another digest are another benchmark)."""
        body = {k: v for k, v in asdict(self).items() if k not in ("path", "description")}
        if not self.agent_seeds:  # a suite without [agent_seeds] keeps the digest it always had
            del body["agent_seeds"]
        return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]


_SUITE_FIELDS = ("name", "description", "agents", "seeds", "batch", "tasks", "agent_options")


def _agent_seeds(value: Any, agents: Any, seeds: int, where: str) -> dict[str, int]:
    """``[agent_seeds]`` checked: each key one of the suite's agents, each value in 1..seeds."""
    if not isinstance(value, dict):
        raise SuiteError(f"{where}: agent_seeds must map agent ids to seed counts, got {value!r}")
    for agent, n in value.items():
        if agent not in agents:
            raise SuiteError(f"{where}: agent_seeds names {agent!r}, which is not one of the suite's agents")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= seeds:
            raise SuiteError(f"{where}: agent_seeds[{agent!r}] must be an int in 1..{seeds} (the suite's seeds), "
                             f"got {n!r}")
    return dict(value)


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SuiteError(f"{what} must be an int >= 1, got {value!r}")
    return value


def _suite_task(t: Any, where: str) -> SuiteTask:
    """A task of a stored suite (:meth:`Suite.from_dict`), every field checked."""
    if not isinstance(t, dict) or set(t) != {"id", "preset", "budget", "weight", "backend"}:
        raise SuiteError(f"{where}: a task is an object with id, preset, budget, weight and backend, got {t!r}")
    if not all(isinstance(t[k], str) for k in ("id", "preset", "backend")):
        raise SuiteError(f"{where}: id, preset and backend must be strings")
    if t["backend"] not in _BACKENDS:
        raise SuiteError(f"{where}: backend {t['backend']!r} is not one of {', '.join(_BACKENDS)}")
    return SuiteTask(t["id"], t["preset"], _positive(t["budget"], f"{where}: budget"),
                     _positive(t["weight"], f"{where}: weight"), t["backend"])


def list_suites() -> list[str]:
    return sorted(p.stem for p in SUITE_DIR.glob("*.toml"))


def load_suite(name: str | Path) -> Suite:
    """A suite by name (``quick``) or by path to a ``.toml`` file; SuiteError names the problem."""
    path = Path(name)
    if path.suffix != ".toml":
        path = SUITE_DIR / f"{name}.toml"
    if not path.exists():
        raise SuiteError(f"no suite {name!r}: known suites are {', '.join(list_suites())} (files in {SUITE_DIR})")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise SuiteError(f"{path}: {err}") from None
    known = {"name", "description", "backend", "seeds", "batch", "agents", "agent_options", "agent_seeds", "task"}
    if unknown := set(raw) - known:
        raise SuiteError(f"{path}: unknown keys {sorted(unknown)}; known: {sorted(known)}")
    backend = raw.get("backend", "replay")
    tasks = []
    for i, t in enumerate(raw.get("task", [])):
        where = f"{path}: task {i + 1} ({t.get('id', '?')})"
        if unknown := set(t) - {"id", "preset", "budget", "weight", "backend"}:
            raise SuiteError(f"{where}: unknown keys {sorted(unknown)}")
        if "id" not in t or "budget" not in t:
            raise SuiteError(f"{where}: needs id and budget")
        task = SuiteTask(str(t["id"]), str(t.get("preset", "compact")), int(t["budget"]), int(t.get("weight", 1)),
                         str(t.get("backend", backend)))
        if task.backend not in _BACKENDS:
            raise SuiteError(f"{where}: backend {task.backend!r} is not one of {', '.join(_BACKENDS)}")
        if task.budget < 1 or task.weight < 1:
            raise SuiteError(f"{where}: budget and weight must be >= 1")
        tasks.append(task)
    if not tasks:
        raise SuiteError(f"{path}: no [[task]] entries")
    agents = _agents(raw.get("agents", ["*"]), path)
    options = {k: dict(v) for k, v in raw.get("agent_options", {}).items()}
    for name in agents:
        if kt_entries.is_entry(name) and (problem := kt_entries.suite_problem(name, options.get(name, {}))):
            raise SuiteError(f"{path}: agents: {problem}")
    seeds, batch = int(raw.get("seeds", 10)), int(raw.get("batch", 8))
    if seeds < 1 or batch < 1:
        raise SuiteError(f"{path}: seeds and batch must be >= 1")
    return Suite(str(raw.get("name", path.stem)), str(raw.get("description", "")), agents, seeds, batch,
                 tuple(tasks), options, path, _agent_seeds(raw.get("agent_seeds", {}), agents, seeds, str(path)))


def _agents(entries: Any, path: Path) -> tuple[str, ...]:
    """A suite file's agent entries, ``"*"`` expanded in place to every available agent; each
    entry a known agent id, a variant ``ID/NAME`` of one, or a Kernel Tuner strategy ``kt:NAME``
    (:mod:`benchmarks.leaderboard.kt_entries`)."""
    from agents.base import list_agents, on_request_agents, unavailable_agents

    if not isinstance(entries, list) or not all(isinstance(a, str) and a for a in entries):
        raise SuiteError(f"{path}: agents must be a list of agent ids, got {entries!r}")
    known, unavailable = list_agents(), unavailable_agents()
    expanded: list[str] = []
    for name in entries:
        expanded += [a for a in known if a not in unavailable] if name == "*" else [name]
    agents = tuple(dict.fromkeys(expanded))
    ids = {*known, *unavailable, *on_request_agents()}
    unknown = [a for a in agents if not kt_entries.is_entry(a) and base_agent(a) not in ids]
    if unknown:
        raise SuiteError(f"{path}: unknown agent(s) {unknown}; known: {', '.join(known)} "
                         "(a variant is ID/NAME with a known ID; a Kernel Tuner strategy is kt:NAME)")
    return agents
