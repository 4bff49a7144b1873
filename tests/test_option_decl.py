"""Options declared once (tune_gym.options): the declaration checks, says what it allows, and
fills the options tables of agents and backends and the command line's listing."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

import pytest

from tune_gym.options import (
    Bool,
    Check,
    Choice,
    Float,
    Func,
    Int,
    OptionDoc,
    OptionError,
    Str,
    check_fields,
    checked_options,
    declared_options,
    option_table,
)


@pytest.mark.parametrize("option, allowed", [
    (Int(2, help="h"), "integer >= 2"), (Int(0, 5, help="h"), "integer in [0, 5]"), (Int(help="h"), "integer"),
    (Int(1, none=True, help="h"), "integer >= 1 or None"), (Float(0, 1, help="h"), "finite number in [0, 1]"),
    (Float(0, low_open=True, finite=False, help="h"), "number > 0"), (Bool(help="h"), "True or False"),
    (Choice(("a", "b"), help="h"), "one of 'a', 'b'"), (Str(none=True, help="h"), "non-empty string or None"),
    (Func(help="h"), "callable or None"), (Check(lambda n, v: v, "anything", help="h"), "anything"),
])
def test_allowed_text(option, allowed):
    assert option.allowed() == allowed


@pytest.mark.parametrize("option, value, message", [
    (Int(2, help="h"), 0, "pop_size must be an integer >= 2, got 0"),
    (Int(2, help="h"), True, "pop_size must be an integer >= 2, got True"),
    (Int(1, none=True, help="h"), 1.0, "pop_size must be an integer >= 1 or None, got 1.0"),
    (Float(0, 1, help="h"), math.nan, r"pop_size must be a finite number in \[0, 1\], got nan"),
    (Bool(help="h"), "yes", "pop_size must be True or False, got 'yes'"),
    (Choice(("a", "b"), help="h"), "c", "pop_size must be one of 'a', 'b', got 'c'"),
    (Str(help="h"), "", "pop_size must be a non-empty string, got ''"),
    (Func(help="h"), 3, "pop_size must be a callable or None, got 3"),
])
def test_check_refuses_with_the_check_functions_message(option, value, message):
    with pytest.raises(OptionError, match=f"^{message}$"):
        option.check("pop_size", value)


def test_check_normalizes():
    np = pytest.importorskip("numpy")
    assert type(Int(help="h").check("n", np.int64(3))) is int
    assert Float(help="h").check("x", 2) == 2.0 and type(Float(help="h").check("x", 2)) is float
    assert Int(none=True, help="h").check("n", None) is None


class Tuner:
    """A class whose options are declared in its constructor."""

    @checked_options
    def __init__(self, pop_size: Annotated[int, Int(2, help="population size")] = 100,
                 rate: Annotated[float, Float(0, 1, help="mutation probability")] = 0.1,
                 mode: Annotated[str, Choice(("a", "b"), help="how")] = "a", note: str = "") -> None:
        self.pop_size, self.rate, self.mode, self.note = pop_size, rate, mode, note


class SubTuner(Tuner):
    @checked_options
    def __init__(self, elite: Annotated[int, Int(0, help="elites kept")] = 3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.elite = elite


def test_decorated_constructor_refuses_a_bad_value_before_its_body():
    with pytest.raises(OptionError, match=r"^pop_size must be an integer >= 2, got 0$"):
        Tuner(pop_size=0)
    with pytest.raises(OptionError, match=r"^rate must be a finite number in \[0, 1\], got 2$"):
        Tuner(5, 2)  # positional arguments are checked too
    with pytest.raises(OptionError, match=r"^elite must be an integer >= 0, got -1$"):
        SubTuner(elite=-1)
    with pytest.raises(OptionError, match=r"^mode must be one of 'a', 'b', got 'c'$"):
        SubTuner(mode="c")  # the base's declaration, through **kwargs
    with pytest.raises(TypeError):
        Tuner(nosuch=1)
    t = Tuner(pop_size=50, rate=1)
    assert (t.pop_size, t.rate, type(t.rate)) == (50, 1.0, float)


def test_declared_options_and_table():
    assert sorted(declared_options(Tuner.__init__)) == ["mode", "pop_size", "rate"]
    assert option_table(Tuner) == [
        OptionDoc("pop_size", "100", "integer >= 2", "population size"),
        OptionDoc("rate", "0.1", "finite number in [0, 1]", "mutation probability"),
        OptionDoc("mode", "'a'", "one of 'a', 'b'", "how"),
        OptionDoc("note", "''", "", ""),  # not declared: no allowed text, no help
    ]
    assert [row.name for row in option_table(SubTuner)] == ["elite", "pop_size", "rate", "mode", "note"]


@dataclass
class Settings:
    repeat: Annotated[int, Int(1, help="timed repeats")] = 3
    timeout: Annotated[float, Float(0, low_open=True, help="seconds")] = 10.0
    name: Annotated[str | None, Str(none=True, help="label")] = None
    free: int = 0

    def __post_init__(self) -> None:
        check_fields(self, "Settings")


def test_dataclass_fields_are_checked_and_tabled():
    with pytest.raises(OptionError, match=r"^Settings: repeat must be an integer >= 1, got 0$"):
        Settings(repeat=0)
    assert Settings(timeout=1).timeout == 1.0 and type(Settings(timeout=1).timeout) is float
    assert Settings(free=-5).free == -5  # undeclared fields are not checked
    assert option_table(Settings)[:3] == [OptionDoc("repeat", "3", "integer >= 1", "timed repeats"),
                                          OptionDoc("timeout", "10.0", "finite number > 0", "seconds"),
                                          OptionDoc("name", "None", "non-empty string or None", "label")]
    assert option_table(Settings)[3] == OptionDoc("free", "0", "", "")


def test_function_table_and_required_option():
    def make(dataset: Any, seed: Annotated[int, Int(0, help="noise seed")] = 0) -> None:
        return None

    assert option_table(make) == [OptionDoc("dataset", "required", "", ""),
                                  OptionDoc("seed", "0", "integer >= 0", "noise seed")]


# ---------------------------------------------------------------------- agents, backends, the command line
def test_every_agent_declares_every_option_with_help():
    from agents.base import agent_classes, option_names, options_of

    for agent_id in agent_classes():
        rows = options_of(agent_id)
        assert [r.name for r in rows] == option_names(agent_class_of(agent_id))
        missing = [r.name for r in rows if not r.help or not r.allowed]
        assert not missing, f"{agent_id}: options without a declaration: {missing}"


def agent_class_of(agent_id: str) -> type:
    from agents.base import agent_class

    return agent_class(agent_id)


def test_agent_declaration_refuses_before_the_constructor_runs():
    from agents.base import make_agent
    from agents.ga import GAAgent

    with pytest.raises(OptionError, match=r"^pop_size must be an integer >= 2, got 0$"):
        GAAgent(pop_size=0)
    with pytest.raises(OptionError, match=r"^agent 'ga': pop_size must be an integer >= 2, got 0$"):
        make_agent("ga", pop_size=0)
    assert GAAgent(pop_size=50).pop_size == 50 and make_agent("ga", pop_size=np_int(7)).pop_size == 7
    with pytest.raises(OptionError, match=r"elite_num must be an integer in \[0, 4\], got 5"):
        GAAgent(pop_size=5, elite_num=5)  # a rule across options stays in the body


def np_int(value: int) -> Any:
    np = pytest.importorskip("numpy")
    return np.int64(value)


def test_every_backend_declares_every_option_with_help():
    from tune_gym.measure import backend_ids, backend_options

    for name in backend_ids():
        rows = backend_options(name)
        assert rows and all(r.help and r.allowed for r in rows), name
    assert [r.name for r in backend_options("live")][:3] == ["number", "repeat", "min_repeat_ms"]
    assert "tracker" in [r.name for r in backend_options("rpc")]
    with pytest.raises(OptionError, match="unknown backend 'nope'"):
        backend_options("nope")


def test_cli_prints_an_agents_and_a_backends_options(capsys):
    from tune_gym.cli import main

    assert main(["agents", "ga"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "ga: 3 options (-o KEY=VALUE)"
    assert out[1].split() == ["option", "default", "allowed", "meaning"]
    assert out[2].split()[:4] == ["pop_size", "100", "integer", ">="] and out[2].endswith("configs per generation")
    assert main(["backends", "live"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("live: 13 options") and out[3].split()[:2] == ["repeat", "3"]
    assert main(["agents", "nope"]) == 2
    assert "unknown agent 'nope'" in capsys.readouterr().err
