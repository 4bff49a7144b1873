"""Checks of option values where the options are declared: type, range, one-line errors.

Backends (:class:`tune_gym.measure.live.LiveConfig`, the RPC, replay, surrogate and registered kinds'
options), the ``Tune-v0`` env and the agents check every option they take with these
helpers when they are made, so a bad value is refused before anything is measured. An error
is an :class:`OptionError` (a ``ValueError``) naming the option, the value and what is
allowed, e.g. ``repeat must be an integer >= 1, got 0``.

Rules: a ``bool`` is not a number (``True`` is refused where an int is asked for), an int
option takes no float (``16.0`` neither), NaN is never a number and infinities only where an
option says so. Text from the command line is turned into values by
:func:`tune_gym.cli.parse_options` before it reaches these checks; a string is never
converted here.

An option is declared once, where it is taken: an :class:`Option` (:class:`Int`, :class:`Float`,
:class:`Bool`, :class:`Choice`, :class:`Str`, :class:`Func` or :class:`Check`) in the parameter's
``typing.Annotated`` hint, with a one-line help::

    @checked_options
    def __init__(self, pop_size: Annotated[int, Int(2, help="population size")] = 100) -> None: ...

:func:`checked_options` checks every declared argument before the body runs (a dataclass checks
its fields with :func:`check_fields`), and :func:`option_table` reads the same declarations for
help listings and the documentation's tables (name, default, what is allowed, what it means).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import numbers
import re
import typing
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, overload

from tune_gym.errors import TaskError, TuneGymError

__all__ = ["Bool", "Check", "Choice", "Float", "Func", "Int", "Option", "OptionDoc", "OptionError", "Str", "check_bool",
           "check_callable", "check_choice", "check_fields", "check_float", "check_int", "check_int_option",
           "check_keys", "check_str", "checked_options", "declared_options", "option_table", "show", "table_lines"]

_INT_TEXT = re.compile(r"[0-9]{1,9}", re.ASCII)


class OptionError(TuneGymError):
    """An option's value has the wrong type or is out of range, or the option is unknown."""


def show(value: Any, limit: int = 60) -> str:
    """``repr(value)`` on one line, cut to about ``limit`` characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_int(value: Any) -> bool:
    """An int or NumPy integer; not a bool (NumPy's bool is no ``numbers.Integral`` anyway)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _bounds(low: float | None, high: float | None, low_open: bool = False) -> str:
    """`` >= 1``, `` > 0``, `` in [0, 1]``, `` <= 5`` or ````."""
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{low:g}, {high:g}]"
    if low is not None:
        return f" {'>' if low_open else '>='} {low:g}"
    return f" <= {high:g}" if high is not None else ""


def _int_text(low: int | None, high: int | None) -> str:
    """``integer >= 1``: what an integer option allows."""
    return f"integer{_bounds(low, high)}"


def _float_text(low: float | None, high: float | None, low_open: bool, finite: bool) -> str:
    """``finite number > 0``: what a number option allows."""
    return f"{'finite ' if finite else ''}number{_bounds(low, high, low_open)}"


def _choices_text(choices: Collection[Any]) -> str:
    """``one of 'a', 'b'``."""
    return f"one of {', '.join(map(show, choices))}"


def _fail(name: str, wanted: str, value: Any, none: bool) -> OptionError:
    return OptionError(f"{name} must be {wanted}{' or None' if none else ''}, got {show(value)}")


@overload
def check_int(name: str, value: Any, low: int | None = ..., high: int | None = ...,
              *, none: Literal[False] = ...) -> int: ...
@overload
def check_int(name: str, value: Any, low: int | None = ..., high: int | None = ...,
              *, none: Literal[True]) -> int | None: ...
def check_int(name: str, value: Any, low: int | None = None, high: int | None = None,
              *, none: bool = False) -> int | None:
    """``value`` as an ``int`` when it is an integer (not a bool, not a float) in ``[low, high]``
    (either bound may be open-ended: ``None``); with ``none=True`` also ``None``.

    Raises:
        OptionError: ``"{name} must be an integer >= {low}, got {value!r}"`` (or the range given).
    """
    if value is None and none:
        return None
    if not _is_int(value) or (low is not None and value < low) or (high is not None and value > high):
        raise _fail(name, f"an {_int_text(low, high)}", value, none)
    return int(value)


