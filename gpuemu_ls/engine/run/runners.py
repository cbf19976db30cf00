"""Things that turn inputs into outputs: an in-process ``module:function``, or a protocol script.

Scripts run unchanged but warm: in a worker, :class:`ScriptRunner` runs the script's compiled file
once per call in a fork of the worker, on real file descriptors 0/1/2 and from a fresh interpreter
state (:mod:`scriptfork`); elsewhere in the current process with ``sys.stdin``/``sys.stdout`` swapped
for in-memory buffers. numpy and the script's libraries are imported once, so a call costs the
script's own work, not a Python start. A script that raises, calls ``sys.exit`` with a
non-zero status, or prints junk raises :class:`CallError` with a kind and the tail of its stderr;
one that kills the process (``os._exit``, a segfault) takes the worker down and the supervisor
reports it.
"""

from __future__ import annotations

import functools
import io
import sys
import sysconfig
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import dtypes as dt
from . import scriptfork, shadow, wire
from .frameworks import Adapter

STDERR_TAIL = 2000


@dataclass
class CallError(Exception):
    """A call that produced no usable output: ``kind`` is raised|exit|bad_output|import."""

    kind: str
    message: str
    file: str | None = None
    line: int | None = None
    stderr: str = ""

    def __str__(self) -> str:
        return self.message


_LIBRARY_PARTS = ("site-packages", "dist-packages", ".venv", "venv", ".tox", "__pypackages__")


def is_library(filename: str) -> bool:
    """A file of an installed package or of the standard library (even inside a workspace's .venv)."""
    if any(p in _LIBRARY_PARTS for p in Path(filename).parts):
        return True
    try:
        resolved = Path(filename).resolve()
    except (OSError, ValueError):
        return False
    return any(resolved.is_relative_to(d) for d in _LIBRARY_DIRS)


_LIBRARY_DIRS = tuple(
    Path(p).resolve()
    for p in {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    if p
)


def user_frame(tb: Any, root: Path) -> tuple[str | None, int | None]:
    """The innermost traceback frame in the user's own code inside the workspace (where the bug is)."""
    found: tuple[str | None, int | None] = (None, None)
    for frame in traceback.extract_tb(tb):
        try:
            if Path(frame.filename).resolve().is_relative_to(root) and not is_library(frame.filename):
                found = (frame.filename, frame.lineno)
        except (OSError, ValueError):
            continue
    return found


def _exception_text(exc: BaseException, limit: int = 12) -> str:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-limit)
    return "".join(lines).strip()


def load_callable(root: Path, ref: str) -> Callable[..., Any]:
    """Import ``module:function`` (or ``module:Class.apply``, an autograd Function as a library defines it)
    with the workspace root first on sys.path."""
    mod_name, func_name = ref.split(":", 1)
    root_s = str(root)
    if root_s not in sys.path:
        sys.path.insert(0, root_s)
    try:
        module = shadow.import_module(root, mod_name)  # a workspace `signal.py` loads, under a private name
    except BaseException as exc:  # a module may raise anything, SystemExit included, at import
        file, line = user_frame(exc.__traceback__, root)
        if isinstance(exc, SyntaxError) and exc.filename:
            file, line = exc.filename, exc.lineno
        why = shadow.hint(f"{exc}\n{_exception_text(exc)}", [root])
        raise CallError(
            "import",
            f"importing {mod_name!r} failed: {type(exc).__name__}: {exc}"
            + (f"; {why}" if why else "")
            + f"\n{_exception_text(exc)}",
            file,
            line,
        ) from None
    fn: Any = module
    for depth, part in enumerate(func_name.split(".")):
        try:
            fn = getattr(fn, part)
        except AttributeError:
            owner = repr(mod_name) if depth == 0 else repr(".".join(func_name.split(".")[:depth]))
            raise CallError(
                "import",
                f"{'module ' if depth == 0 else ''}{owner} has no attribute {part!r}",
                getattr(module, "__file__", None),
            ) from None
    if not callable(fn):
        raise CallError("import", f"{ref} is a {type(fn).__name__}, not a function", getattr(module, "__file__", None))
    return fn


