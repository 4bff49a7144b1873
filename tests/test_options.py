"""Options are checked where they are declared (backends, agents, the env, the CLI), with
one-line errors; killed live runs leave no worker process and no temporary directory."""

from __future__ import annotations

import inspect
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.base import _REGISTRY, list_agents, make_agent, option_names
from tune_gym.cli import main, parse_options
from tune_gym.errors import TuneGymError
from tune_gym.measure import make_backend
from tune_gym.measure.live import LiveBackend, LiveConfig, WorkDir, sweep_workdirs
from tune_gym.measure.rpc import RPCConfig, TrackerError
from tune_gym.options import OptionError, check_bool, check_choice, check_float, check_int

DENSE = "op://dense-v1/m32_n32_k32?weights=given&target=llvm"
REPO = Path(__file__).resolve().parents[1]
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, PR_SET_PDEATHSIG")


# ---------------------------------------------------------------------- the helpers
def test_helpers_refuse_bools_floats_nan_and_out_of_range():
    assert check_int("n", np.int64(3), 1) == 3 and type(check_int("n", np.int64(3), 1)) is int
    assert check_int("n", None, 1, none=True) is None
    for bad in (True, 1.0, 0, "2", float("nan"), None):
        with pytest.raises(OptionError, match=r"^n must be an integer >= 1, got "):
            check_int("n", bad, 1)
    with pytest.raises(OptionError, match=r"^p must be an integer in \[0, 5\], got 6$"):
        check_int("p", 6, 0, 5)
    assert check_float("t", 2) == 2.0 and check_float("g", math.inf, 0, finite=False) == math.inf
    for bad in (float("nan"), float("inf"), 0, -1.0, True, "1"):
        with pytest.raises(OptionError, match=r"^t must be a finite number > 0, got "):
            check_float("t", bad, 0, low_open=True)
    with pytest.raises(OptionError, match=r"got nan"):
        check_float("g", float("nan"), finite=False)
    with pytest.raises(OptionError, match=r"^b must be True or False, got 1$"):
        check_bool("b", 1)
    with pytest.raises(OptionError, match=r"^c must be one of 'a', 'b', got 'x'$"):
        check_choice("c", "x", ("a", "b"))
    with pytest.raises(OptionError, match=r"got True"):
        check_choice("c", True, (1, 2))  # a bool is not the int 1


# ---------------------------------------------------------------------- live, rpc, vta-sim, replay, surrogate
@pytest.mark.parametrize("option, value, allowed", [
    ("repeat", 0, "an integer >= 1"), ("repeat", -3, "an integer >= 1"), ("repeat", "abc", "an integer >= 1"),
    ("repeat", True, "an integer >= 1"), ("repeat", 2.5, "an integer >= 1"), ("number", 0, "an integer >= 1"),
    ("min_repeat_ms", -1, "an integer >= 0"), ("min_repeat_ms", 0.5, "an integer >= 0"),
    ("build_timeout", 0, "a finite number > 0"), ("build_timeout", float("nan"), "a finite number > 0"),
    ("run_timeout", float("inf"), "a finite number > 0"), ("run_timeout", -1, "a finite number > 0"),
    ("build_workers", 0, "an integer >= 1 or None"), ("build_workers", 1.5, "an integer >= 1 or None"),
    ("recycle_after", 0, "an integer >= 1"), ("seed", -1, "an integer >= 0"), ("seed", False, "an integer >= 0"),
    ("flush_cache", "yes", "True or False"), ("check_correctness", 1, "True or False"),
    ("adaptive", True, "None or a dict of micro_batch, max_runs, cv_threshold, min_batches"),
])
def test_live_options_are_checked_before_anything_runs(option, value, allowed):
    with pytest.raises(OptionError) as err:
        make_backend("live", **{option: value})
    message = str(err.value)
    assert message.startswith(f"LiveConfig: {option} must be {allowed}") and repr(value) in message
    assert "\n" not in message


