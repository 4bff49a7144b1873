"""Tasks of the ``kt`` kind: a space that Kernel Tuner measured, addressed by the files' content.

One task is one kernel problem (a T1 problem file: parameters and restrictions) measured on one
device (a Kernel Tuner cache file, or T4 results, of every configuration that was timed)::

    kt://<kernel>/<device>?digest=<16 hex>&spec=<16 hex>&target=kt

e.g. ``kt://convolution_milo/A100?digest=1f0c6a1e5a9b3c77&spec=0b6f3d0a9e1c2b44&target=kt``.
``digest`` is the first 16 hex digits of the SHA-256 of the measurement file's bytes, ``spec``
those of the T1 problem file: they identify the task, in every process and on every machine
that has the same files. ``kernel`` and ``device`` are labels for people (the problem's
``BenchmarkName`` and the measurement file's name, e.g. ``A100`` for ``A100.json.gz``, as the
FAIR Benchmark Hub names its files by GPU); they are part of the URI as given.

The files are found by digest (:mod:`tune_gym.external.files`): those given by path in this
process (:func:`kt_task`), then the search path (``TUNE_GYM_DATA``,
:func:`tune_gym.external.files.add_data_dir`). A task whose file is nowhere is a
:class:`~tune_gym.errors.TaskError` naming the digest, the kernel and device, the directories
searched and where to download the Benchmark Hub's files (DOI 10.5281/zenodo.15364124).
Making a task reads its T1 problem (the space must be known); the measurement file is read
when the task's data is first needed (:func:`measured`), or at once by :func:`kt_task`. Either
way a bad file is the reader's one-line :class:`~tune_gym.external.KernelTunerFileError`
naming the file and the field.

FLOPs: Kernel Tuner's kernels come with no FLOP count tune_gym can trust, and the objective is
time. A task's :attr:`KTTask.flops` is the fixed :data:`NOMINAL_FLOPS` (10**6), so GFLOPS =
``1e6 / seconds / 1e9`` = 1 / (milliseconds per call): a decreasing function of time, and
rewards and best-so-far curves rank configs exactly as time does. :attr:`KTTask.flops_nominal`
says so, and listings show times instead.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tune_gym.errors import TaskError
from tune_gym.external import files
from tune_gym.external.kernel_tuner_io import (
    KernelTunerFileError,
    MeasuredSpace,
    Problem,
    read_cache,
    read_problem,
    read_t4,
)
from tune_gym.tasks.checks import fields, show
from tune_gym.tasks.targets import TargetSpec
from tune_gym.tasks.task import Task

__all__ = ["KIND_NAME", "NOMINAL_FLOPS", "OP", "KTTask", "kt_task", "measured", "parse_uri", "problem"]

#: The target kind of these tasks.
KIND_NAME = "kt"
#: :attr:`KTTask.op` of every such task.
OP = "kernel_tuner"
#: The FLOP count every ``kt`` task states (see the module docstring): GFLOPS = 1 / ms per call.
NOMINAL_FLOPS = 10**6
_URI = re.compile(r"kt://(?P<kernel>[A-Za-z0-9_.-]{1,64})/(?P<device>[A-Za-z0-9_.-]{1,64})(?:\?(?P<query>.*))?",
                  re.ASCII | re.DOTALL)
_DIGEST = re.compile(r"[0-9a-f]{16}", re.ASCII)
_LABEL = re.compile(r"[A-Za-z0-9_.-]{1,64}", re.ASCII)


def _kt_target() -> TargetSpec:
    return TargetSpec(KIND_NAME)


@dataclass(frozen=True)
class KTTask(Task):
    """A Kernel Tuner measured space as a task (see the module docstring).

    Make one with :func:`kt_task` (from paths), ``Task.parse("kt://...")``, or the ``external``
    suite. ``op`` is ``"kernel_tuner"``, ``params`` is empty, the target is ``kt``.

    Attributes:
        kernel, device: the URI's labels.
        digest: the measurement file's 16-hex-digit content digest.
        spec: the T1 problem file's.
    """

    op: str = OP
    params: tuple[tuple[str, int], ...] = ()
    target: TargetSpec = field(default_factory=_kt_target)
    weights: str = "given"
    kernel: str = ""
    device: str = ""
    digest: str = ""
    spec: str = ""

    def __post_init__(self) -> None:
        for name in ("kernel", "device"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _LABEL.fullmatch(value):
                raise TaskError(f"kt task {name} {show(value)}: want 1-64 characters of A-Z a-z 0-9 _ . -")
        for name in ("digest", "spec"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _DIGEST.fullmatch(value):
                raise TaskError(f"kt task {name} {show(value)}: want 16 lowercase hex digits (of the file's sha256)")
        if not isinstance(self.target, TargetSpec) or self.target != _kt_target():
            raise TaskError(f"kt task {self.kernel}/{self.device}: target {show(str(self.target))} is not supported; "
                            f"accepted: {KIND_NAME} (a measured space is replayed, not built)")
        if (self.op, self.params, self.weights) != (OP, (), "given"):
            raise TaskError(f"kt task {self.kernel}/{self.device}: op, params and weights are fixed "
                            f"({OP!r}, (), 'given'), not {show((self.op, self.params, self.weights))}")
        data, spec = _files(self)
        if data.format == "cache" and data.kernel and spec.kernel and data.kernel != spec.kernel:
            raise TaskError(f"{self.uri}: the cache {data.path} measures kernel {data.kernel!r}, the T1 problem "
                            f"{spec.path} specifies {spec.kernel!r}")
        problem(self)  # a bad problem file is the reader's one-line error, here

    @classmethod
    def from_uri(cls, uri: str) -> KTTask:
        """Parse ``kt://<kernel>/<device>?digest=<16 hex>&spec=<16 hex>[&target=kt]``."""
        return parse_uri(uri)

    @property
    def uri(self) -> str:
        return f"kt://{self.kernel}/{self.device}?digest={self.digest}&spec={self.spec}&target={self.target}"

    def __str__(self) -> str:
        return self.uri

    def with_target(self, target: str | TargetSpec) -> KTTask:
        """This task (its only target is ``kt``; another is a :class:`TaskError`)."""
        spec = TargetSpec.coerce(target)
        return self if spec == self.target else KTTask(kernel=self.kernel, device=self.device, digest=self.digest,
                                                       spec=self.spec, target=spec)

    def with_weights(self, weights: str) -> KTTask:
        if weights not in ("", "given"):
            raise TaskError(f"{self.uri}: a measured space has no weight layout to choose; accepted: given")
        return self

    @property
    def has_torch_reference(self) -> bool:
        """False: there is no PyTorch op of a Kernel Tuner kernel."""
        return False

    @property
    def opdef(self) -> Any:
        raise TaskError(f"{self.uri} is a space measured with Kernel Tuner: it has no op builder")

    @property
    def flops(self) -> int:
        """:data:`NOMINAL_FLOPS` (not the kernel's work: see :attr:`flops_nominal`)."""
        return NOMINAL_FLOPS

    @property
    def flops_nominal(self) -> bool:
        """True: the FLOP count is nominal (see the module docstring)."""
        return True

    def _no_program(self, what: str) -> TaskError:
        return TaskError(f"{self.uri} is a space measured with Kernel Tuner: it has no {what} (replay it)")

    @property
    def input_shapes(self) -> list[tuple[int, ...]]:
        raise self._no_program("input tensors")

    @property
    def input_dtypes(self) -> list[str]:
        raise self._no_program("input tensors")

    def output_shape(self) -> tuple[int, ...]:
        raise self._no_program("output tensor")

    def tensors(self) -> list[Any]:
        raise self._no_program("TE tensors")

    def ir_module(self) -> Any:
        raise self._no_program("TVM module")

    @property
    def data_file(self) -> Path:
        """Where the measurement file is (found by its digest)."""
        return _files(self)[0].path

    @property
    def problem_file(self) -> Path:
        """Where the T1 problem file is (found by its digest)."""
        return _files(self)[1].path


