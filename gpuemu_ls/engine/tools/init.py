"""``gpuemu init``: a starter workspace (a tiled softmax and its reference script) that passes."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

FILES = ("gpuemu.toml", "kernels.py", "refs/softmax_ref.py")


def write_starter(target: Path, *, force: bool = False) -> list[Path]:
    """Write the starter files into ``target``; FileExistsError names any file that would be overwritten."""
    existing = [target / f for f in FILES if (target / f).exists()]
    if existing and not force:
        raise FileExistsError(f"{', '.join(str(p) for p in existing)} already exist(s); use --force to overwrite")
    base = resources.files("gpuemu_ls") / "templates" / "init"
    written = []
    for rel in FILES:
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text((base / rel).read_text(encoding="utf-8"), encoding="utf-8")
        written.append(dest)
    return written
