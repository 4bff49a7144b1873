"""How far the seed-dependent tests are from their bounds, over seeds and float paths.

A test whose assertion rests on a training or search outcome (a fitted model's error, an agent
beating random search) takes the ``train_seed`` fixture (``tests/conftest.py``) and records the
figures it asserts on with ``record_property``. On another CPU the same seed takes another float
path (AVX2 against AVX-512 kernels in torch, MKL, OpenBLAS and NumPy), which to the test is another
seed; so a bound is safe on every host only if it holds over many seeds here. This script runs
those tests over ``--seeds`` and over float paths, and prints, per test and path, how many seeds
passed and the range of every recorded figure::

    python scripts/test_margins.py                     # seeds 0-19 on every float path
    python scripts/test_margins.py --seeds 0-39 -k overfits
    python scripts/test_margins.py --paths native --json runs/margins.json

Paths: ``native`` (as the host is), ``avx2`` (torch, MKL, OpenBLAS and NumPy held to AVX2:
roughly a Zen 3 host's path on an AVX-512 one) and ``scalar`` (torch's ATen kernels without
SIMD, the others held to SSE4.2). XGBoost and TVM keep their own paths. On one Zen 4 host torch's
AVX2 and AVX-512 kernels gave bit-identical MetaTune training while the scalar ones did not, and
an Intel AVX-512 host differed from both: use every path.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PATHS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "OPENBLAS_CORETYPE": "Haswell",
        "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
    },
    "scalar": {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        "OPENBLAS_CORETYPE": "Nehalem",
        "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR",
    },
}


def run_path(path: str, seeds: str, pytest_args: list[str], workdir: Path) -> Path:
    """Run the seeded tests on one float path; returns the JUnit XML it wrote."""
    xml = workdir / f"{path}.xml"
    env = {**os.environ, **PATHS[path]}
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "seeded", f"--seeds={seeds}", "-p", "no:cacheprovider",
           f"--junitxml={xml}", "-o", "junit_family=xunit1", *pytest_args]
    print(f"[{path}] {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
    subprocess.run(cmd, cwd=ROOT, env=env, check=False)
    if not xml.exists():
        raise SystemExit(f"pytest wrote no report for path {path!r} (see its output above)")
    return xml


def summarize(xml: Path) -> dict[str, dict]:
    """Per test (seed id stripped): runs, passes, failing seeds and every recorded figure's values."""
    out: dict[str, dict] = defaultdict(lambda: {"runs": 0, "passed": 0, "failed_seeds": [],
                                                "figures": defaultdict(list)})
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("name", "")
        base, _, param = name.partition("[")
        test = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{base}"
        seed = next((p for p in param.rstrip("]").split("-") if p.startswith("seed")), "")
        extra = param.rstrip("]").replace(seed, "").strip("-")
        key = f"{test}[{extra}]" if extra else test
        row = out[key]
        if case.find("skipped") is not None:
            continue
        row["runs"] += 1
        if case.find("failure") is None and case.find("error") is None:
            row["passed"] += 1
        else:
            row["failed_seeds"].append(seed)
        for prop in case.iter("property"):
            try:
                row["figures"][prop.get("name")].append(float(prop.get("value")))
            except (TypeError, ValueError):
                pass
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0-19", help="seeds: N, A-B or a comma list (default 0-19)")
    ap.add_argument("--paths", default=",".join(PATHS), help=f"float paths, comma-separated, of {sorted(PATHS)}")
    ap.add_argument("--json", type=Path, help="also write the summary here")
    ap.add_argument("-k", dest="keyword", help="pytest -k expression (which seeded tests)")
    args = ap.parse_args(argv)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        ap.error(f"unknown float path(s) {unknown}; known: {sorted(PATHS)}")
    pytest_args = ["-k", args.keyword] if args.keyword else []
    report: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            report[path] = summarize(run_path(path, args.seeds, pytest_args, Path(tmp)))
    ok = True
    for path, tests in report.items():
        print(f"\n## float path: {path} (seeds {args.seeds})")
        for test, row in sorted(tests.items()):
            ok &= row["passed"] == row["runs"]
            failed = f"  FAILED at {','.join(row['failed_seeds'])}" if row["failed_seeds"] else ""
            print(f"{test}: {row['passed']}/{row['runs']} passed{failed}")
            for name, values in sorted(row["figures"].items()):
                print(f"    {name}: min {min(values):.4g}  median {statistics.median(values):.4g}  "
                      f"max {max(values):.4g}  (n={len(values)})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
