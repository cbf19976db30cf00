"""Run the real tools: nvcc (.cu -> PTX + cubin), ptxas (.ptx -> cubin), cuobjdump/nvdisasm (SASS).

One nvcc call does everything for a .cu file: `-cubin -keep` leaves the PTX that was
fed to ptxas, `-Xptxas -v` reports per-kernel resources, and `-MD -MF` lists every
file the source includes (the cache re-hashes those instead of calling nvcc again).
nvcc runs in the source's folder so relative paths in its messages resolve there.
Never `shell=True`: every argument is passed as a list item. nvcc's driver, though, runs its
phases through /bin/sh, so a path it is given must hold no shell characters: sources and include
folders whose paths do are compiled through symlinks in a shell-safe folder (see ShellSafeView),
and flags or defines that do are refused.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .messages import CompilerMessage, parse_compiler_output
from .resources import PtxasReport, parse_ptxas_verbose, parse_res_usage
from .sass import SassFunction, parse_sass
from .toolchain import Toolchain

DEFAULT_TIMEOUT_S = 300.0
_SHELL_SAFE = re.compile(r"[A-Za-z0-9_./+,=:@%-]+")
SHELL_SAFE_TEXT = "letters, digits and . / + , = : @ % _ -"


def shell_safe(text: str) -> bool:
    """True when /bin/sh reads ``text`` as one plain word (nvcc's driver splices arguments into sh lines)."""
    return bool(_SHELL_SAFE.fullmatch(text))


class ShellSafeView:
    """Shell-safe stand-ins for a source and include folders under ``folder`` (a temp dir).

    The source is copied to ``folder/kernel.cu`` (nvcc resolves a symlinked input to its real name and
    hands that to the shell) and its folder is symlinked as ``folder/src``, first on the include path, so
    its quoted includes still resolve. ``real`` maps the stand-ins back for messages and deps.
    """

    def __init__(self, folder: Path, source: Path, include_dirs: Sequence[Path]) -> None:
        self.real: dict[str, str] = {}
        self.source = source
        self.include_dirs = [Path(d).resolve() for d in include_dirs]
        if not shell_safe(str(source)):
            folder.mkdir(parents=True, exist_ok=True)
            self.source = folder / "kernel.cu"
            shutil.copyfile(source, self.source)
            self.real[str(self.source)] = str(source)
            self.include_dirs.insert(0, self._link(folder / "src", source.parent))
        for i, d in enumerate(self.include_dirs):
            if not shell_safe(str(d)):
                folder.mkdir(parents=True, exist_ok=True)
                self.include_dirs[i] = self._link(folder / f"include{i}", d)

    def _link(self, link: Path, target: Path) -> Path:
        link.symlink_to(target, target_is_directory=target.is_dir())
        self.real[str(link)] = str(target)
        return link

    def path(self, text: str | None) -> str | None:
        """A path the tools printed, with stand-ins swapped back for the user's real path."""
        if text is None:
            return None
        for link, target in sorted(self.real.items(), key=lambda kv: -len(kv[0])):
            if text == link or text.startswith(link + "/"):
                return target + text[len(link) :]
        return text

    def text(self, log: str) -> str:
        for link, target in sorted(self.real.items(), key=lambda kv: -len(kv[0])):
            log = log.replace(link, target)
        return log


@dataclass
class CompileOutput:
    """What one nvcc/ptxas run produced (artifacts live in the caller's work dir)."""

    ok: bool
    returncode: int
    command: list[str]
    log: str  # stdout + stderr
    messages: list[CompilerMessage] = field(default_factory=list)
    ptxas: PtxasReport = field(default_factory=PtxasReport)
    ptx_text: str | None = None
    cubin: Path | None = None
    deps: list[Path] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Disassembly:
    """SASS per function plus cuobjdump's resource table (empty with nvdisasm)."""

    functions: dict[str, SassFunction]
    res_usage: dict[str, dict[str, int]]
    tool: str
    error: str | None = None


def _run(cmd: Sequence[str], cwd: Path | None, timeout: float) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    tool = Path(cmd[0]).name  # the prefix parse_compiler_output expects ('nvcc', 'ptxas')
    try:
        proc = subprocess.run(
            list(cmd),
            cwd=cwd,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
        return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - t0
    except subprocess.TimeoutExpired as exc:
        parts = (exc.stdout, exc.stderr)  # bytes even with text=True
        text = "".join(p.decode(errors="replace") if isinstance(p, bytes) else (p or "") for p in parts)
        return -1, f"{text}\n{tool} fatal   : timed out after {timeout:.0f} s", time.perf_counter() - t0
    except OSError as exc:
        return -1, f"{tool} fatal   : could not run {cmd[0]}: {exc}", time.perf_counter() - t0


def parse_depfile(text: str, cwd: Path) -> list[Path]:
    """Make-style dependency file -> the prerequisite paths (absolute, without duplicates)."""
    body = text.replace("\\\n", " ")
    deps: list[Path] = []
    for rule in body.splitlines():
        if ":" not in rule:
            continue
        _target, _, prereqs = rule.partition(": ")
        if not prereqs:
            _target, _, prereqs = rule.partition(":")
        tokens: list[str] = []
        buf = ""
        for part in prereqs.split(" "):  # "\ " escapes a space inside a path
            if buf:
                buf += " " + part
            else:
                buf = part
            if buf.endswith("\\"):
                buf = buf[:-1]
                continue
            if buf:
                tokens.append(buf)
            buf = ""
        for tok in tokens:
            p = Path(tok)
            p = p if p.is_absolute() else cwd / p
            p = Path(os.path.normpath(p))
            if p not in deps:
                deps.append(p)
    return deps


def nvcc_command(
    tools: Toolchain,
    source: Path,
    workdir: Path,
    *,
    arch: str,
    flags: Sequence[str] = (),
    include_dirs: Sequence[Path] = (),
    defines: Sequence[str] = (),
) -> list[str]:
    """The nvcc argument list for one source (absolute paths throughout)."""
    assert tools.nvcc is not None
    cmd = [
        str(tools.nvcc),
        f"-arch={arch}",
        "-cubin",
        "-o",
        str(workdir / "out.cubin"),
        "-keep",
        "-keep-dir",
        str(workdir / "keep"),
        "-MD",
        "-MF",
        str(workdir / "deps.d"),
        "-Xptxas",
        "-v",
    ]
    cmd += [f"-I{d}" for d in include_dirs]
    cmd += [f"-D{d}" for d in defines]
    cmd += list(flags)
    cmd.append(str(source))
    return cmd


def compile_cuda(
    tools: Toolchain,
    source: Path,
    workdir: Path,
    *,
    arch: str = "sm_90",
    flags: Sequence[str] = (),
    include_dirs: Sequence[Path] = (),
    defines: Sequence[str] = (),
    timeout: float = DEFAULT_TIMEOUT_S,
) -> CompileOutput:
    """nvcc -cubin -keep -MD -Xptxas -v: PTX, cubin, resources, deps and messages in one run."""
    source = source.resolve()
    unsafe = [a for a in (*flags, *(f"-D{d}" for d in defines)) if not shell_safe(a)]
    if unsafe:
        msg = (
            f"refusing to pass {unsafe[0]!r} to nvcc: its driver runs through /bin/sh, where shell characters "
            f"would run as commands; use only {SHELL_SAFE_TEXT}"
        )
        return CompileOutput(False, -1, [], msg, [CompilerMessage("error", "nvcc", msg, str(source))], deps=[source])
    (workdir / "keep").mkdir(parents=True, exist_ok=True)
    view = ShellSafeView(workdir / "view", source, include_dirs)
    cmd = nvcc_command(
        tools, view.source, workdir, arch=arch, flags=flags, include_dirs=view.include_dirs, defines=defines
    )
    rc, log, secs = _run(cmd, source.parent, timeout)
    out = CompileOutput(ok=rc == 0, returncode=rc, command=cmd, log=view.text(log), seconds=secs)
    out.messages = [dataclasses.replace(m, file=view.path(m.file)) for m in parse_compiler_output(log, source.parent)]
    out.ptxas = parse_ptxas_verbose(log)
    ptx_files = sorted((workdir / "keep").glob("*.ptx"))
    if ptx_files:
        out.ptx_text = "\n".join(p.read_text(errors="replace") for p in ptx_files)
    cubin = workdir / "out.cubin"
    out.cubin = cubin if cubin.is_file() else None
    depfile = workdir / "deps.d"
    if depfile.is_file():
        out.deps = [
            Path(view.path(str(p)) or p) for p in parse_depfile(depfile.read_text(errors="replace"), source.parent)
        ]
    if source not in out.deps:
        out.deps.insert(0, source)
    if rc == 0 and out.cubin is None:
        out.ok = False
        out.messages.append(CompilerMessage("error", "nvcc", "nvcc produced no cubin", str(source)))
    if rc != 0 and not any(m.severity == "error" for m in out.messages):
        tail = " | ".join(log.strip().splitlines()[-3:]) or f"exit status {rc}"
        out.messages.append(CompilerMessage("error", "nvcc", f"nvcc failed: {tail}", str(source)))
    return out


def assemble_ptx(
    tools: Toolchain,
    ptx_file: Path,
    workdir: Path,
    *,
    arch: str = "sm_90",
    flags: Sequence[str] = (),
    timeout: float = DEFAULT_TIMEOUT_S,
) -> CompileOutput:
    """ptxas -v on a .ptx given directly (flags go to ptxas unchanged)."""
    assert tools.ptxas is not None
    ptx_file = ptx_file.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    cubin = workdir / "out.cubin"
    cmd = [str(tools.ptxas), "-v", f"-arch={arch}", *flags, str(ptx_file), "-o", str(cubin)]
    rc, log, secs = _run(cmd, ptx_file.parent, timeout)
    out = CompileOutput(ok=rc == 0 and cubin.is_file(), returncode=rc, command=cmd, log=log, seconds=secs)
    out.messages = parse_compiler_output(log, ptx_file.parent)
    out.ptxas = parse_ptxas_verbose(log)
    out.cubin = cubin if cubin.is_file() else None
    out.deps = [ptx_file]
    if not out.ok and not any(m.severity == "error" for m in out.messages):
        tail = " | ".join(log.strip().splitlines()[-3:]) or f"exit status {rc}"
        out.messages.append(CompilerMessage("error", "ptxas", f"ptxas failed: {tail}", str(ptx_file)))
    return out


def disassemble(tools: Toolchain, cubin: Path, timeout: float = DEFAULT_TIMEOUT_S) -> Disassembly | None:
    """SASS (and resource usage) of a cubin: cuobjdump when present, else nvdisasm; None if neither."""
    if tools.cuobjdump is not None:
        rc, log, _ = _run([str(tools.cuobjdump), "-res-usage", "-sass", str(cubin)], None, timeout)
        if rc == 0:
            return Disassembly(parse_sass(log), parse_res_usage(log), "cuobjdump")
        if tools.nvdisasm is None:
            return Disassembly({}, {}, "cuobjdump", error=log.strip()[-500:])
    if tools.nvdisasm is not None:
        rc, log, _ = _run([str(tools.nvdisasm), "-c", str(cubin)], None, timeout)
        if rc == 0:
            return Disassembly(parse_sass(log), {}, "nvdisasm")
        return Disassembly({}, {}, "nvdisasm", error=log.strip()[-500:])
    return None