@overload
def check_float(name: str, value: Any, low: float | None = ..., high: float | None = ..., *,
                low_open: bool = ..., finite: bool = ..., none: Literal[False] = ...) -> float: ...
@overload
def check_float(name: str, value: Any, low: float | None = ..., high: float | None = ..., *,
                low_open: bool = ..., finite: bool = ..., none: Literal[True]) -> float | None: ...
def check_float(name: str, value: Any, low: float | None = None, high: float | None = None, *,
                low_open: bool = False, finite: bool = True, none: bool = False) -> float | None:
    """``value`` as a ``float`` when it is a real number (int or float, not a bool, not NaN) in
    ``[low, high]`` (``(low, high]`` with ``low_open``); infinities only with ``finite=False``.

    Raises:
        OptionError: ``"{name} must be a finite number > 0, got nan"`` (or the range given).
    """
    if value is None and none:
        return None
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    number = float(value) if ok else math.nan
    ok = ok and not math.isnan(number) and (math.isfinite(number) or not finite)
    if ok and low is not None:
        ok = number > low if low_open else number >= low
    if ok and high is not None:
        ok = number <= high
    if not ok:
        raise _fail(name, f"a {_float_text(low, high, low_open, finite)}", value, none)
    return number


def check_bool(name: str, value: Any) -> bool:
    """``value`` when it is ``True`` or ``False`` (not 0 / 1, not a string).

    Raises:
        OptionError: ``"{name} must be True or False, got 'yes'"``.
    """
    if not isinstance(value, bool):
        raise OptionError(f"{name} must be True or False, got {show(value)}")
    return value


def check_choice(name: str, value: Any, choices: Collection[Any]) -> Any:
    """``value`` when it is one of ``choices`` (compared by type too: ``True`` is not ``1``).

    Raises:
        OptionError: ``"{name} must be one of 'a', 'b', got 'c'"``.
    """
    if not any(type(value) is type(c) and value == c for c in choices):
        raise OptionError(f"{name} must be {_choices_text(choices)}, got {show(value)}")
    return value


@overload
def check_str(name: str, value: Any, *, none: Literal[False] = ...) -> str: ...
@overload
def check_str(name: str, value: Any, *, none: Literal[True]) -> str | None: ...
def check_str(name: str, value: Any, *, none: bool = False) -> str | None:
    """``value`` when it is a non-empty string (or ``None`` with ``none=True``).

    Raises:
        OptionError: ``"{name} must be a non-empty string, got 3"``.
    """
    if value is None and none:
        return None
    if not isinstance(value, str) or not value:
        raise _fail(name, "a non-empty string", value, none)
    return value


def check_callable(name: str, value: Any, *, none: bool = True) -> Callable[..., Any] | None:
    """``value`` when it is callable (or ``None``, unless ``none=False``).

    Raises:
        OptionError: ``"{name} must be a callable or None, got 3.0"``.
    """
    if value is None and none:
        return None
    if not callable(value):
        raise _fail(name, "a callable", value, none)
    return value


def check_keys(owner: str, options: Mapping[str, Any] | Iterable[str], known: Iterable[str]) -> None:
    """Refuse option names that are not in ``known``.

    Raises:
        OptionError: ``"{owner}: unknown option 'x'; its options: a, b, c"``.
    """
    names = list(known)
    unknown = [key for key in options if key not in names]
    if unknown:
        listed = ", ".join(names) or "none"
        raise OptionError(f"{owner}: unknown option{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(map(show, unknown))}; its options: {listed}")


def check_int_option(value: str, where: str, lo: int, hi: int) -> str:
    """``value``, the text of an integer option (a target option of a task URI, an environment
    variable), as a canonical decimal integer in ``[lo, hi]`` (``"04"`` becomes ``"4"``; no sign,
    at most 9 digits); a :class:`~tune_gym.errors.TaskError` starting with ``where`` otherwise."""
    if not _INT_TEXT.fullmatch(value) or not lo <= int(value) <= hi:
        raise TaskError(f"{where}={show(value)} out of range; accepted: an integer in [{lo}, {hi}]")
    return str(int(value))


