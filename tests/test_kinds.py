"""The task-kind registry (tune_gym.kinds): registration, lookups, collisions, lazy references,
discovery, and a toy kind defined here that goes through the core like any registered kind."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tune_gym.measure  # reserves the core backends before the registry snapshot
import tune_gym.tasks  # noqa: F401  (reserves the core ops, suites and URI schemes)
from tune_gym import kinds
from tune_gym.errors import TaskError
from tune_gym.kinds import BackendEntry, TargetOption, TaskKind
from tune_gym.measure.base import Backend


@pytest.fixture(autouse=True)
def _clean_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test sees the discovered kinds and leaves no runtime kind behind."""
    kinds.kind_names()  # discover first, so the snapshot holds the builtin kinds
    saved = dict(kinds._kinds), dict(kinds._origin), {c: dict(n) for c, n in kinds._reserved.items()}
    yield
    kinds._kinds.clear()
    kinds._kinds.update(saved[0])
    kinds._origin.clear()
    kinds._origin.update(saved[1])
    for category, names in saved[2].items():
        kinds._reserved[category].clear()
        kinds._reserved[category].update(names)


# ---------------------------------------------------------------------------- the toy kind
class _ToyBackend(Backend):
    """Answers every config with one fixed latency (a simulated clock)."""

    simulated = True

    def __init__(self, latency: float = 1e-3) -> None:
        self.latency = latency

    def measure(self, task: Any, space: Any, configs: Any) -> list[Any]:
        from tune_gym.measure import MeasureResult

        return [MeasureResult(costs=(self.latency,), flops=task.flops, run_secs=self.latency,
                              extra={"simulated": True}) for _ in configs]

    def close(self) -> None:
        pass


def _toy_check_width(value: str, where: str) -> str:
    if value not in ("8", "16", "32"):
        raise TaskError(f"{where}={value!r} out of range; accepted: 8, 16, 32")
    return value


def _toy_space(task: Any, preset: str) -> Any:
    from tune_gym.space import Knob, KnobSpace

    space = KnobSpace.__new__(KnobSpace)
    space._init_one_sketch(task, preset, [Knob("unroll", "categorical", (1, 2, 4)),
                                          Knob("vector", "categorical", (1, 8))])
    space.has_schedules = False  # type: ignore[misc]  # a knob space with no TVM program behind it
    return space


def _toy_op() -> Any:
    from tune_gym.tasks import OpDef

    return OpDef("toy_scale", 1, ("n",), lambda q, dtype: [], lambda q: 2 * q["n"], lambda q: [(q["n"],)],
                 lambda torch, q, x: x[0] * 2, "y = 2x on the toy accelerator", output_shape=lambda q: (q["n"],),
                 targets=("toy",))


_TOY_OP = _toy_op()


def _toy_parse(text: str) -> Any:
    """``toy://<n>``: the toy_scale task of size n."""
    from tune_gym.tasks import Task

    digits = text.removeprefix("toy://")
    if not digits.isdecimal():
        raise TaskError(f"toy URI {text!r}: expected toy://<n>")
    return Task.make("toy_scale", target="toy", n=int(digits))


def _toy_suite(spec: Any) -> Any:
    from tune_gym.tasks import Suite, SuiteTask, Task

    return Suite("toybench", "two toy tasks", tuple(SuiteTask(Task.make("toy_scale", target=spec, n=n), 1)
                                                   for n in (64, 128)))


def _toy_kind(name: str = "toy", **changes: Any) -> TaskKind:
    fields: dict[str, Any] = dict(
        name=name, summary="a toy accelerator", space=_toy_space,
        options=(TargetOption("width", _toy_check_width, 16),),
        ops={"toy_scale": _TOY_OP},
        backends={"toy-sim": BackendEntry(_ToyBackend, "a fixed latency for every config")},
        suites={"toybench": _toy_suite},
        uri_schemes={"toy://": _toy_parse},
        data_subdir="toy",
    )
    fields.update(changes)
    return TaskKind(**fields)


def _bare(name: str, **changes: Any) -> TaskKind:
    """A kind of the toy's shape that owns no op, backend, suite, URI scheme or data folder."""
    return _toy_kind(name, **{**dict(ops={}, backends={}, suites={}, uri_schemes={}, data_subdir=None), **changes})


