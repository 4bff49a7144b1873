"""Kernel Tuner's files (T1 problems, caches, T4 results) read into checked spaces."""

from __future__ import annotations

import gzip
import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tune_gym.errors import SpaceError
from tune_gym.external.kernel_tuner_io import (
    KT_ERROR_KINDS,
    RESTRICTION_FUNCTIONS,
    T4_ERROR_KINDS,
    KernelTunerFileError,
    ParamSpace,
    RestrictionError,
    compile_restriction,
    read_cache,
    read_problem,
    read_t4,
)
from tune_gym.measure.result import ERROR_KINDS

HUB = Path(__file__).resolve().parents[2] / "shared" / "external" / "benchmark_hub"

PARAMS: dict[str, list[Any]] = {"a": [1, 2, 3, 4], "b": [1, 2, 4, 8], "mode": ["x", "y"]}
RESTRICTIONS = ["a * b <= 8", "mode == 'x' or a % 2 == 0"]
OK_CONFIG = {"a": 1, "b": 2, "mode": "x"}
FAILED_CONFIG = {"a": 2, "b": 4, "mode": "y"}
MISSING_CONFIG = {"a": 4, "b": 2, "mode": "y"}


# ---------------------------------------------------------------------------------------------
# Files the tests write


def t1_problem(params: dict[str, list[Any]] | None = None, restrictions: list[str] | None = None) -> dict[str, Any]:
    params = PARAMS if params is None else params
    restrictions = RESTRICTIONS if restrictions is None else restrictions
    return {
        "General": {"BenchmarkName": "toy", "OutputFormat": "JSON"},
        "ConfigurationSpace": {
            "TuningParameters": [
                {"Name": n, "Type": "string" if isinstance(v[0], str) else "int", "Values": repr(v), "Default": v[0]}
                for n, v in params.items()],
            "Conditions": [{"Expression": r, "Parameters": [n for n in params if n in r]} for r in restrictions],
        },
        "KernelSpecification": {"Language": "CUDA", "KernelName": "toy_kernel", "KernelFile": "toy.cu",
                                "GlobalSize": {"X": "64 // a"}, "LocalSize": {"X": "a"}, "ProblemSize": [64, 64]},
    }


def key_of(config: dict[str, Any]) -> str:
    return ",".join(str(v) for v in config.values())


OK_FIELDS = {"time": 1.5, "times": [1.4, 1.6], "compile_time": 900.0, "verification_time": 0,
             "benchmark_time": 50.0, "framework_time": 10.0, "strategy_time": 0, "GFLOP/s": 12.0}
FAILED_FIELDS = {"time": "CompilationFailedConfig", "compile_time": 3000.0, "verification_time": 0,
                 "benchmark_time": 0, "framework_time": 2.0, "strategy_time": 0}


def kt_cache(entries: list[tuple[dict[str, Any], dict[str, Any]]] | None = None) -> dict[str, Any]:
    if entries is None:
        entries = [(OK_CONFIG, OK_FIELDS), (FAILED_CONFIG, FAILED_FIELDS)]
    return {"device_name": "Toy GPU", "kernel_name": "toy_kernel", "problem_size": [64, 64],
            "tune_params_keys": list(PARAMS), "tune_params": PARAMS, "objective": "time",
            "cache": {key_of(c): {**c, **f} for c, f in entries}}


def t4_results() -> dict[str, Any]:
    ok = {"timestamp": "2024-01-01 00:00:00", "configuration": OK_CONFIG,
          "times": {"compilation": 900.0, "framework": 10.0, "search_algorithm": 0, "validation": 0,
                    "runtimes": [1.4, 1.6]},
          "invalidity": "correct", "correctness": 1,
          "measurements": [{"name": "time", "value": 1.5, "unit": ""}], "objectives": ["time"]}
    failed = {"timestamp": "2024-01-01 00:00:01", "configuration": FAILED_CONFIG,
              "times": {"compilation": 3000.0, "framework": 2.0, "search_algorithm": 0, "validation": 0},
              "invalidity": "compile", "correctness": 1,
              "measurements": [{"name": "time", "value": "CompilationFailedConfig", "unit": ""}],
              "objectives": ["time"]}
    return {"schema_version": "1.0.0", "metadata": {"timeunit": "miliseconds"}, "results": [ok, failed]}


def write(path: Path, data: Any, gz: bool = False) -> Path:
    raw = (data if isinstance(data, str) else json.dumps(data)).encode()
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


@pytest.fixture
def problem_path(tmp_path: Path) -> Path:
    return write(tmp_path / "toy.json", t1_problem())