def test_live_adaptive_options_are_checked():
    with pytest.raises(OptionError, match="LiveConfig: adaptive: unknown option 'x'; its options: micro_batch"):
        LiveBackend(adaptive={"x": 1})
    with pytest.raises(OptionError, match=r"adaptive cv_threshold must be a finite number > 0, got 0"):
        LiveBackend(adaptive={"cv_threshold": 0})
    with pytest.raises(OptionError, match=r"adaptive micro_batch must be an integer >= 1, got 0"):
        LiveBackend(adaptive={"micro_batch": 0})
    backend = LiveBackend(adaptive={"max_runs": np.int64(100)}, build_timeout=5, build_workers=None)
    assert backend.config.adaptive == {"max_runs": 100} and backend.config.build_timeout == 5.0
    backend.close()


def test_live_unknown_option_and_a_config_changed_after_it_was_made():
    with pytest.raises(OptionError, match=r"^LiveBackend: unknown option 'nosuch'; its options: number, repeat"):
        make_backend("live", nosuch=1)
    config = LiveConfig()
    config.repeat = 0
    with pytest.raises(OptionError, match="repeat must be an integer >= 1, got 0"):
        LiveBackend(config)
    with pytest.raises(OptionError, match="config must be a LiveConfig, got dict"):
        LiveBackend({"repeat": 1})  # type: ignore[arg-type]


@pytest.mark.parametrize("option, value, message", [
    ("devices", 0, "devices must be an integer >= 1 or None, got 0"),
    ("session_timeout", -1, "session_timeout must be a finite number >= 0, got -1"),
    ("request_timeout", 0, "request_timeout must be a finite number > 0, got 0"),
    ("connect_timeout", float("nan"), "connect_timeout must be a finite number > 0, got nan"),
    ("key", "", "key must be a non-empty string, got ''"),
    ("priority", 1.5, "priority must be an integer, got 1.5"),
    ("on_result", 3, "on_result must be a callable or None, got 3"),
    ("repeat", 0, "repeat must be an integer >= 1, got 0"),
])
def test_rpc_options_are_checked(option, value, message):
    with pytest.raises(OptionError) as err:
        RPCConfig(**{option: value})
    assert str(err.value) == f"RPCConfig: {message}"
    with pytest.raises(OptionError):  # before the tracker is asked anything
        make_backend("rpc", **{option: value})


def test_rpc_tracker_address_is_checked():
    for tracker in ("127.0.0.1:99999", "127.0.0.1", ":9190", "host:９"):
        with pytest.raises(TrackerError, match="give the tracker's address as host:port"):
            RPCConfig(tracker=tracker)
    with pytest.raises(OptionError, match="RPCConfig: tracker must be a non-empty string, got 9190"):
        RPCConfig(tracker=9190)  # type: ignore[arg-type]


@pytest.mark.parametrize("option, value, allowed", [
    ("sim_steps", 1.5, "an integer >= 1"), ("sim_steps", 0, "an integer >= 1"), ("dma_setup", True, "an integer >= 0"),
    ("clock_mhz", 0, "a finite number > 0"), ("dram_bytes_per_cycle", float("nan"), "a finite number > 0"),
    ("alu_cycles_per_vector", "fast", "a finite number >= 0"),
])
def test_vta_sim_options_are_checked(option, value, allowed):
    with pytest.raises(OptionError) as err:
        make_backend("vta-sim", **{option: value})
    assert str(err.value) == f"vta-sim: {option} must be {allowed}, got {value!r}"


def test_surrogate_and_replay_options_are_checked():
    data = str(REPO / "tests" / "data" / "tiny_compact.jsonl")
    for seed in (-1, 1.5, True, "abc", None):
        with pytest.raises(OptionError, match=rf"^surrogate: seed must be an integer >= 0, got {seed!r}$"):
            make_backend("surrogate", dataset=data, seed=seed)
    with pytest.raises(OptionError, match=r"^surrogate: noise must be True or False, got 'yes'$"):
        make_backend("surrogate", dataset=data, noise="yes")
    with pytest.raises(OptionError, match="surrogate: seed must be"):  # options of a fallback given by id too
        make_backend("replay", dataset=data, fallback="surrogate", fallback_options={"seed": -2})
    with pytest.raises(OptionError, match="replay fallback_options must be a dict of options, got 'seed=1'"):
        make_backend("replay", dataset=data, fallback="surrogate", fallback_options="seed=1")
    with pytest.raises(OptionError, match="replay fallback must be 'surrogate', 'live', a backend object or None"):
        make_backend("replay", dataset=data, fallback=3)
    with pytest.raises(OptionError, match="unknown backend 'nope'; known backends: live"):
        make_backend("nope")