# ---------------------------------------------------------------------------- registration and lookups
def test_register_and_look_up() -> None:
    toy = _toy_kind()
    kinds.register_kind(toy)
    assert kinds.get_kind("toy") is toy
    assert kinds.require_kind("toy") is toy
    assert kinds.kind_names()[:2] == ["llvm", "cuda"] and "toy" in kinds.kind_names()
    assert kinds.owner_of_backend("toy-sim") is toy and "toy-sim" in kinds.backend_ids()
    assert kinds.owner_of_suite("toybench") is toy and "toybench" in kinds.suite_names()
    assert kinds.owner_of_op("toybench") is None
    assert kinds.uri_parser("toy://a/b") is _toy_parse and kinds.owner_of_op("toy_scale") is toy
    assert kinds.uri_parser("op://dense-v1/m1_n1_k1?target=llvm") is None
    backend = kinds.load(toy.backends["toy-sim"].factory)(latency=2.0)
    assert isinstance(backend, _ToyBackend) and backend.latency == 2.0
    assert not kinds.is_discoverable("toy") and kinds.is_discoverable("llvm")


def test_core_kinds_are_not_registered() -> None:
    assert kinds.get_kind("llvm") is None and kinds.get_kind("cuda") is None
    assert kinds.require_kind("llvm") is None
    with pytest.raises(TaskError, match="kind llvm is a core target kind"):
        kinds.register_kind(_toy_kind("llvm"))


def test_unknown_kind_lists_registered_kinds() -> None:
    kinds.register_kind(_toy_kind())
    with pytest.raises(TaskError, match=r"unknown target kind 'rocm'; known: llvm, cuda, .*toy"):
        kinds.require_kind("rocm")
    with pytest.raises(TaskError, match="unknown target kind 5; known: llvm, cuda"):
        kinds.require_kind(5)
    assert kinds.get_kind("rocm") is None


def test_default_observation() -> None:
    class _Spec:
        def __init__(self, kind: str) -> None:
            self.kind = kind

    class _Task:
        def __init__(self, kind: str) -> None:
            self.target = _Spec(kind)

    kinds.register_kind(_toy_kind())
    kinds.register_kind(_bare("toyg", has_schedules=True, default_observation="graph"))
    assert kinds.default_observation(_Task("llvm")) == "sequence"
    assert kinds.default_observation(_Task("toy")) == "knobs"
    assert kinds.default_observation(_Task("toyg")) == "graph"


def test_name_taken_and_replace() -> None:
    kinds.register_kind(_toy_kind())
    with pytest.raises(TaskError, match="kind toy is already registered .runtime.; pass replace=True"):
        kinds.register_kind(_toy_kind())
    other = _toy_kind(summary="another toy")
    kinds.register_kind(other, replace=True)
    assert kinds.get_kind("toy") is other
    kinds.unregister_kind("toy")
    assert kinds.get_kind("toy") is None


@pytest.mark.parametrize("changes, message", [
    ({"suites": {"toybench": str}}, "suite 'toybench' of kind toy2 is also kind toy's"),
    ({"backends": {"toy-sim": BackendEntry(str, "x")}}, "backend 'toy-sim' of kind toy2 is also kind toy's"),
    ({"uri_schemes": {"toy://": str}}, "uri_scheme 'toy://' of kind toy2 is also kind toy's"),
    ({"data_subdir": "toy"}, "data_subdir 'toy' of kind toy2 is also kind toy's"),
    ({"ops": {"toy_scale": "x.y:z"}}, "op 'toy_scale' of kind toy2 is also kind toy's"),
])
def test_collision_with_another_kind(changes: dict[str, Any], message: str) -> None:
    kinds.register_kind(_toy_kind())
    with pytest.raises(TaskError, match=message):
        kinds.register_kind(_bare("toy2", **changes))
    assert kinds.get_kind("toy2") is None


def test_collision_with_core_names() -> None:
    kinds.reserve("backend", ["live"], "tune_gym.measure")
    with pytest.raises(TaskError, match=r"backend 'live' of kind toy is the core's \(tune_gym.measure\)"):
        kinds.register_kind(_toy_kind(backends={"live": BackendEntry(_ToyBackend, "x")}))
    kinds.register_kind(_toy_kind())
    with pytest.raises(TaskError, match="suite 'toybench' of tune_gym.tasks.suites is also kind toy's"):
        kinds.reserve("suite", ["toybench"], "tune_gym.tasks.suites")


