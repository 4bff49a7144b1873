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
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Literal, overload

from tune_gym.errors import TaskError, TuneGymError

__all__ = ["OptionError", "check_bool", "check_callable", "check_choice", "check_float", "check_int",
           "check_int_option", "check_keys", "check_str", "show"]

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
        raise _fail(name, f"an integer{_bounds(low, high)}", value, none)
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
        raise _fail(name, f"a {'finite ' if finite else ''}number{_bounds(low, high, low_open)}", value, none)
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
        raise OptionError(f"{name} must be one of {', '.join(map(show, choices))}, got {show(value)}")
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