# ---------------------------------------------------------------------- agents
def _agent_class(agent_id: str) -> type:
    import importlib

    module, _, attr = _REGISTRY[agent_id][0].partition(":")
    return getattr(importlib.import_module(module), attr)


def _defaults(agent_id: str) -> dict[str, Any]:
    """``{option: default}`` of an agent (its constructor's and, through ``**kwargs``, its bases')."""
    out: dict[str, Any] = {}
    for klass in _agent_class(agent_id).__mro__:
        if "__init__" in vars(klass) and klass is not object:
            for p in list(inspect.signature(vars(klass)["__init__"]).parameters.values())[1:]:
                if p.default is not p.empty:
                    out.setdefault(p.name, p.default)
    return {name: out[name] for name in option_names(_agent_class(agent_id)) if name in out}


def _numeric_options() -> list[tuple[str, str, Any]]:
    """``(agent id, option, default)`` of every int or float option of every agent."""
    return [(agent_id, name, default) for agent_id in sorted(list_agents())
            for name, default in _defaults(agent_id).items()
            if isinstance(default, (int, float)) and not isinstance(default, bool)]


@pytest.mark.parametrize("agent_id, option, default", _numeric_options())
def test_every_numeric_agent_option_refuses_bools_strings_and_nan(agent_id, option, default):
    bad = [True, "abc", float("nan")] + ([1.5] if isinstance(default, int) else [])
    for value in bad:
        with pytest.raises(OptionError) as err:
            make_agent(agent_id, **{option: value})
        message = str(err.value)
        assert message.startswith(f"agent {agent_id!r}: {option}") and repr(value) in message and "\n" not in message
    make_agent(agent_id, **{option: default})  # the default itself is accepted


@pytest.mark.parametrize("agent_id, options, message", [
    ("xgb-sa", {"plan_size": 0}, "plan_size must be an integer >= 1, got 0"),
    ("xgb-sa", {"plan_size": -1}, "plan_size must be an integer >= 1, got -1"),
    ("xgb-sa", {"eps": 1.5}, r"eps must be a finite number in \[0, 1\], got 1.5"),
    ("xgb-sa", {"n_init": -1}, "n_init must be an integer >= 0 or None, got -1"),
    ("xgb-sa", {"features": "pixels"}, "features must be one of 'knob', 'itervar', 'loop', got 'pixels'"),
    ("xgb-sa", {"sa_points": 0}, "sa_points must be an integer >= 1, got 0"),
    ("xgb-sa-transfer", {"records": 3}, "records must be 'catalog', a record or dataset file, or a list of them"),
    ("ga", {"elite_num": 100}, r"elite_num must be an integer in \[0, 99\], got 100"),
    ("ga", {"mutation_prob": -0.1}, r"mutation_prob must be a finite number in \[0, 1\], got -0.1"),
    ("grid", {"start": -1}, "start must be an integer >= 0, got -1"),
    ("contextual-sa", {"n_trees": 0}, "n_trees must be an integer >= 1, got 0"),
    ("presample", {"n_valid": 60}, r"n_valid \(at most n_init\) must be an integer in \[0, 50\], got 60"),
    ("rl-ppo", {"pi_arch": [20, 0]}, "pi_arch layer width must be an integer >= 1, got 0"),
    ("rl-ppo", {"gamma": 1.5}, r"gamma must be a finite number in \[0, 1\], got 1.5"),
    ("rl-ppo", {"max_grad_norm": float("nan")}, "max_grad_norm must be a number > 0, got nan"),
    ("rl-ppo", {"adaptive_sampling": "no"}, "adaptive_sampling must be True or False, got 'no'"),
    ("batch-bo", {"device": "nope"}, "device must be a torch device such as 'cpu' or 'cuda:0', got 'nope'"),
    ("tlp-sa", {"fine_tune": "some"}, "fine_tune must be one of 'decoder', 'all', 'none', got 'some'"),
    ("one-shot", {"checkpoint": 3}, "checkpoint must be 'auto', a path or a checkpoint name, got 3"),
    ("meta-bo", {"fine_tune_lr": 0}, "fine_tune_lr must be a finite number > 0 or None, got 0"),
    ("random", {"nosuch": 1}, "bad options: unknown option 'nosuch'; its options: none"),
])
def test_agent_options_are_checked_with_one_line_errors(agent_id, options, message):
    with pytest.raises(OptionError, match=f"^agent '{agent_id}': {message}") as err:
        make_agent(agent_id, **options)
    assert "\n" not in str(err.value)