def expect_error(fn: Any, *parts: str, exc: type[Exception] = KernelTunerFileError) -> str:
    """``fn()`` raises ``exc`` with a one-line message holding every one of ``parts``."""
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    assert "\n" not in msg
    for part in parts:
        assert part in msg, msg
    return msg


def brute_force(params: dict[str, list[Any]], restrictions: list[str]) -> list[dict[str, Any]]:
    """The reference: every combination, kept when Python's own evaluation of each restriction
    (test-written strings) is true."""
    codes = [compile(r, "<restriction>", "eval") for r in restrictions]
    out = []
    for combo in itertools.product(*params.values()):
        env = dict(zip(params, combo))
        if all(eval(c, {"__builtins__": {}, **RESTRICTION_FUNCTIONS}, env) for c in codes):
            out.append(env)
    return out


# ---------------------------------------------------------------------------------------------
# The space


def test_enumeration_matches_brute_force():
    space = ParamSpace(PARAMS, RESTRICTIONS)
    want = brute_force(PARAMS, RESTRICTIONS)
    assert list(space.configs()) == want
    assert len(space) == 16 and space.cartesian_size == 32
    assert space.index_array.shape == (16, 3)
    for i, config in enumerate(want):
        assert space.index_of(config) == i
        assert space.config(i) == config
        idx = space.indices(i)
        assert tuple(space.index_array[i]) == idx
        assert {n: PARAMS[n][j] for n, j in zip(PARAMS, idx)} == config


def test_enumeration_of_a_larger_mixed_space_matches_brute_force():
    params = {"x": list(range(-3, 9)), "y": [0.5, 1.0, 2.5, -1.0], "z": [True, False], "w": ["p", "q", "r"],
              "v": list(range(0, 20, 3))}
    restrictions = ["x // 2 != y * 2 or z", "w in ('p', 'q') or x > 0", "not (v % 4 == 1) and min(x, v) < 5",
                    "abs(x - v) ** 2 <= 64 if z else float(x) / 2 > -1", "x != 0 and 12 % x in [0, 1, 2]",
                    "(w + 'a') != 'ra' or 2 ** x > v"]
    space = ParamSpace(params, restrictions)
    assert list(space.configs()) == brute_force(params, restrictions)


def test_division_by_zero_excludes_the_config():
    params = {"a": [0, 1, 2], "b": [0, 1]}
    space = ParamSpace(params, ["6 // a > b", "b == 0 or a / b > 0"])
    assert list(space.configs()) == [{"a": 1, "b": 0}, {"a": 1, "b": 1}, {"a": 2, "b": 0}, {"a": 2, "b": 1}]
    # Python evaluates `a / b` first here and raises for b == 0: that excludes the config
    assert list(ParamSpace(params, ["a / b > 0 or b == 0"]).configs()) == [{"a": 1, "b": 1}, {"a": 2, "b": 1}]


def test_fingerprint_is_canonical_and_stable():
    space = ParamSpace(PARAMS, RESTRICTIONS)
    same = ParamSpace(PARAMS, ["a*b<=8", "(mode == 'x') or (a % 2 == 0)"])
    assert space.fingerprint == same.fingerprint and space == same
    assert len(space.fingerprint) == 64
    assert ParamSpace({**PARAMS, "b": [1, 2, 4]}, RESTRICTIONS).fingerprint != space.fingerprint
    assert ParamSpace(PARAMS, RESTRICTIONS[:1]).fingerprint != space.fingerprint
    assert ParamSpace({"a": [1, 2]}).fingerprint != ParamSpace({"a": [1.0, 2.0]}).fingerprint


def test_lookup_errors_name_the_parameter_or_restriction():
    space = ParamSpace(PARAMS, RESTRICTIONS)
    expect_error(lambda: space.index_of({"a": 5, "b": 1, "mode": "x"}), "a=5", "[1, 2, 3, 4]", exc=SpaceError)
    expect_error(lambda: space.index_of({"a": 1, "b": 1}), "lacks ['mode']", exc=SpaceError)
    expect_error(lambda: space.index_of({"a": 4, "b": 4, "mode": "x"}), "a * b <= 8", exc=SpaceError)
    expect_error(lambda: space.index_of({"a": 1.0, "b": 1, "mode": "x"}), "a=1.0", exc=SpaceError)
    assert space.find({"a": 3, "b": 1, "mode": "y"}) is None
    assert space.failing_restriction({"a": 3, "b": 1, "mode": "y"}).source == RESTRICTIONS[1]
    assert space.is_valid(OK_CONFIG)
    expect_error(lambda: space.config(16), "out of range", exc=SpaceError)
    assert space.index_of_indices((0, 1, 0)) == space.index_of(OK_CONFIG)
    for bad in [(0, 4, 0), (0, 1), (0, -1, 0)]:
        expect_error(lambda bad=bad: space.index_of_indices(bad), "value indices", exc=SpaceError)