# ---------------------------------------------------------------------- declarations
@dataclass(frozen=True, kw_only=True)
class Option:
    """An option's declaration, put in its parameter's (or dataclass field's) ``Annotated`` hint:
    how a value is checked (:meth:`check`, by the ``check_*`` functions above), what is allowed
    in a few words (:meth:`allowed`) and one line on what the option means (``help``)."""

    help: str

    def check(self, name: str, value: Any) -> Any:
        """``value`` checked and normalized (an integer as ``int``, a number as ``float``); an
        :class:`OptionError` naming ``name`` otherwise."""
        raise NotImplementedError

    def allowed(self) -> str:
        """What the option takes, e.g. ``integer >= 2``, ``one of 'a', 'b'``."""
        raise NotImplementedError


def _or_none(text: str, none: bool) -> str:
    return f"{text} or None" if none else text


@dataclass(frozen=True)
class Int(Option):
    """An integer in ``[low, high]`` (:func:`check_int`); ``none``: or ``None``."""

    low: int | None = None
    high: int | None = None
    none: bool = False

    def check(self, name: str, value: Any) -> int | None:
        return check_int(name, value, self.low, self.high, none=self.none)  # type: ignore[call-overload]

    def allowed(self) -> str:
        return _or_none(_int_text(self.low, self.high), self.none)