def test_infinite_max_grad_norm_stays_allowed():
    assert make_agent("rl-ppo", max_grad_norm=math.inf).ppo_options["max_grad_norm"] == math.inf


# ---------------------------------------------------------------------- the command line
@pytest.mark.parametrize("text, value", [
    ("3", 3), ("0.5", 0.5), ("true", True), ("True", True), ("None", None), ("null", None), ("[20, 20]", [20, 20]),
    ('{"micro_batch": 10}', {"micro_batch": 10}), ("inf", math.inf), ("knob", "knob"),
    ("127.0.0.1:9190", "127.0.0.1:9190"),
])
def test_parse_options_reads_literals(text, value):
    assert parse_options([f"some-key={text}"]) == {"some_key": value}


@pytest.mark.parametrize("pairs, message", [
    (["adaptive={bad"], "option 'adaptive': '{bad' is not valid JSON"), (["pi_arch=[20,"], "is not valid JSON"),
    (["repeat"], "option 'repeat' must be KEY=VALUE"), (["=3"], "option '=3' must be KEY=VALUE"),
    (["repeat=1", "repeat=2"], "option 'repeat' is given twice"),
])
def test_parse_options_refuses_unparseable_pairs(pairs, message):
    with pytest.raises(TuneGymError, match=message):
        parse_options(pairs)