@pytest.mark.parametrize("params, part", [
    ({}, "no parameters"),
    ({"a": []}, "0 values"),
    ({"a": [1, 1]}, "appears twice"),
    ({"a": [1, "1"]}, "appears twice"),
    ({"1a": [1]}, "not a Python identifier"),
    ({"a": [None]}, "is not an int, float, string or bool"),
    ({"a": [float("nan")]}, "not a finite number"),
    ({"a": "12"}, "are not a list"),
    ({f"p{i}": list(range(10)) for i in range(8)}, "combinations"),
])
def test_bad_parameters(params, part):
    expect_error(lambda: ParamSpace(params, where="space.json"), "space.json", part)


# ---------------------------------------------------------------------------------------------
# Restrictions refused


@pytest.mark.parametrize("restriction, part", [
    ("a *", "does not parse"),
    ("a = 1", "does not parse"),
    ("__import__('os').system('true')", "'__import__'"),
    ("a.real > 0", "attribute access"),
    ("(lambda: 1)() == 1", "lambda"),
    ("[x for x in (1, 2)] == [1, 2]", "comprehension"),
    ("any(x > 1 for x in (a, b))", "'any'"),
    ("(1, 2)[0] == a", "subscript"),
    ("(1, 2) == a", "tuple/list/set literal outside"),
    ("min(a, b)(1) > 0", "call of a computed function"),
    ("a is 1", "comparison 'is'"),
    ("(c := a) > 1", "assignment expression"),
    ("f'{a}' == '1'", "f-string"),
    ("{'a': 1} == a", "dict literal"),
    ("a == None", "constant None"),
    ("a + 1j > 0", "constant 1j"),
    ("unknown_name * a > 1", "unknown name 'unknown_name'"),
    ("open('f')", "call of 'open'"),
    ("min(a)", "min() with 1 arguments"),
    ("int(a, base=2) > 0", "keyword argument"),
    ("9**9**9 > a", "'9**9**9' is too large to compute"),
    ("'x' * 10**9 == mode", "is too large to compute"),
    ("1 << 100000 > a", "is too large to compute"),
    ("-(" * 70 + "a" + ")" * 70 + " > 0", "nesting deeper than"),
])
def test_refused_restrictions_name_file_restriction_and_part(restriction, part):
    msg = expect_error(lambda: ParamSpace(PARAMS, [RESTRICTIONS[0], restriction], where="toy.json"),
                       "toy.json", "restrictions[1]", part, exc=RestrictionError)
    assert repr(restriction)[:40] in msg or "characters" in msg


@pytest.mark.parametrize("restriction, part", [
    ("a ** 100000 > 1", "exceeds 4096 bits"),
    ("mode * (a * 10**8) == 'x'", "exceeds 10000 characters"),
    ("mode + 1 > 0", "can only concatenate str"),
    ("mode < a", "'<' not supported"),
    ("int(mode) > 0", "invalid literal"),
    ("mode % a == 'x'", "string formatting"),
])
def test_restrictions_that_fail_on_a_config_name_it(restriction, part):
    expect_error(lambda: ParamSpace(PARAMS, [restriction], where="toy.json"),
                 "toy.json", "cannot be evaluated at {", part, exc=RestrictionError)


def test_restriction_compiles_once_with_its_names():
    r = compile_restriction("block_x * block_y <= 1024 and block_x > 1", ["block_x", "block_y", "z"])
    assert r.names == ("block_x", "block_y")
    assert r.canonical == "block_x * block_y <= 1024 and block_x > 1"
    assert r.holds({"block_x": 32, "block_y": 32}) and not r.holds({"block_x": 64, "block_y": 32})
    expect_error(lambda: r.holds({"block_x": 2}), "lacks parameter", exc=RestrictionError)


# ---------------------------------------------------------------------------------------------
# Restrictions: generated, compared with Python's own evaluation

GRID: dict[str, list[Any]] = {"a": [0, 1, 2, 3, -2], "b": [1, 2, 4], "f": [0.5, -1.5, 2.0], "s": ["x", "yy"]}
LEAVES = st.one_of(st.sampled_from(list(GRID)), st.sampled_from(["a", "b", "f"]), st.integers(-3, 5).map(str),
                   st.sampled_from(["0.5", "2.0", "(-1.5)", "'x'", "'yy'", "True", "False"]))