def parse_uri(uri: str) -> KTTask:
    """A task from its ``kt://`` URI (see the module docstring); :class:`TaskError` naming the
    part that is malformed."""
    if not isinstance(uri, str):
        raise TaskError(f"a task URI must be a str, got {type(uri).__name__} {show(uri)}")
    text = uri.strip()
    m = _URI.fullmatch(text)
    if not m:
        raise TaskError(f"malformed kt task URI {show(text, 120)}; expected kt://<kernel>/<device>?digest=<16 hex>"
                        "&spec=<16 hex>&target=kt (labels of A-Z a-z 0-9 _ . -, at most 64 characters)")
    where = show(text, 120)
    query = fields(m["query"] or "", where)
    unknown = sorted(set(query) - {"digest", "spec", "target"})
    if unknown:
        raise TaskError(f"{where}: unknown field(s) {', '.join(unknown)}; accepted: digest, spec, target")
    for name in ("digest", "spec"):
        if name not in query:
            raise TaskError(f"{where}: lacks {name}=<16 hex digits> (the sha256 of the "
                            f"{'measurement' if name == 'digest' else 'T1 problem'} file)")
    target = query.get("target", KIND_NAME)
    if target != KIND_NAME:
        raise TaskError(f"{where}: target {target!r} is not supported; accepted: {KIND_NAME}")
    return KTTask(kernel=m["kernel"], device=m["device"], digest=query["digest"], spec=query["spec"])


