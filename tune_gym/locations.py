"""Where the project's committed data lives, found the same way from a source checkout and an
installed package.

The data is the ``benchmarks/`` directory of the repository: the committed datasets
(``benchmarks/datasets``, with their space descriptions in ``datasets/spaces``) and the network
kernels (``benchmarks/networks/tir``). :func:`benchmarks_dir` finds it, in this order:

1. an explicit path given to it (a caller's argument or command-line option);
2. the environment variable ``TUNE_GYM_BENCHMARKS`` (:data:`ENV`);
3. the ``benchmarks/`` directory of the checkout tune_gym runs from, when it runs from source
   (``tune_gym/`` beside ``pyproject.toml`` and ``benchmarks/datasets``);
4. else a :class:`DataNotFoundError` saying to set ``TUNE_GYM_BENCHMARKS`` (an installed package
   does not ship the data: point the variable at a checkout's ``benchmarks/``).

``TUNE_GYM_DATA`` is another thing: extra directories of datasets and measurement files (e.g.
the Kernel Tuner spaces of the ``kt`` kind), searched before these
(:func:`tune_gym.datasets.catalog.data_dirs`, :func:`tune_gym.external.files.data_dirs`).

Example:
    >>> benchmarks_path("datasets")              # <checkout>/benchmarks/datasets from source
    >>> benchmarks_dir("/data/tune_gym/benchmarks")  # an explicit directory, checked
"""

from __future__ import annotations

import os
from pathlib import Path

from tune_gym.errors import TuneGymError

__all__ = ["ENV", "DataNotFoundError", "benchmarks_dir", "benchmarks_path", "source_benchmarks_dir"]

#: The environment variable naming the ``benchmarks/`` directory.
ENV = "TUNE_GYM_BENCHMARKS"


class DataNotFoundError(TuneGymError):
    """The ``benchmarks/`` directory was not found, or a path given for it is not a directory."""


def source_benchmarks_dir(package: Path | None = None) -> Path | None:
    """The ``benchmarks/`` directory of the source checkout holding ``package`` (default: this
    tune_gym package's directory), or None when the package is not in a checkout (installed)."""
    root = (package or Path(__file__).resolve().parent).parent
    bench = root / "benchmarks"
    return bench if (root / "pyproject.toml").is_file() and (bench / "datasets").is_dir() else None


def benchmarks_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The ``benchmarks/`` directory: ``explicit``, else ``$TUNE_GYM_BENCHMARKS``, else the
    source checkout's (see the module docstring).

    Raises:
        DataNotFoundError: a given path (argument or variable) is not a directory, or none is
            given and tune_gym does not run from a checkout; the message names the variable.
    """
    for given, what in ((explicit, "the benchmarks directory"), (os.environ.get(ENV) or None, f"{ENV}")):
        if given is not None:
            path = Path(given).expanduser()
            if not path.is_dir():
                raise DataNotFoundError(f"{what} {str(given)!r} is not a directory; give the benchmarks/ directory "
                                        "of a tune_gym checkout")
            return path
    found = source_benchmarks_dir()
    if found is None:
        raise DataNotFoundError(f"tune_gym's data (the repository's benchmarks/ directory) was not found: this "
                                f"installed package does not include it; set {ENV} to the benchmarks/ directory "
                                "of a tune_gym checkout")
    return found


def benchmarks_path(*parts: str, explicit: str | os.PathLike[str] | None = None) -> Path:
    """``benchmarks_dir(explicit) / parts...`` (e.g. ``benchmarks_path("datasets")``); the part
    need not exist (a catalog directory may be empty)."""
    return benchmarks_dir(explicit).joinpath(*parts)