@pytest.mark.parametrize("args, message", [
    (["-b", "repeat=0"], "LiveConfig: repeat must be an integer >= 1, got 0"),
    (["-b", "repeat=-3"], "LiveConfig: repeat must be an integer >= 1, got -3"),
    (["-b", "repeat=abc"], "LiveConfig: repeat must be an integer >= 1, got 'abc'"),
    (["-b", "nosuch=1"], "LiveBackend: unknown option 'nosuch'; its options: number, repeat"),
    (["-b", "adaptive={bad"], "option 'adaptive': '{bad' is not valid JSON"),
    (["--agent", "xgb-sa", "-o", "plan_size=0"], "agent 'xgb-sa': plan_size must be an integer >= 1, got 0"),
    (["--agent", "xgb-sa", "-o", "plan_size=-1"], "agent 'xgb-sa': plan_size must be an integer >= 1, got -1"),
    (["--agent", "xgb-sa", "-o", "plan_size=abc"], "agent 'xgb-sa': plan_size must be an integer >= 1, got 'abc'"),
])
def test_cli_bad_options_are_one_line_errors_and_nothing_is_logged(tmp_path, capsys, args, message):
    log = tmp_path / "run.jsonl"
    code = main(["tune", DENSE, "--preset", "compact", "--trials", "4", "--batch", "2", "--log", str(log),
                 "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"tune-gym tune: error: {message}")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not log.exists()  # refused before anything was measured: nothing for a --resume to skip


# ---------------------------------------------------------------------- random option values
VALUES = st.one_of(
    st.integers(-3, 2**40), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
    st.text(max_size=4), st.lists(st.integers(-2, 3), max_size=2),
    st.dictionaries(st.sampled_from(["a", "micro_batch"]), st.integers(-1, 3), max_size=1))
LIVE_FIELDS = {name: default for name, default in vars(LiveConfig()).items()}


def _fits(value: Any, default: Any) -> bool:
    """Whether an accepted value has the type its option's default has (None defaults: anything)."""
    if default is None or value is None:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
    return True


def _one_line_value_error(err: Exception) -> None:
    assert isinstance(err, ValueError), f"{type(err).__name__}: {err}"
    assert str(err) and "\n" not in str(err)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(option=st.sampled_from(sorted(LIVE_FIELDS)), value=VALUES)
def test_live_backend_takes_random_values_or_names_the_error(option, value):
    try:
        backend = make_backend("live", **{option: value})
    except Exception as err:
        _one_line_value_error(err)
        assert option in str(err)
        return
    assert _fits(value, LIVE_FIELDS[option])
    backend.config.validate()  # what it holds is in range
    backend.close()


@settings(max_examples=40, deadline=None, derandomize=True)
@given(option=st.sampled_from(["clock_mhz", "dram_bytes_per_cycle", "dma_setup", "alu_ops", "sim_steps"]),
       value=VALUES)
def test_vta_sim_takes_random_values_or_names_the_error(option, value):
    try:
        backend = make_backend("vta-sim", **{option: value})
    except Exception as err:
        _one_line_value_error(err)
        return
    assert getattr(backend.timing, option) == value and not isinstance(value, bool)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(option=st.sampled_from(["seed", "noise"]), value=VALUES)
def test_surrogate_takes_random_values_or_names_the_error(option, value):
    try:
        backend = make_backend("surrogate", dataset=str(REPO / "tests" / "data" / "tiny_compact.jsonl"),
                               **{option: value})
    except Exception as err:
        _one_line_value_error(err)
        return
    assert (backend.seed >= 0) if option == "seed" else isinstance(backend.noise, bool)


AGENT_OPTIONS = sorted((agent_id, name) for agent_id in list_agents() for name in option_names(_agent_class(agent_id)))


@settings(max_examples=80, deadline=None, derandomize=True)
@given(pick=st.sampled_from(AGENT_OPTIONS), value=VALUES)
def test_agents_take_random_values_or_name_the_error(pick, value):
    agent_id, option = pick
    try:
        make_agent(agent_id, **{option: value})
    except Exception as err:
        _one_line_value_error(err)
        assert str(err).startswith(f"agent {agent_id!r}: ")
        return
    assert _fits(value, _defaults(agent_id).get(option))


@settings(max_examples=30, deadline=None, derandomize=True)
@given(option=st.sampled_from(["budget", "batch_size", "backend", "resume"]), value=VALUES)
def test_env_constructor_takes_random_values_or_names_the_error(dense_task, option, value):
    from tune_gym.envs.tune_env import TuneEnv

    kwargs: dict[str, Any] = dict(preset="compact", backend="replay", reward_norm=1.0, budget=4, batch_size=2,
                                  backend_options={"dataset": str(REPO / "tests" / "data" / "tiny_compact.jsonl")})
    kwargs[option] = value
    if option == "backend":
        kwargs["backend_options"] = None
    try:
        env = TuneEnv(dense_task, **kwargs)
    except Exception as err:
        _one_line_value_error(err)
        return
    if option in ("budget", "batch_size"):
        assert isinstance(value, int) and not isinstance(value, bool) and value >= 1
    env.close()


# ---------------------------------------------------------------------- killed runs
def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rpartition(")")[2].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return out


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(condition: Any, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return bool(condition())


def _start(code: str, tmp: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "TMPDIR": str(tmp), "TUNE_GYM_CORES": "2", "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)


#: A live backend's build pool whose two workers are busy (a "build" that takes minutes) when
#: their owner is killed.
BUSY_POOL = """
import time
from tune_gym.measure.live import WorkDir, make_build_pool

def build(_):
    import tempfile, time
    from tune_gym.measure import workers
    tempfile.mkdtemp(prefix="kernel_", dir=workers._WORKDIR)
    time.sleep(600)

workdir = WorkDir()
pool = make_build_pool(2, 900, 256, workdir.path)
print(workdir.path, workdir.guard.pid, flush=True)
futures = [pool.submit(build, i) for i in range(2)]
time.sleep(900)
"""


@linux_only
@pytest.mark.heavy
def test_sigkill_of_the_owner_kills_its_workers_and_removes_its_directory(tmp_path):
    proc = _start(BUSY_POOL, tmp_path)
    try:
        assert proc.stdout is not None
        path, guard = proc.stdout.readline().split()
        assert Path(path).parent == tmp_path and Path(path).name.startswith(f"tune_gym_{proc.pid}_")
        assert _wait_for(lambda: len(list(Path(path).glob("kernel_*"))) == 2, 180), "the workers never started"
        workers = [pid for pid in _children(proc.pid) if pid != int(guard) and _running(pid)]
        assert len(workers) >= 2, f"owner {proc.pid}: children {_children(proc.pid)}, guard {guard}"
    finally:
        proc.kill()
        proc.wait()
    assert _wait_for(lambda: not any(map(_running, workers)), 60), \
        f"workers {[w for w in workers if _running(w)]} outlived their owner"
    assert _wait_for(lambda: not Path(path).exists(), 60), \
        f"the owner's directory was left behind: {sorted(p.name for p in Path(path).iterdir())}"
    assert _wait_for(lambda: not _running(int(guard)), 60), f"the guard {guard} outlived its work"


#: A work directory whose owner and guard are both killed: only the next start can remove it.
IDLE_OWNER = """
import time
from tune_gym.measure.live import WorkDir

workdir = WorkDir()
open(workdir.path + "/kernel.so", "w").close()
print(workdir.path, workdir.guard.pid, flush=True)
time.sleep(900)
"""


def test_the_next_start_removes_the_directories_of_dead_owners(tmp_path):
    mine = WorkDir(str(tmp_path))  # a live owner's directory: never swept
    proc = _start(IDLE_OWNER, tmp_path)
    try:
        assert proc.stdout is not None
        path, guard = proc.stdout.readline().split()
        os.kill(int(guard), signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert Path(path).exists() and Path(path).name.startswith(f"tune_gym_{proc.pid}_")
    assert sweep_workdirs(str(tmp_path / "missing")) == []
    assert sweep_workdirs(str(tmp_path)) == [path]
    assert not Path(path).exists() and Path(mine.path).exists()
    mine.close()
    assert not Path(mine.path).exists() and not any(tmp_path.glob("tune_gym_*"))


def test_a_new_work_directory_sweeps_first(tmp_path):
    stale = tmp_path / "tune_gym_999999999_abc"  # no such process
    stale.mkdir()
    (stale / ".owner.lock").touch()
    other = tmp_path / "tune_gym_net_keep"  # not a work directory
    other.mkdir()
    workdir = WorkDir(str(tmp_path))
    assert not stale.exists() and other.exists()
    workdir.close()
    workdir.close()


@pytest.mark.heavy
def test_live_kernels_are_built_in_the_backend_work_directory(dense_task, dense_space, live_backend):
    import shutil

    configs = dense_space.sample_unique(np.random.default_rng(7), 2)
    assert live_backend.measure(dense_task, dense_space, configs[:1])[0].ok
    path = Path(live_backend._workdir.path)
    assert path.name.startswith(f"tune_gym_{os.getpid()}_") and not any(path.glob("kernel_*"))  # run, then deleted
    shutil.rmtree(path)  # by a cleaner of the temporary directory, say: the next build makes it again
    assert live_backend.measure(dense_task, dense_space, configs[1:])[0].ok


@linux_only
@pytest.mark.slow
def test_sigkill_of_a_live_tune_leaves_no_process_and_no_directory(tmp_path):
    """The whole command, killed once it has measured something."""
    log = tmp_path / "run.jsonl"
    code = (f"import sys; from tune_gym.cli import main; sys.exit(main(['tune', {DENSE!r}, '--preset', 'compact', "
            f"'--trials', '200', '--batch', '4', '--log', {str(log)!r}, '--quiet', '-b', 'repeat=1', "
            f"'-b', 'min_repeat_ms=1', '-b', 'build_workers=2']))")
    proc = _start(code, tmp_path)
    try:
        assert _wait_for(lambda: log.exists() and log.read_text().count("\n") >= 4, 300), "nothing was measured"
        family = _children(proc.pid)
        family += [pid for child in family for pid in _children(child)]
    finally:
        proc.kill()
        proc.wait()
    assert _wait_for(lambda: not any(map(_running, family)), 20), "a process outlived the tune"
    assert _wait_for(lambda: not any(tmp_path.glob(f"tune_gym_{proc.pid}_*")), 20)
    sweep_workdirs(str(tmp_path))  # what the next start does
    assert not any(tmp_path.glob("tune_gym_*"))