@dataclass(frozen=True)
class Float(Option):
    """A real number in ``[low, high]`` (``(low, high]`` with ``low_open``; :func:`check_float`),
    infinities only with ``finite=False``; ``none``: or ``None``."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    finite: bool = True
    none: bool = False

    def check(self, name: str, value: Any) -> float | None:
        return check_float(name, value, self.low, self.high, low_open=self.low_open,  # type: ignore[call-overload]
                           finite=self.finite, none=self.none)

    def allowed(self) -> str:
        return _or_none(_float_text(self.low, self.high, self.low_open, self.finite), self.none)


@dataclass(frozen=True)
class Bool(Option):
    """``True`` or ``False`` (:func:`check_bool`)."""

    def check(self, name: str, value: Any) -> bool:
        return check_bool(name, value)

    def allowed(self) -> str:
        return "True or False"


@dataclass(frozen=True)
class Choice(Option):
    """One of ``choices`` (:func:`check_choice`)."""

    choices: tuple[Any, ...] = ()

    def check(self, name: str, value: Any) -> Any:
        return check_choice(name, value, self.choices)

    def allowed(self) -> str:
        return _choices_text(self.choices)


@dataclass(frozen=True)
class Str(Option):
    """A non-empty string (:func:`check_str`); ``none``: or ``None``."""

    none: bool = False

    def check(self, name: str, value: Any) -> str | None:
        return check_str(name, value, none=self.none)  # type: ignore[call-overload]

    def allowed(self) -> str:
        return _or_none("non-empty string", self.none)


@dataclass(frozen=True)
class Func(Option):
    """A callable (:func:`check_callable`); ``none``: or ``None``."""

    none: bool = True

    def check(self, name: str, value: Any) -> Any:
        return check_callable(name, value, none=self.none)

    def allowed(self) -> str:
        return _or_none("callable", self.none)


@dataclass(frozen=True)
class Check(Option):
    """An option with its own check: ``fn(name, value)`` returns the value (normalized, of the
    same kind, so checking it again passes) or raises an :class:`OptionError`; ``text`` says
    what it allows."""

    fn: Callable[[str, Any], Any] = lambda name, value: value
    text: str = ""

    def check(self, name: str, value: Any) -> Any:
        return self.fn(name, value)

    def allowed(self) -> str:
        return self.text


def _hints(obj: Any) -> dict[str, Any]:
    """The resolved hints of a function or class, ``Annotated`` kept. A function hint naming
    what only type checkers import (``TYPE_CHECKING``) declares no option and is skipped."""
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except NameError:
        if isinstance(obj, type):
            raise
        func = inspect.unwrap(obj)
        out = {}
        for name, hint in func.__annotations__.items():
            try:
                out[name] = eval(hint, func.__globals__) if isinstance(hint, str) else hint
            except NameError:
                continue
        return out


_DECLARED: dict[Any, dict[str, Option]] = {}  # function or class -> its declared options


def declared_options(obj: Any) -> dict[str, Option]:
    """``{name: Option}`` of the parameters of a function (or the fields of a dataclass) whose
    ``Annotated`` hint holds an :class:`Option` (resolved once per function or class)."""
    if obj not in _DECLARED:
        out = {}
        for name, hint in _hints(obj).items():
            found = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Option)]
            if typing.get_origin(hint) is typing.Annotated and found:
                out[name] = found[0]
        _DECLARED[obj] = out
    return _DECLARED[obj]


_F = typing.TypeVar("_F", bound=Callable[..., Any])


@overload
def checked_options(function: _F, *, who: str = ...) -> _F: ...
@overload
def checked_options(function: None = ..., *, who: str = ...) -> Callable[[_F], _F]: ...
def checked_options(function: _F | None = None, *, who: str = "") -> _F | Callable[[_F], _F]:
    """Decorator: every argument of ``function`` declared with an :class:`Option`, given or
    defaulted, is checked before the body runs, which gets the checked values (the first bad one
    is an :class:`OptionError` naming it, after ``"{who}: "`` with ``@checked_options(who=...)``).
    Hints are resolved at the first call."""
    if function is None:
        return functools.partial(checked_options, who=who)
    signature = inspect.signature(function)
    prefix = f"{who}: " if who else ""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        for name, option in declared_options(function).items():
            bound.arguments[name] = option.check(prefix + name, bound.arguments[name])
        return function(*bound.args, **bound.kwargs)

    return typing.cast(_F, wrapper)


def check_fields(obj: Any, who: str) -> None:
    """Check and normalize every field of the dataclass ``obj`` declared with an :class:`Option`,
    in field order (an :class:`OptionError` names the first bad one: ``"{who}: {field} must be
    ..."``)."""
    declared = declared_options(type(obj))
    for f in dataclasses.fields(obj):
        if f.name in declared:
            setattr(obj, f.name, declared[f.name].check(f"{who}: {f.name}", getattr(obj, f.name)))


@dataclass(frozen=True)
class OptionDoc:
    """One row of an options table: the option's name, its default (``repr``, or ``"required"``),
    what it allows and what it means (both empty for an option declared without an
    :class:`Option`)."""

    name: str
    default: str
    allowed: str
    help: str


def table_lines(rows: Iterable[OptionDoc]) -> list[str]:
    """An options table as aligned text lines (a header, then one line per option), for the
    command line's listings."""
    cells = [("option", "default", "allowed", "meaning"), *((r.name, r.default, r.allowed, r.help) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(3)]
    return [f"  {a:<{widths[0]}}  {b:<{widths[1]}}  {c:<{widths[2]}}  {d}".rstrip() for a, b, c, d in cells]


def _doc(name: str, default: Any, option: Option | None) -> OptionDoc:
    shown = "required" if default is inspect.Parameter.empty else repr(default)
    return OptionDoc(name, shown, option.allowed() if option else "", option.help if option else "")


def option_table(target: Any) -> list[OptionDoc]:
    """The options of ``target``, in declaration order: a dataclass's init fields, a class's
    constructor parameters (and its bases' where it passes ``**kwargs`` on, as agents do), or a
    function's keyword parameters."""
    if isinstance(target, type) and dataclasses.is_dataclass(target):
        declared = declared_options(target)
        rows = []
        for f in dataclasses.fields(target):
            if f.init:
                default = (f.default if f.default is not dataclasses.MISSING else f.default_factory()
                           if f.default_factory is not dataclasses.MISSING else inspect.Parameter.empty)
                rows.append(_doc(f.name, default, declared.get(f.name)))
        return rows
    inits = [vars(k)["__init__"] for k in target.__mro__ if k is not object and "__init__" in vars(k)] \
        if isinstance(target, type) else [target]
    rows, seen = [], set()
    for init in inits:
        params = list(inspect.signature(init).parameters.values())[1 if isinstance(target, type) else 0:]
        declared = declared_options(init)
        for p in params:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in seen:
                seen.add(p.name)
                rows.append(_doc(p.name, p.default, declared.get(p.name)))
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return rows