def _extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    ops = ["+", "-", "*", "/", "//", "%", "&", "|", "^", ">>", "==", "!=", "<", "<=", ">", ">=", "and", "or"]
    return st.one_of(
        st.tuples(children, st.sampled_from(ops), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(children, st.sampled_from(["**", "<<"]), st.sampled_from(["0", "1", "2", "3"])).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["-", "+", "not ", "~"]), children).map(lambda t: f"({t[0]}{t[1]})"),
        st.tuples(children, st.sampled_from(["<", "==", "!="]), children, st.sampled_from(["<=", ">"]),
                  children).map(lambda t: f"({t[0]} {t[1]} {t[2]} {t[3]} {t[4]})"),
        st.tuples(children, children, children).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        st.tuples(children, st.sampled_from(["in", "not in"]), st.lists(children, min_size=1, max_size=3),
                  st.sampled_from(["({},)", "[{}]", "{{{}}}"])).map(
            lambda t: f"({t[0]} {t[1]} {t[3].format(', '.join(t[2]))})"),
        st.tuples(st.sampled_from(["abs", "int", "float"]), children).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(st.sampled_from(["min", "max"]), st.lists(children, min_size=2, max_size=3)).map(
            lambda t: f"{t[0]}({', '.join(t[1])})"),
    )


EXPRESSIONS = st.recursive(LEAVES, _extend, max_leaves=8)
RESTRICTIONS_GENERATED = st.one_of(EXPRESSIONS, st.tuples(
    EXPRESSIONS, st.sampled_from(["<", "<=", "==", "!=", ">"]), EXPRESSIONS).map(lambda t: f"{t[0]} {t[1]} {t[2]}"))


def python_outcome(expr: str) -> list[bool] | None:
    """Python's own verdict per configuration of GRID (ZeroDivision/Overflow: excluded), or
    ``None`` when Python raises another error for some configuration."""
    code = compile(expr, "<generated>", "eval")
    mask = []
    for combo in itertools.product(*GRID.values()):
        try:
            mask.append(bool(eval(code, {"__builtins__": {}, **RESTRICTION_FUNCTIONS}, dict(zip(GRID, combo)))))
        except ArithmeticError:
            mask.append(False)
        except (TypeError, ValueError):
            return None
    return mask


@settings(max_examples=250, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(RESTRICTIONS_GENERATED)
def test_generated_restrictions_agree_with_python(expr):
    want = python_outcome(expr)
    combos = [dict(zip(GRID, c)) for c in itertools.product(*GRID.values())]
    if want is None:
        with pytest.raises(RestrictionError):
            ParamSpace(GRID, [expr])
        return
    space = ParamSpace(GRID, [expr])
    assert list(space.configs()) == [c for c, keep in zip(combos, want) if keep], expr
    restriction = space.restrictions[0]
    assert [restriction.holds(c) for c in combos] == want, expr  # the per-configuration path alone


JUNK_TOKENS = ["a", "b", "s", "f", "1", "0", "2.5", "'x'", "+", "-", "*", "**", "/", "//", "%", "(", ")", "[", "]",
               ",", ".", " and ", " or ", " not ", " in ", " is ", "lambda", ":", " if ", " else ", " for ",
               "__import__", "__class__", "os", "==", "<", "<=", " ", "abs", "min", "max", "int", "float", "{",
               "}", "9**9**9", "~", "&", "|", "^", "<<", ">>", "\n", "#", "'", "\\", "@", "yield", ";", "=", ":=",
               "print", "True", "None", "1e308", "10**", "0x", "j", '"', "\t", "…"]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.one_of(
    st.lists(st.sampled_from(JUNK_TOKENS), max_size=14).map("".join),
    st.text(max_size=30),
    st.tuples(EXPRESSIONS, st.integers(0, 60), st.sampled_from(JUNK_TOKENS)).map(  # a valid one, broken
        lambda t: t[0][:t[1]] + t[2] + t[0][t[1]:])))
def test_junk_restrictions_are_refused_or_evaluated(junk):
    try:
        space = ParamSpace(GRID, [junk])
    except RestrictionError as e:
        assert "\n" not in str(e)
    else:
        assert 0 <= len(space) <= space.cartesian_size


# ---------------------------------------------------------------------------------------------
# T1 problems