def as_outputs(value: Any, adapter: Adapter, who: str, *, none_ok: bool = False) -> dict[str, np.ndarray]:
    """Name a callable's return value: an array is ``result``; a dict keeps its names; a tuple is ``result0..``;
    None is no outputs when ``none_ok`` (an in-place op whose results are its written inputs)."""
    if value is None and none_ok:
        return {}
    items = named_values(value)
    if not items:
        raise CallError("bad_output", f"{who} returned an empty {type(value).__name__}")
    out: dict[str, np.ndarray] = {}
    for name, v in items:
        if v is None:
            raise CallError(
                "bad_output",
                f"{who} returned None"
                + (f" for output {name!r}" if name != "result" else "")
                + " (did it write into a buffer and forget to return it?)",
            )
        try:
            arr = adapter.to_numpy(v)
        except Exception as exc:
            raise CallError("bad_output", f"{who} returned {type(v).__name__}, not a tensor: {exc}") from None
        if arr.dtype == object or arr.dtype.kind in "USO" or (arr.dtype.kind == "V" and arr.dtype.names):
            raise CallError("bad_output", f"{who} returned an array of {arr.dtype} for {name!r}, not numbers")
        out[str(name)] = arr
    return out


def named_values(value: Any) -> list[tuple[str, Any]]:
    """A callable's return value as (name, value) pairs: a dict keeps its names; a tuple, or a list of arrays,
    is ``result0..``; anything else (an array, a nested list of numbers) is ``result``."""
    if isinstance(value, dict):
        return [(str(k), v) for k, v in value.items()]
    if isinstance(value, tuple) or (isinstance(value, list) and value and all(map(_is_tensor, value))):
        return [(f"result{i}", v) for i, v in enumerate(value)]
    return [("result", value)]


def _is_tensor(value: Any) -> bool:
    """An array-like of its own (numpy, torch, jax, ...), not a Python number or nested list."""
    return hasattr(value, "shape") or hasattr(value, "__array__") or hasattr(value, "__dlpack__")