@pytest.mark.parametrize("changes, message", [
    ({"name": "Toy"}, r"kind name 'Toy' is not \[a-z\]"),
    ({"name": "a" * 17}, "is not"),
    ({"space": 3}, "kind toy: space must be a callable or a 'package.module:attribute' str, got int"),
    ({"space": "no colon"}, "kind toy: space 'no colon' is not 'package.module:attribute'"),
    ({"default_observation": "pixels"}, "default_observation 'pixels' is not one of sequence, graph, knobs"),
    ({"default_observation": "sequence"}, "default_observation 'sequence' needs schedules"),
    ({"backends": {"x": _ToyBackend}}, "kind toy: backend 'x' must be a BackendEntry"),
    ({"uri_schemes": {"toy:": str}}, "kind toy: URI scheme 'toy:' is not '<scheme>://'"),
    ({"options": (TargetOption("w", str), TargetOption("w", str))}, "option .* is not a TargetOption with a new name"),
    ({"suites": {"s": 1}}, "kind toy: suite 's' must be a callable"),
])
def test_bad_descriptor(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(TaskError, match=message):
        kinds.register_kind(_toy_kind(**changes))


def test_register_takes_a_task_kind() -> None:
    with pytest.raises(TaskError, match="register_kind takes a TaskKind, got dict"):
        kinds.register_kind({"name": "toy"})  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- references
def test_load_imports_on_first_use() -> None:
    import json

    assert kinds.load("json:dumps") is json.dumps
    assert kinds.load("os.path:join.__name__") == "join"
    assert kinds.load(len) is len
    with pytest.raises(TaskError, match="reference 'json:no_such' cannot be loaded: AttributeError"):
        kinds.load("json:no_such")
    with pytest.raises(TaskError, match="reference 'no_such_module_x:f' cannot be loaded: ModuleNotFoundError"):
        kinds.load("no_such_module_x:f")
    with pytest.raises(TaskError, match="reference 'json' is not 'package.module:attribute'"):
        kinds.load("json")


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.text(max_size=24))
def test_load_refuses_malformed_references(text: str) -> None:
    """Any str is either loaded or refused with a one-line TaskError naming it."""
    try:
        kinds.load(text)
    except TaskError as err:
        assert "\n" not in str(err) and repr(text)[:20] in str(err)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.text(max_size=20))
def test_kind_names_are_checked(name: str) -> None:
    """A name is registered exactly when it fits [a-z][a-z0-9_]{0,15} and is free."""
    ok = bool(re.fullmatch(r"[a-z][a-z0-9_]{0,15}", name, re.ASCII)) and name not in kinds.kind_names()
    try:
        kinds.register_kind(_bare(name))
    except TaskError as err:
        assert not ok and "\n" not in str(err)
    else:
        assert ok
        kinds.unregister_kind(name)