def test_read_problem(problem_path):
    problem = read_problem(problem_path)
    assert problem.name == "toy" and problem.kernel_name == "toy_kernel" and problem.language == "CUDA"
    assert problem.space.parameters == {n: tuple(v) for n, v in PARAMS.items()}
    assert [r.source for r in problem.space.restrictions] == RESTRICTIONS
    assert problem.defaults == {"a": 1, "b": 1, "mode": "x"}
    assert problem.problem_size == (64, 64) and problem.objective == "time" and problem.device is None
    assert len(problem.sha256) == 64 and len(problem.space) == 16


def test_problem_values_as_range(tmp_path):
    data = t1_problem()
    data["ConfigurationSpace"]["TuningParameters"][1]["Values"] = "list(range(1, 9, 3))"
    data["ConfigurationSpace"]["TuningParameters"][1]["Default"] = 4
    assert read_problem(write(tmp_path / "p.json", data)).space.parameters["b"] == (1, 4, 7)


def _with(data: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    node = data
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return data


TP = ["ConfigurationSpace", "TuningParameters"]


@pytest.mark.parametrize("edit, parts", [
    (lambda d: _with(d, [*TP, 0, "Values"], "[1, 2"), ["TuningParameters[0].Values", "does not parse"]),
    (lambda d: _with(d, [*TP, 0, "Values"], "__import__('os').listdir('.')"),
     ["TuningParameters[0].Values", "is not a list or tuple of constants"]),
    (lambda d: _with(d, [*TP, 0, "Values"], "[1, a]"), ["TuningParameters[0].Values", "'a' is not a constant"]),
    (lambda d: _with(d, [*TP, 0, "Values"], "[1, 2.5]"), ["TuningParameters[0].Values", "not of Type 'int'"]),
    (lambda d: _with(d, [*TP, 0, "Values"], "[]"), ["holds no values"]),
    (lambda d: _with(d, [*TP, 0, "Values"], "range(1000000000)"), ["values (at most"]),
    (lambda d: _with(d, [*TP, 0, "Default"], 7), ["TuningParameters[0].Default", "7 is not one of a's values"]),
    (lambda d: _with(d, [*TP, 0, "Type"], "integer"), ["TuningParameters[0].Type", "fails the T1"]),
    (lambda d: _with(d, [*TP, 1, "Name"], "a"), ["TuningParameters[1].Name", "appears twice"]),
    (lambda d: _with(d, ["ConfigurationSpace", "Conditions", 0, "Expression"], "a.b"),
     ["ConfigurationSpace.Conditions[0]", "attribute access"]),
    (lambda d: _with(d, ["ConfigurationSpace", "Conditions", 0, "Parameters"], ["zz"]),
     ["Conditions[0].Parameters", "'zz' is not a parameter"]),
    (lambda d: _with(d, ["KernelSpecification"], {}), ["KernelSpecification", "fails the T1"]),
])
def test_bad_problem_files(tmp_path, edit, parts):
    path = write(tmp_path / "bad.json", edit(t1_problem()))
    expect_error(lambda: read_problem(path), str(path), *parts)


# ---------------------------------------------------------------------------------------------
# Kernel Tuner caches


def _check_toy_measured(ms, space_size: int) -> None:
    assert len(ms) == space_size
    ok = ms.record(OK_CONFIG)
    assert ok.ok and ok.time_secs == 1.5 / 1000 and ok.times_secs == (1.4 / 1000, 1.6 / 1000)
    assert ok.compile_secs == 0.9 and ok.framework_secs == 0.01
    assert ok.charge_secs == pytest.approx(0.9 + 0.05 + 0.01)
    failed = ms.record(FAILED_CONFIG)
    assert failed.error == "build_error" and failed.time_secs is None and failed.times_secs == ()
    assert failed.charge_secs == pytest.approx(3.0 + 0.002)
    assert ms.record(MISSING_CONFIG) is None
    assert MISSING_CONFIG in ms.missing_configs()
    assert ms.counts() == {"ok": 1, "build_error": 1, "missing": space_size - 2}
    assert ms.best() == ms.space.index_of(OK_CONFIG)
    result = ok.to_measure_result()
    assert result.costs == ok.times_secs and result.build_secs == 0.9
    assert result.build_secs + result.run_secs == pytest.approx(ok.charge_secs)
    assert failed.to_measure_result().error == "build_error"


@pytest.mark.parametrize("gz", [False, True])
def test_read_cache_with_problem(tmp_path, problem_path, gz):
    path = write(tmp_path / ("cache.json.gz" if gz else "cache.json"), kt_cache(), gz=gz)
    ms = read_cache(path, read_problem(problem_path))
    _check_toy_measured(ms, 16)
    assert (ms.device, ms.kernel, ms.objective, ms.problem_size, ms.format) == (
        "Toy GPU", "toy_kernel", "time", (64, 64), "kernel_tuner_cache")
    assert ms.path == str(path) and len(ms.sha256) == 64 and ms.notes == ()
    expect_error(lambda: read_cache(path, read_problem(problem_path), require_complete=True),
                 str(path), "lacks 14 of the 16 valid configurations")


def test_read_cache_without_problem_is_the_cartesian_space(tmp_path):
    ms = read_cache(write(tmp_path / "c.json", kt_cache()))
    assert ms.space.restrictions == () and len(ms.space) == 32
    _check_toy_measured(ms, 32)


def test_read_unclosed_cache_as_kernel_tuner_does(tmp_path):
    # as Kernel Tuner writes it: the header without its last "}\n}", then one line per entry ending in ","
    header = json.dumps({**kt_cache(), "cache": {}}, indent="")[:-3]
    lines = "".join("\n" + json.dumps({k: v})[1:-1] + "," for k, v in kt_cache()["cache"].items())
    path = write(tmp_path / "open.json", header + lines)  # an interrupted run never closes it
    ms = read_cache(path)
    assert ms.counts()["ok"] == 1 and "not closed" in ms.notes[0]


@pytest.mark.parametrize("name, kind", sorted(KT_ERROR_KINDS.items()))
def test_kernel_tuner_error_names_map_to_error_kinds(tmp_path, name, kind):
    assert kind in ERROR_KINDS
    ms = read_cache(write(tmp_path / "c.json", kt_cache([(FAILED_CONFIG, {**FAILED_FIELDS, "time": name})])))
    assert ms.record(FAILED_CONFIG).error == kind and ms.record(FAILED_CONFIG).error_name == name


def test_string_values_with_commas_in_cache_keys(tmp_path):
    params = {"s": ["x,y", "x", "y"], "n": [1, 2]}
    config = {"s": "x,y", "n": 2}
    data = {**kt_cache(), "tune_params_keys": list(params), "tune_params": params,
            "cache": {key_of(config): {**config, **OK_FIELDS}}}
    assert read_cache(write(tmp_path / "c.json", data)).record(config).ok


def _cache_edit(entry_edit: dict[str, Any] | None = None, key: str | None = None, drop: str | None = None,
                config: dict[str, Any] | None = None) -> dict[str, Any]:
    config = config or OK_CONFIG
    entry = {**config, **OK_FIELDS, **(entry_edit or {})}
    if drop:
        del entry[drop]
    return {**kt_cache(), "cache": {key if key is not None else key_of(config): entry}}


@pytest.mark.parametrize("data, parts", [
    ("{\"cache\": {\"1,2,x\": }}", ["malformed JSON at line 1 column 21: Expecting value"]),
    ("[1, 2]", ["(top level)", "is not a JSON object"]),
    ('{"tune_params": {}, "tune_params": {}}', ["holds key 'tune_params' twice"]),
    (json.dumps(kt_cache()).replace("1.5", "NaN", 1), ["non-standard JSON constant NaN"]),
    ({**kt_cache(), "tune_params_keys": ["b", "a", "mode"]}, ["tune_params_keys", "differ from tune_params"]),
    ({k: v for k, v in kt_cache().items() if k != "cache"}, ["cache: missing"]),
    (_cache_edit(key="1,2"), ["cache['1,2']", "key has 2 values, want 3", "a, b, mode"]),
    (_cache_edit(key="1,3,x"), ["cache['1,3,x']", "b value '3' is not one of [1, 2, 4, 8]"]),
    (_cache_edit(drop="mode"), ["cache['1,2,x'].mode", "missing"]),
    (_cache_edit({"a": 2}), ["cache['1,2,x'].a", "2 differs from the key's value 1"]),
    (_cache_edit(drop="time"), ["cache['1,2,x'].time", "missing"]),
    (_cache_edit({"time": 0}), ["cache['1,2,x'].time", "is not a measured time", "'mode': 'x'"]),
    (_cache_edit({"time": -1.0}), ["cache['1,2,x'].time", "is not a measured time"]),
    (_cache_edit({"time": 1e12}), ["cache['1,2,x'].time", "is not a measured time"]),
    (_cache_edit({"times": [1.0, "x"]}), ["cache['1,2,x'].times[1]", "is not a measured time"]),
    (_cache_edit({"times": [1.0, True]}), ["cache['1,2,x'].times[1]", "is not a measured time"]),
    (_cache_edit({"times": 3}), ["cache['1,2,x'].times", "is not a list"]),
    (_cache_edit({"time": "Crashed"}), ["cache['1,2,x'].time", "'Crashed' is neither a time in ms"]),
    (_cache_edit({"compile_time": -5}), ["cache['1,2,x'].compile_time", "is not a duration"]),
    (_cache_edit({"benchmark_time": 4e9}), ["cache['1,2,x'].benchmark_time", "at most 3600 s"]),
])
def test_bad_cache_files(tmp_path, data, parts):
    path = write(tmp_path / "bad.json", data)
    expect_error(lambda: read_cache(path), str(path), *parts)


def test_cache_entry_outside_the_restricted_space(tmp_path, problem_path):
    outside = {"a": 3, "b": 4, "mode": "x"}  # a * b > 8
    path = write(tmp_path / "c.json", _cache_edit(config=outside))
    read_cache(path)  # without the problem's restrictions it is a valid combination
    expect_error(lambda: read_cache(path, read_problem(problem_path)), str(path), "cache['3,4,x']",
                 "outside the space", "a * b <= 8")


@pytest.mark.parametrize("data, parts", [
    ({**kt_cache(), "tune_params": {**PARAMS, "b": [1, 2, 4]}}, ["tune_params['b']", "differ from the problem's"]),
    ({**kt_cache(), "tune_params_keys": ["a", "mode", "b"], "tune_params": {"a": [1, 2, 3, 4], "mode": ["x", "y"],
                                                                             "b": [1, 2, 4, 8]}},
     ["tune_params_keys", "differ from the problem's"]),
    ({**kt_cache(), "kernel_name": "other"}, ["kernel_name", "differs from the problem's"]),
    ({**kt_cache(), "problem_size": [32, 64]}, ["problem_size", "differs from the problem's"]),
])
def test_cache_that_disagrees_with_the_problem(tmp_path, problem_path, data, parts):
    path = write(tmp_path / "c.json", data)
    expect_error(lambda: read_cache(path, read_problem(problem_path)), str(path), *parts)


@pytest.mark.parametrize("raw, part", [
    (b"\x1f\x8b\x08\x00garbage", "is not a valid gzip stream"),
    (gzip.compress(json.dumps(kt_cache()).encode())[:-12], "is not a valid gzip stream"),
    (b"\xff\xfe{}", "is not UTF-8"),
])
def test_corrupt_files(tmp_path, raw, part):
    path = tmp_path / "bad.json.gz"
    path.write_bytes(raw)
    for reader in (read_cache, read_t4, read_problem):
        expect_error(lambda reader=reader: reader(path), str(path), "file", part)
    expect_error(lambda: read_cache(tmp_path / "absent.json"), "absent.json", "cannot be read")


# ---------------------------------------------------------------------------------------------
# T4 results


@pytest.mark.parametrize("gz", [False, True])
def test_read_t4_with_problem(tmp_path, problem_path, gz):
    path = write(tmp_path / "toy_T4.json", t4_results(), gz=gz)
    ms = read_t4(path, read_problem(problem_path))
    assert ms.format == "t4" and ms.kernel == "toy_kernel"
    ok = ms.record(OK_CONFIG)
    assert ok.benchmark_secs == pytest.approx(3.0 / 1000)  # no benchmark time: the sum of the runtimes
    assert ok.time_secs == 1.5 / 1000 and ok.times_secs == (1.4 / 1000, 1.6 / 1000)
    failed = ms.record(FAILED_CONFIG)
    assert failed.error == "build_error" and failed.error_name == "compile"
    assert failed.charge_secs == pytest.approx(3.002)
    assert ms.counts() == {"ok": 1, "build_error": 1, "missing": 14}


def test_read_t4_without_problem_infers_the_space(tmp_path):
    ms = read_t4(write(tmp_path / "t4.json", t4_results()))
    assert ms.space.parameters == {"a": (1, 2), "b": (2, 4), "mode": ("x", "y")}
    assert ms.counts() == {"ok": 1, "build_error": 1, "missing": 6}


@pytest.mark.parametrize("invalidity, kind", sorted(T4_ERROR_KINDS.items()))
def test_t4_invalidity_maps_to_error_kinds(tmp_path, invalidity, kind):
    data = t4_results()
    data["results"][1]["invalidity"] = invalidity
    if kind is None:
        data["results"][1]["measurements"][0]["value"] = 2.0
    assert kind is None or kind in ERROR_KINDS
    assert read_t4(write(tmp_path / "t4.json", data)).record(FAILED_CONFIG).error == kind


def _t4_edit(path: list[Any], value: Any) -> dict[str, Any]:
    return _with(t4_results(), path, value)


@pytest.mark.parametrize("data, parts", [
    ("{\"results\": [", ["malformed JSON"]),
    (_t4_edit(["results", 0, "invalidity"], "bogus"), ["results[0].invalidity", "fails the T4"]),
    (_t4_edit(["results", 1, "correctness"], "yes"), ["results[1].correctness", "fails the T4"]),
    (_t4_edit(["results", 0, "times", "compilation_time"], "slow"), ["results[0].times.compilation_time",
                                                                     "fails the T4"]),
    ({"schema_version": "1.0.0", "results": [{"configuration": OK_CONFIG}]}, ["results[0]", "fails the T4"]),
    (_t4_edit(["schema_version"], "one"), ["schema_version", "fails the T4"]),
    ({"schema_version": "1.0.0"}, ["results: missing"]),
    (_t4_edit(["metadata", "timeunit"], "fortnights"), ["metadata.timeunit", "unknown time unit"]),
    (_t4_edit(["results", 0, "measurements", 0, "value"], 0), ["results[0].measurements[0].value",
                                                                "is not a measured time"]),
    (_t4_edit(["results", 0, "measurements", 0, "value"], "RuntimeFailedConfig"),
     ["results[0].measurements[0].value", "is not a measured time"]),
    (_t4_edit(["results", 0, "times", "runtimes"], [1.0, -1.0]), ["results[0].times.runtimes[1]"]),
    (_t4_edit(["results", 0, "times", "framework"], -1), ["results[0].times.framework", "is not a duration"]),
    (_t4_edit(["results", 1, "configuration"], OK_CONFIG), ["results[1].configuration", "duplicates"]),
    (_t4_edit(["results", 1, "configuration"], {"a": 2, "b": 4}), ["results[1].configuration", "differ from"]),
])
def test_bad_t4_files(tmp_path, data, parts):
    path = write(tmp_path / "bad_T4.json", data)
    expect_error(lambda: read_t4(path), str(path), *parts)


@pytest.mark.parametrize("config, parts", [
    ({"a": 3, "b": 4, "mode": "x"}, ["results[1].configuration", "outside the space", "a * b <= 8"]),
    ({"a": 3, "b": 5, "mode": "x"}, ["results[1].configuration", "b=5 is not one of its values"]),
    ({"a": 3, "b": 1}, ["results[1].configuration", "lacks parameters ['mode']"]),
])
def test_t4_config_outside_the_problem(tmp_path, problem_path, config, parts):
    path = write(tmp_path / "t4.json", _t4_edit(["results", 1, "configuration"], config))
    expect_error(lambda: read_t4(path, read_problem(problem_path)), str(path), *parts)


# ---------------------------------------------------------------------------------------------
# The Benchmark Hub's files (when the shared folder is there)

needs_hub = pytest.mark.skipif(not HUB.is_dir(), reason=f"{HUB} is not here")


@needs_hub
def test_benchmark_hub_problems():
    sizes = {"convolution_milo": (10_240, 4_362), "dedispersion_milo": (22_272, 11_130)}
    for kernel, (cartesian, valid) in sizes.items():
        problem = read_problem(HUB / "kernels" / f"{kernel}.json")
        assert (problem.space.cartesian_size, len(problem.space)) == (cartesian, valid)


@needs_hub
@pytest.mark.slow
def test_benchmark_hub_caches(capsys):
    loads = []
    for kernel, size in (("convolution_milo", 4_362), ("dedispersion_milo", 11_130)):
        problem = read_problem(HUB / "kernels" / f"{kernel}.json")
        files = sorted((HUB / "cachefiles" / kernel).glob("*.json.gz"))
        assert len(files) == 7
        by_name = {}
        for path in files:
            start = time.perf_counter()
            reader = read_t4 if path.name.endswith("_T4.json.gz") else read_cache
            ms = reader(path, problem, require_complete=True)  # every entry in the space, none missing
            loads.append(f"{kernel}/{path.name}: {time.perf_counter() - start:.2f} s")
            assert len(ms) == size and ms.space is problem.space
            assert ms.counts().get("ok", 0) >= 3_889
            by_name[path.name] = ms
        cache, t4 = by_name["A100.json.gz"], by_name["A100_T4.json.gz"]
        assert [(r.error, r.time_secs) for r in cache.records] == [(r.error, r.time_secs) for r in t4.records]
    assert len(loads) == 14
    with capsys.disabled():
        print("\n" + "\n".join(loads))