class Runner:
    """Calls an op or a reference: named numpy inputs in, named numpy outputs out."""

    where: str = ""
    #: inputs the op writes its result into (``inplace``): their tensors are read back as outputs
    inplace: tuple[str, ...] = ()

    def call(self, inputs: dict[str, np.ndarray], kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
        raise NotImplementedError


class CallableRunner(Runner):
    """``function(*inputs, **kwargs)`` in this process, inputs converted to the op's framework; ``call``
    (``positional``, ``kwargs`` or ``dict``) says how a library's existing function takes its inputs."""

    def __init__(
        self,
        root: Path,
        ref: str,
        order: tuple[str, ...],
        adapter: Adapter,
        who: str,
        call: str = "positional",
        inplace: tuple[str, ...] = (),
        requires_grad: tuple[str, ...] = (),
    ) -> None:
        self.root = root
        self.style = call
        self.inplace = inplace
        self.requires_grad = requires_grad
        self.ref = ref
        self.order = order
        self.adapter = adapter
        self.who = who
        self.fn = load_callable(root, ref)
        code = getattr(self.fn, "__code__", None)
        self.where = f"{code.co_filename}:{code.co_firstlineno}" if code else ref

    def call(self, inputs: dict[str, np.ndarray], kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
        args, backs = [], []
        for name in self.order:  # on a device, the tensor is a copy: write it back so input writes are seen
            tensor, back = self.adapter.place(inputs[name])
            if name in self.requires_grad:  # the same memory, as a leaf that requires grad
                tensor = tensor.detach().requires_grad_(True)
            args.append(tensor)
            if back is not None:
                backs.append(back)
            elif name in self.inplace:  # a copy that cannot be written back: read the tensor itself
                backs.append(functools.partial(_read_back, self.adapter, tensor, inputs[name]))
        try:
            value = self.adapter.synchronize(self.invoke(args, kwargs))
        except BaseException as exc:  # SystemExit and KeyboardInterrupt from user code are results too
            raise self.call_error(exc) from None
        finally:
            for back in backs:
                back()
        return as_outputs(value, self.adapter, self.who, none_ok=bool(self.inplace))

    def invoke(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """The user's function on ``args`` (in ``order``), the way its ``call`` style takes them."""
        if self.style == "kwargs":
            return self.fn(**dict(zip(self.order, args)), **kwargs)
        if self.style == "dict":
            return self.fn(dict(zip(self.order, args)), **kwargs)
        return self.fn(*args, **kwargs)

    def call_error(self, exc: BaseException, who: str | None = None) -> CallError:
        """What the user's function raised, as a CallError at the innermost frame of the user's code (a
        KeyboardInterrupt that did not come from it is re-raised: it is the user stopping gpuemu)."""
        if isinstance(exc, KeyboardInterrupt) and not _from_user(exc, self.root):
            raise exc
        file, line = user_frame(exc.__traceback__, self.root)
        kind = "exit" if isinstance(exc, SystemExit) else "raised"
        why = shadow.hint(str(exc), [self.root]) if isinstance(exc, (AttributeError, ImportError)) else ""
        return CallError(
            kind,
            f"{who or self.who} raised {type(exc).__name__}: {exc}"
            + (f"; {why}" if why else "")
            + f"\n{_exception_text(exc)}",
            file,
            line,
        )


def _read_back(adapter: Adapter, tensor: Any, arr: np.ndarray) -> None:
    """Copy an in-place input's tensor into the engine's array (after the op), when they are not one memory."""
    if tensor is arr:
        return
    try:
        got = adapter.to_numpy(tensor)
    except Exception:  # a tensor the op replaced or freed: the array keeps what it had
        return
    if got.shape == arr.shape and not np.shares_memory(got, arr):
        arr[...] = got


def _from_user(exc: BaseException, root: Path) -> bool:
    return user_frame(exc.__traceback__, root)[0] is not None


class _TextIn(io.TextIOBase):
    """A script's sys.stdin: the request as text, with a ``.buffer`` for scripts that read bytes.

    Not a StringIO: that copies a megabyte request into its own buffer, and ``read()`` copies it out again;
    here ``json.load(sys.stdin)`` gets the very string that was encoded.
    """

    def __init__(self, text: str) -> None:
        super().__init__()
        self._text = text
        self._pos = 0
        self._bytes: io.BytesIO | None = None

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> str:
        start = self._pos
        end = len(self._text) if size is None or size < 0 else min(len(self._text), start + size)
        self._pos = end
        return self._text if (start, end) == (0, len(self._text)) else self._text[start:end]

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
        start = self._pos
        nl = self._text.find("\n", start)
        end = len(self._text) if nl < 0 else nl + 1
        if size is not None and size >= 0:
            end = min(end, start + size)
        self._pos = end
        return self._text[start:end]

    @property
    def buffer(self) -> io.BytesIO:
        if self._bytes is None:
            self._bytes = io.BytesIO(self.read().encode("utf-8"))
        return self._bytes


class _BytesOut:
    """``sys.stdout.buffer`` of a script: bytes written land, decoded, in the text sink."""

    def __init__(self, sink: io.StringIO) -> None:
        self.sink = sink

    def write(self, data: bytes) -> int:
        self.sink.write(bytes(data).decode("utf-8", errors="replace"))
        return len(data)

    def flush(self) -> None:
        pass


class _TextOut(io.StringIO):
    """A script's sys.stdout: text kept as text (no encode/decode round trip), with a ``.buffer``."""

    @property
    def buffer(self) -> _BytesOut:
        return _BytesOut(self)


class ScriptRunner(Runner):
    """A protocol script executed warm, once per call, unchanged.

    ``isolated`` (in workers): each call runs in a fork of this process on real file descriptors, from a
    fresh interpreter state (:mod:`scriptfork`); otherwise (the Python API, in the user's own process)
    in this process with ``sys.stdin``/``sys.stdout`` swapped for in-memory streams.
    """

    def __init__(self, root: Path, rel: str, who: str, *, strides: bool = False, isolated: bool = False) -> None:
        self.root = root
        self.path = (root / rel).resolve()
        self.who = who
        self.strides = strides
        self.where = f"{self.path}:1"
        if not self.path.is_file():
            raise CallError("import", f"{who} script {rel!r} not found ({self.path})", str(self.path), 1)
        try:  # compile once: a syntax error is an import error with its line
            self.code = compile(self.path.read_text(encoding="utf-8"), str(self.path), "exec")
        except SyntaxError as exc:
            raise CallError(
                "import", f"{who} script {rel!r} has a syntax error: {exc.msg}", str(self.path), exc.lineno
            ) from None
        self.fork: scriptfork.ScriptFork | None = None
        if isolated and scriptfork.available():
            self.fork = scriptfork.ScriptFork()
            scriptfork.preload(self.code, [self.path.parent, root])

    def _explain(self, error: BaseException) -> dict[str, Any]:
        """What a script raised, as the ``raised`` CallError's message, file and line."""
        file, line = user_frame(error.__traceback__, self.root)
        text = _exception_text(error)
        why = shadow.hint(f"{error}\n{text}", [self.path.parent, self.root])
        message = f"{self.who} script raised {type(error).__name__}: {error}" + (f"; {why}" if why else "")
        return {"message": f"{message}\n{text}", "file": file or str(self.path), "line": line}

    def _forked(self, request: list[bytes]) -> dict[str, np.ndarray]:
        assert self.fork is not None
        ended = self.fork.run(self.code, self.path, request, self._explain, STDERR_TAIL)
        if ended.error is not None:
            if "internal" in ended.error:
                raise RuntimeError(ended.error["internal"])
            raise CallError("raised", ended.error["message"], ended.error["file"], ended.error["line"], ended.stderr)
        return self._answer(ended.status, ended.stdout, ended.stderr)

    def _answer(self, status: Any, stdout: str, err_tail: str) -> dict[str, np.ndarray]:
        if status not in (0, None):
            raise CallError("exit", f"{self.who} script exited with status {status}", str(self.path), None, err_tail)
        try:
            return wire.decode_response(stdout)
        except wire.ProtocolError as exc:
            raise CallError("bad_output", f"{self.who} script: {exc}", str(self.path), None, err_tail) from None

    def call(self, inputs: dict[str, np.ndarray], kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
        if self.fork is not None:
            return self._forked(wire.request_parts(inputs, kwargs, strides=self.strides))
        stdin = _TextIn(wire.encode_request(inputs, kwargs, strides=self.strides))
        stdout = _TextOut()
        stderr = io.StringIO()
        saved = sys.stdin, sys.stdout, sys.stderr, sys.argv
        saved_path = list(sys.path)
        sys.stdin, sys.stdout, sys.stderr, sys.argv = stdin, stdout, stderr, [str(self.path)]
        sys.path.insert(0, str(self.path.parent))  # as `python script.py` does: siblings import
        status: int | str | None = 0
        error: BaseException | None = None
        try:
            run_globals = {"__name__": "__main__", "__file__": str(self.path), "__builtins__": __builtins__}
            exec(self.code, run_globals)
        except SystemExit as exc:
            status = exc.code
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt) and not _from_user(exc, self.root):
                raise
            error = exc
        finally:
            try:
                stdout.flush()
            except ValueError:
                pass
            sys.stdin, sys.stdout, sys.stderr, sys.argv = saved
            sys.path[:] = saved_path
        err_tail = stderr.getvalue()[-STDERR_TAIL:]
        if error is not None:
            info = self._explain(error)
            raise CallError("raised", info["message"], info["file"], info["line"], err_tail)
        return self._answer(status, stdout.getvalue(), err_tail)


def promote(arr: np.ndarray) -> np.ndarray:
    """What the reference receives: floats as contiguous float64, other dtypes as contiguous copies."""
    if arr.dtype.kind == "f" or arr.dtype.name == "bfloat16":
        return dt.widened(arr, copy=True, order="C")  # not ascontiguousarray: that makes 0-d arrays 1-d
    return np.array(arr, order="C")


__all__ = [
    "CallError",
    "CallableRunner",
    "Runner",
    "ScriptRunner",
    "load_callable",
    "promote",
    "user_frame",
]