def _files(task: KTTask) -> tuple[files.FileInfo, files.FileInfo]:
    """The task's measurement file and T1 problem file (:class:`TaskError` when one is nowhere,
    or is not a file of that kind)."""
    where = f"{task.uri} (kernel {task.kernel}, device {task.device})"
    data = files.find(task.digest)
    if data is None:
        raise files.missing(f"{where}: its measurement file", task.digest)
    if data.format not in ("cache", "t4"):
        raise TaskError(f"{where}: {data.path} has its digest but is not a Kernel Tuner cache or T4 results file "
                        f"({data.note or f'it is a {data.format} file'})")
    spec = files.find(task.spec)
    if spec is None:
        raise files.missing(f"{where}: its T1 problem file", task.spec)
    if spec.format != "t1":
        raise TaskError(f"{where}: {spec.path} has its spec digest but is not a T1 problem file "
                        f"({spec.note or f'it is a {spec.format} file'})")
    return data, spec


def problem(task: KTTask) -> Problem:
    """The task's T1 problem (read once per file content)."""
    return _read_problem(_files(task)[1])


@functools.lru_cache(maxsize=64)
def _read_problem(info: files.FileInfo) -> Problem:
    out = read_problem(info.path)
    _same_file(info, out.sha256)
    return out


def measured(task: KTTask) -> MeasuredSpace:
    """What the task's measurement file holds for each configuration of its problem's space
    (read once per pair of files; :class:`KernelTunerFileError` for a bad file)."""
    data, spec = _files(task)
    return _read_measured(data, spec)


@functools.lru_cache(maxsize=32)
def _read_measured(data: files.FileInfo, spec: files.FileInfo) -> MeasuredSpace:
    reader = read_cache if data.format == "cache" else read_t4
    out = reader(data.path, _read_problem(spec))
    _same_file(data, out.sha256)
    return out


def _same_file(info: files.FileInfo, sha256: str) -> None:
    """Refuse a file whose bytes changed between being found and being read."""
    if sha256 != info.sha256:
        raise TaskError(f"{info.path} changed since it was found (sha256 {info.sha256[:16]}..., now "
                        f"{sha256[:16]}...); make the task again")


def _info(path: str | Path) -> files.FileInfo:
    """What the file at ``path`` holds; the readers' one-line error when it cannot be read."""
    try:
        return files.file_info(Path(path))
    except OSError as err:
        raise KernelTunerFileError(f"{path}: file: cannot be read ({err.strerror or err})") from None


def kt_task(measurements: str | Path, problem_file: str | Path, *, kernel: str | None = None,
            device: str | None = None) -> KTTask:
    """The task of a Kernel Tuner cache (or T4 results) file and its T1 problem file.

    Both files are read and checked here (the readers' one-line errors name the file and the
    field; a measurement file that does not look like T4 results is read as a cache); only then
    is the pair made findable by digest in this process, so a failure leaves nothing behind.
    ``kernel`` and ``device`` are the URI's labels (default: the problem's ``BenchmarkName`` and
    the measurement file's name without ``.json`` / ``.json.gz``).

    Example:
        >>> task = kt_task("cachefiles/convolution_milo/A100.json.gz", "kernels/convolution_milo.json")
        >>> env = gym.make("tune_gym/Tune-v0", task=task, backend="replay")
    """
    spec_info = dataclasses.replace(_info(problem_file), format="t1")
    data_info = _info(measurements)
    if data_info.format != "t4":  # read as a cache: the reader names what is wrong with it
        data_info = dataclasses.replace(data_info, format="cache")
    _read_measured(data_info, spec_info)  # reads and checks both files (a failure is not cached)
    files.register(data_info)
    files.register(spec_info)
    return KTTask(kernel=kernel if kernel is not None else files.label(spec_info.name, "kernel"),
                  device=device if device is not None else files.label(data_info.stem, "device"),
                  digest=data_info.digest, spec=spec_info.digest)
