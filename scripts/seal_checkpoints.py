"""Seal cost-model checkpoints one trusts, or check that checkpoints are sealed and intact.

Usage:
    python scripts/seal_checkpoints.py agents/checkpoints/NAME.pt [PATH ...]   # seal (or re-seal) these
    python scripts/seal_checkpoints.py --check [PATH ...]   # verify (default: every one in agents/checkpoints)

A PATH is a checkpoint's ``NAME.pt``, its sidecar ``NAME.json``, or a checkpoint name in
``agents/checkpoints/``. Sealing writes into the sidecar the SHA-256 of ``NAME.pt`` and of the
sidecar's own content (:func:`agents.pretrained.seal_checkpoint`), after checking that the weights
read as a state dict without NaN or inf; then it loads the model with its class and puts the old
sidecar back if that fails. Seal only files you trust (that you trained, or restored from git):
the checksums then vouch for whatever the files hold. They detect corruption and edits made
without re-sealing; they are not a signature.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.pretrained import CHECKPOINT_DIR, read_sidecar, seal_checkpoint  # noqa: E402

#: The model classes that write checkpoints: the sidecar's ``"model"`` -> (module, class).
MODELS = {"TLPModel": ("agents.models.tlp", "TLPModel"),
          "OneShotModel": ("agents.models.oneshot", "OneShotModel"),
          "MetaTuneModel": ("agents.models.metatune", "MetaTuneModel")}


def resolve(arg: str) -> Path:
    """The ``.pt`` file that ``arg`` names (a ``.pt`` or ``.json`` path, or a committed checkpoint's name)."""
    path = Path(arg)
    if path.suffix in (".pt", ".json"):
        path = path.with_suffix(".pt")
    else:
        path = Path(f"{arg}.pt")
        if not path.exists() and "/" not in arg:
            path = CHECKPOINT_DIR / path.name
    if not path.exists() and not path.with_suffix(".json").exists():
        raise SystemExit(f"no checkpoint {arg!r}: neither {path} nor its sidecar exists")
    return path


def load(path: Path) -> Any:
    """The model of the checkpoint at ``path``, loaded by its own class (every check on)."""
    name = read_sidecar(path.with_suffix(".json"), verify=False).get("model")
    if name not in MODELS:
        raise ValueError(f"sidecar {path.with_suffix('.json')} names model {name!r}, "
                         f"not one of {', '.join(sorted(MODELS))}")
    module, cls = MODELS[name]
    return getattr(importlib.import_module(module), cls).load(path)


def seal(path: Path) -> str:
    """Seal the checkpoint at ``path``; returns a line saying so. The sidecar is left as it was
    when the sealed checkpoint does not load."""
    sidecar = path.with_suffix(".json")
    before = sidecar.read_bytes() if sidecar.exists() else None
    try:
        doc = seal_checkpoint(path)
        load(path)
    except ValueError as err:
        if before is not None:
            sidecar.write_bytes(before)
        raise SystemExit(f"not sealed: {err}") from None
    return f"sealed {path} (weights {doc['checksums']['weights'][:16]}, sidecar {doc['checksums']['sidecar'][:16]})"


def check(paths: list[Path]) -> int:
    """Load each checkpoint; print one line per checkpoint and return how many failed."""
    failed = 0
    for path in paths:
        try:
            load(path)
        except ValueError as err:
            failed += 1
            print(f"FAILED {err}")
        else:
            print(f"ok {path}")
    return failed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", metavar="PATH", help="checkpoints (NAME.pt, NAME.json or a committed name)")
    p.add_argument("--check", action="store_true",
                   help="only verify (default paths: every checkpoint in agents/checkpoints); exit 1 if any fails")
    args = p.parse_args(argv)
    if args.check:
        paths = [resolve(a) for a in args.paths] or sorted(CHECKPOINT_DIR.glob("*.pt"))
        return 1 if check(paths) else 0
    if not args.paths:
        p.error("name the checkpoints to seal (seal only files you trust), or pass --check")
    for path in [resolve(a) for a in args.paths]:
        print(seal(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