# ---------------------------------------------------------------------------- discovery
def test_broken_entry_point_is_skipped_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    class _Entry:
        name, value = "broken", "no_such_pkg.kind:KIND"

        def load(self) -> Any:
            raise ImportError("no module named no_such_pkg")

    class _Good:
        name, value = "good", "tests:toy"

        def load(self) -> Any:
            return _bare("plugged")

    monkeypatch.setattr(kinds, "entry_points", lambda group: [_Entry(), _Good()])
    monkeypatch.setattr(kinds, "_discovered", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert "plugged" in kinds.kind_names()
    assert any("entry point 'broken' (no_such_pkg.kind:KIND) skipped: ImportError" in str(w.message) for w in caught)
    assert kinds.is_discoverable("plugged")


# ---------------------------------------------------------------------------- the vta kind
def test_vta_kind_agrees_with_its_package() -> None:
    from tune_gym.vta.kind import VTA_DEFAULTS
    from tune_gym.vta.space import VTASpace

    vta = kinds.get_kind("vta")
    assert vta is not None and kinds.is_discoverable("vta") and kinds.kind_names()[:3] == ["llvm", "cuda", "vta"]
    assert {o.name: o.default for o in vta.options} == VTA_DEFAULTS
    assert set(vta.suites) == {"deepbench", "resnet18_vta"} and list(vta.backends) == ["vta-sim"]
    assert vta.has_schedules == VTASpace.has_schedules and vta.default_observation == "knobs"
    assert kinds.load(vta.space) == VTASpace.for_task
    assert kinds.load(vta.backends["vta-sim"].factory).__name__ == "VTASimBackend"
    assert all(callable(kinds.load(ref)) for ref in vta.suites.values())
    check = kinds.load(vta.options[1].check)
    assert check("05", "w") == "5"
    with pytest.raises(TaskError, match=r"^w='9' out of range; accepted: an integer in \[1, 6\]$"):
        check("9", "w")


def test_builtin_kinds_import_nothing_heavy() -> None:
    """The registry's builtin entries (vta, kt) load without their packages' modules or the core's."""
    code = ("import sys, tune_gym, tune_gym.kinds as k; before = set(sys.modules); "
            "assert k.get_kind('vta').name == 'vta'; print(sorted(set(sys.modules) - before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['tune_gym.external', 'tune_gym.external.kind', 'tune_gym.vta', 'tune_gym.vta.kind']"


# ---------------------------------------------------------------------------- the core asks the registry
def test_space_of_a_registered_kind() -> None:
    from types import SimpleNamespace

    from tune_gym.space import KnobSpace

    kinds.register_kind(_toy_kind())
    task = SimpleNamespace(target=SimpleNamespace(kind="toy"), uri="toy://t")
    space = KnobSpace.for_task(task, "compact")  # type: ignore[arg-type]
    assert space.names == ["unroll", "vector"] and space.size == 6 and space.preset == "compact"
    assert space.to_dict(space.config(space.index(space.from_dict({"unroll": 4, "vector": 8})))) == {
        "unroll": 4, "vector": 8}


def test_backend_of_a_registered_kind() -> None:
    from tune_gym.measure import BACKENDS, backend_ids, make_backend
    from tune_gym.options import OptionError

    assert "vta-sim" in BACKENDS and BACKENDS[:4] == ("live", "replay", "surrogate", "rpc")
    kinds.register_kind(_toy_kind())
    backend = make_backend("toy-sim", latency=0.5)
    assert isinstance(backend, _ToyBackend) and backend.latency == 0.5
    assert "toy-sim" in backend_ids()
    with pytest.raises(OptionError, match=r"unknown backend 'nope'; known backends: live, replay, surrogate, rpc, "
                                          r".*toy-sim"):
        make_backend("nope")
    with pytest.raises(TaskError, match="backend 'replay' of kind toy2 is the core's .tune_gym.measure."):
        kinds.register_kind(_bare("toy2", backends={"replay": BackendEntry(_ToyBackend, "x")}))


def _toy_dataset(task: Any, preset: str) -> Any:
    """The toy kind's own data: its backend's answer for every config but the last one."""
    from tune_gym.datasets import Dataset
    from tune_gym.records import Record
    from tune_gym.space import KnobSpace

    space = KnobSpace.for_task(task, preset)
    configs = list(space)[:-1]
    results = _ToyBackend(2e-3).measure(task, space, configs)
    return Dataset.from_records([Record.create(space, c, r, "toy-sim") for c, r in zip(configs, results)])


def test_data_of_a_registered_kind_is_replayed() -> None:
    """A kind's ``dataset`` is what the replay backend serves its tasks, without the catalog; a
    config the data lacks stays an error (the toy space excludes nothing)."""
    from tune_gym.errors import TuneGymError
    from tune_gym.measure import make_backend
    from tune_gym.space import KnobSpace
    from tune_gym.tasks import Task

    kinds.register_kind(_toy_kind(dataset=_toy_dataset))
    task = Task.parse("toy://64")
    space = KnobSpace.for_task(task)
    backend: Any = make_backend("replay")
    assert [r.costs for r in backend.measure(task, space, list(space)[:2])] == [(2e-3,), (2e-3,)]
    assert backend.sources == ["(in memory)"] and not backend.covers(task, space)
    assert space.excluded(list(space)[-1]) is None
    with pytest.raises(TuneGymError, match="is not in the dataset"):
        backend.measure(task, space, list(space)[-1:])


def test_suites_of_a_registered_kind_are_listed() -> None:
    from tune_gym.tasks import get_suite, suite_names

    kinds.register_kind(_toy_kind())
    assert suite_names()[-1] == "toybench" and {"resnet18", "deepbench", "resnet18_vta"} <= set(suite_names())
    with pytest.raises(TaskError, match=r"unknown suite 'nope'; known suites: .*resnet18, .*deepbench, .*toybench"):
        get_suite("nope")
    with pytest.raises(TaskError, match="suite 'resnet18' of kind toy2 is the core's .tune_gym.tasks.suites."):
        kinds.register_kind(_bare("toy2", suites={"resnet18": str}))


def test_data_subdir_comes_from_the_kind(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import dataclasses

    from tune_gym.datasets.catalog import task_data_dirs

    monkeypatch.setenv("TUNE_GYM_DATA", str(tmp_path))
    vta = kinds.get_kind("vta")
    assert vta is not None
    assert tmp_path / "vta" in task_data_dirs("deepbench:3") and tmp_path / "vta" not in task_data_dirs("resnet18:1")
    kinds.register_kind(dataclasses.replace(vta, data_subdir="vta_elsewhere"), replace=True)
    assert tmp_path / "vta_elsewhere" in task_data_dirs("deepbench:3")
    kinds.register_kind(dataclasses.replace(vta, data_subdir=None), replace=True)
    assert all(d.name != "vta" for d in task_data_dirs("deepbench:3"))


def test_target_of_a_registered_kind() -> None:
    from tune_gym.tasks import TargetSpec

    checked: list[Any] = []
    kinds.register_kind(_toy_kind(is_gpu=True, no_tvm_target="is a toy; it has no TVM target",
                                  check_target=checked.append))
    spec = TargetSpec.from_str("toy&width=32")
    assert str(spec) == "toy&width=32" and checked == [spec]
    assert TargetSpec("toy").resolved() == {"kind": "toy", "width": 16}
    assert TargetSpec.parse("toy", {"width": 8}).resolved() == {"kind": "toy", "width": 8}
    assert spec.is_gpu and not TargetSpec("llvm").is_gpu and TargetSpec("cuda").is_gpu
    with pytest.raises(TaskError, match="^target toy is a toy; it has no TVM target$"):
        spec.tvm_target()
    with pytest.raises(TaskError, match="^target toy: option 'width'='7' out of range; accepted: 8, 16, 32$"):
        TargetSpec.from_str("toy&width=7")
    with pytest.raises(TaskError, match="^target toy: unknown option 'cores'; allowed: width$"):
        TargetSpec.from_str("toy&cores=4")
    with pytest.raises(TaskError, match="^unknown target kind 'rocm'; known: llvm, cuda, vta, kt, toy$"):
        TargetSpec("rocm")


def test_vta_target_through_the_registry() -> None:
    from tune_gym.tasks import TargetSpec

    assert TargetSpec.from_str("vta&log_block=05").resolved()["log_block"] == 5
    with pytest.raises(TaskError, match=r"^target vta: option 'log_block'='9' out of range; accepted: an integer "
                                        r"in \[1, 6\]$"):
        TargetSpec.from_str("vta&log_block=9")
    with pytest.raises(TaskError, match="^target vta is simulated by tune_gym.vta; it has no TVM target"):
        TargetSpec("vta").tvm_target()


def test_toy_kind_end_to_end() -> None:
    """A task of the toy kind parses from its URI and its op:// URI, and gets the toy's space,
    backend, suite and default observation through the core."""
    from tune_gym.measure import make_backend
    from tune_gym.space import KnobSpace
    from tune_gym.tasks import Task, get_op, get_suite

    kinds.register_kind(_toy_kind())
    task = Task.parse("toy://64")
    assert task == Task.from_uri("op://toy_scale-v1/n64?target=toy") == Task.parse(task.uri)
    assert task.target.kind == "toy" and task.flops == 128 and get_op("toy_scale") is _TOY_OP
    space = KnobSpace.for_task(task)
    assert space.names == ["unroll", "vector"] and space.size == 6
    results = make_backend("toy-sim").measure(task, space, space.sample(np.random.default_rng(0), 2))
    assert [r.costs for r in results] == [(1e-3,), (1e-3,)] and results[0].flops == 128
    assert kinds.default_observation(task) == "knobs"
    suite = get_suite("toybench")
    assert [t.task.uri for t in suite.tasks] == [Task.parse("toy://64").uri, Task.parse("toy://128").uri]
    assert Task.parse("toybench:1") == Task.parse("toy://128")
    assert get_suite("toybench", "toy&width=8").tasks[0].task.target.resolved()["width"] == 8
    with pytest.raises(TaskError, match="^suite toybench runs on target toy only, not llvm$"):
        get_suite("toybench", "llvm")
    with pytest.raises(TaskError, match=r"^op dense does not run on target toy; it runs on llvm, cuda "
                                        r"\(target toy runs only toy_scale\)$"):
        Task.make("dense", target="toy", m=1, n=1, k=1)
    with pytest.raises(TaskError, match="^op toy_scale does not run on target llvm; it runs on toy$"):
        Task.make("toy_scale", n=4)
    with pytest.raises(TaskError, match=r"^unknown op 'nope'; known ops: .*toy_scale.*vta_conv2d"):
        get_op("nope")
    with pytest.raises(TaskError, match="^toy URI 'toy://x': expected toy://<n>$"):
        Task.parse("toy://x")


def test_env_observes_the_kinds_default() -> None:
    import gymnasium as gym

    import tune_gym.envs  # noqa: F401  (registers Tune-v0)

    kinds.register_kind(_toy_kind())
    env = gym.make("tune_gym/Tune-v0", task="toy://64", backend="toy-sim", batch_size=2, budget=4,
                   reward_norm="none", disable_env_checker=True)
    base: Any = env.unwrapped
    assert base.observation == "knobs" and base.observation_space["best_knobs"].shape == (2,)
    env.reset(seed=0)
    _, reward, _, _, _ = env.step(env.action_space.sample())
    assert float(reward) > 0 and base.best is not None
    env.close()
    with pytest.raises(ValueError, match="no TVM schedule to encode .* use observation='knobs', not 'graph'"):
        gym.make("tune_gym/Tune-v0", task="toy://64", backend="toy-sim", observation="graph")


def test_leaderboard_refuses_a_runtime_kind_in_workers(tmp_path: Any) -> None:
    from benchmarks.leaderboard.runner import run_suite
    from benchmarks.leaderboard.suite import Suite
    from benchmarks.leaderboard.suite import SuiteTask as BoardTask

    kinds.register_kind(_toy_kind())
    suite = Suite("toys", "toy tasks", ("random",), 1, 2, (BoardTask("toy://64", "full", 4),), {})
    with pytest.raises(ValueError, match="^suite toys: task toy://64: target kind 'toy' is registered in this process "
                                         "only; declare it in the tune_gym.kinds entry-point group"):
        run_suite(suite, tmp_path / "r.jsonl", jobs=2, progress=False)
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("agent_id, options", [
    ("tlp-sa", {}), ("meta-bo", {}), ("one-shot", {}), ("xgb-sa", {"features": "itervar"}),
    ("xgb-sa", {"features": "loop"}), ("xgb-sa-transfer", {"features": "itervar"}), ("metaschedule", {}),
])
def test_agents_that_read_programs_decline_a_kind_without_schedules(agent_id: str, options: dict[str, Any]) -> None:
    from agents.base import NotApplicable, make_agent
    from tune_gym.space import KnobSpace
    from tune_gym.tasks import Task

    kinds.register_kind(_toy_kind())
    task = Task.parse("toy://64")
    agent = make_agent(agent_id, **options)
    assert agent.needs_schedules
    with pytest.raises(NotApplicable, match=f"^agent {agent_id} needs TVM schedules; configs of target toy have none$"):
        agent.reset(KnobSpace.for_task(task), task, seed=0)


@pytest.mark.parametrize("agent_id", ["random", "xgb-sa", "ga", "presample"])
def test_knob_agents_tune_a_kind_without_schedules(agent_id: str) -> None:
    from agents.base import make_agent
    from tune_gym.space import KnobSpace
    from tune_gym.tasks import Task

    kinds.register_kind(_toy_kind())
    task = Task.parse("toy://64")
    agent = make_agent(agent_id)
    assert not agent.needs_schedules
    agent.reset(KnobSpace.for_task(task), task, seed=0)
    assert len(agent.propose(2)) == 2


def test_tlp_sa_declines_vta_tasks() -> None:
    from agents.base import NotApplicable, make_agent
    from tune_gym.space import KnobSpace
    from tune_gym.tasks import Task

    task = Task.parse("deepbench:3")
    with pytest.raises(NotApplicable, match="^agent tlp-sa needs TVM schedules; configs of target vta have none$"):
        make_agent("tlp-sa").reset(KnobSpace.for_task(task), task, seed=0)


def test_collect_cli_takes_the_kinds_backends_and_folders(capsys: pytest.CaptureFixture[str]) -> None:
    from agents.cli import _out_dir, dataset_name
    from tune_gym.cli import main
    from tune_gym.tasks import Task

    kinds.register_kind(_toy_kind(dataset_slug=lambda task: f"toy_n{task.params[0][1]}"))
    assert dataset_name("toy://64", "full") == "toy_n64_full.parquet"
    assert dataset_name("deepbench:3", "full") == "deepbench_3_full.parquet"
    assert dataset_name("op://dense-v1/m1_n1_k1?target=llvm", "full").startswith("dense_")
    assert _out_dir(None, Task.parse("toy://64")) == Path("benchmarks/datasets/toy")
    assert _out_dir(None, Task.parse("deepbench:3")) == Path("benchmarks/datasets/vta")
    assert _out_dir(None, Task.parse("resnet18:1")) == Path("benchmarks/datasets")
    assert _out_dir(Path("x"), Task.parse("toy://64")) == Path("x")
    with pytest.raises(SystemExit):
        main(["collect", "toy://64", "--plan", "exhaustive", "--backend", "nope"])
    assert "(choose from live, vta-sim, toy-sim)" in capsys.readouterr().err.replace("'", "")
    with pytest.raises(SystemExit):
        main(["collect", "--help"])
    assert "toy-sim: a fixed latency for every config" in " ".join(capsys.readouterr().out.split())


# ---------------------------------------------------------------------------- the core names no kind
_KIND_WORDS = re.compile(r"vta|deepbench|kernel_tuner|(?<![a-z])kt(?![a-z])", re.IGNORECASE)
_CORE = Path(__file__).resolve().parents[1] / "tune_gym"


def _docstrings(tree: Any) -> set[int]:
    """ids of the docstring constants of a module, its classes and functions."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _kind_names_in(source: str, allowed: frozenset[str] = frozenset()) -> list[str]:
    """Every place ``source`` names a registered kind's things in code (docstrings and comments
    aside): imports of its package, string constants, identifiers."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    hits: list[str] = []
    for node in ast.walk(tree):
        words: list[str] = []
        if isinstance(node, ast.Import):
            words = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            words = [node.module or "", *(a.name for a in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            words = [node.value] if node.value not in allowed else []
        elif isinstance(node, ast.Name):
            words = [node.id]
        elif isinstance(node, ast.Attribute):
            words = [node.attr]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            words = [node.name]
        elif isinstance(node, ast.arg):
            words = [node.arg]
        hits += [f"line {getattr(node, 'lineno', 0)}: {w!r}" for w in words if _KIND_WORDS.search(w)]
    return hits


def test_the_scan_finds_kind_names_in_code_only() -> None:
    source = ('"""Docs may say vta."""\nimport tune_gym.vta.space\nx = "vta-sim"  # vta\n'
              'def f(deepbench: int) -> None:\n    """vta_conv2d in a docstring."""\n    return VTA_DEFAULTS\n')
    assert [h.split(":")[0] for h in _kind_names_in(source)] == ["line 2", "line 3", "line 4", "line 6"]
    assert _kind_names_in('"""vta"""\n# vta\nx = 1\n') == []


def test_the_core_names_no_registered_kind() -> None:
    """Outside tune_gym/vta/ (and tune_gym/external/) only the registry's builtin list names the vta kind."""
    from tune_gym.kinds import _BUILTIN

    found = []
    for path in sorted(_CORE.rglob("*.py")):
        rel = path.relative_to(_CORE)
        if rel.parts[0] in ("vta", "external"):
            continue
        allowed = frozenset(_BUILTIN) if rel.as_posix() == "kinds.py" else frozenset()
        found += [f"tune_gym/{rel.as_posix()} {hit}" for hit in _kind_names_in(path.read_text(), allowed)]
    assert found == []


@pytest.mark.parametrize("package", ["vta", "external"])
def test_core_imports_load_no_module_of_a_kind(package: str) -> None:
    """Importing the core loads a builtin kind's descriptor (the registry finds it) and nothing else of it."""
    code = ("import sys, tune_gym, tune_gym.space, tune_gym.measure, tune_gym.datasets.catalog, tune_gym.envs; "
            f"print(sorted(m for m in sys.modules if m.startswith('tune_gym.{package}')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() in ("[]", f"['tune_gym.{package}', 'tune_gym.{package}.kind']")
