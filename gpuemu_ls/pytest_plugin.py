"""pytest plugin: the ops of ``gpuemu.toml`` as test items, and fixtures for hand-written client-side tests.

``pytest --gpuemu`` collects every ``gpuemu.toml`` it meets as a file of test items, one per op and
dtype (``gpuemu.toml::softmax[float16]``). The cases of an item are exactly those ``gpuemu test``
(or ``gpuemu test --quick`` with ``--gpuemu-quick``) runs for that op, split by dtype, so the items
of an op together are the CLI's run. They run in the pytest process (the process that has the GPU);
``--gpuemu-isolate`` runs ``module``/``op_script`` ops in gpuemu's worker processes instead. A failure
prints the op's diagnosis and one line per failing case with its replay command. Every pytest
process records one run into the workspace's store, so a failure found on a GPU box shows in
``gpuemu failures`` and in the editor once that store is there.

With pytest-xdist (``pytest -n auto``) the items spread over processes. All workers of a session
record into one shared run (its id derived from xdist's test-run id and the workspace), each op's
verdict is recomputed from every case of that run in the store, and the controller writes the final
verdicts when the session ends: one run, complete verdicts, however the items were distributed.

For client-side ops (no ``module``: the kernel is only reachable from Python code), mark a test:

    @pytest.mark.gpuemu_op("softmax", iterations=32)
    def test_softmax(gpuemu_check):
        gpuemu_check(lambda inputs: my_softmax(inputs["x"]))   # raises ValidationError on failure

and the op's ``gpuemu.toml`` item defers to it. ``gpuemu_client`` is the session's :class:`Client`.

Loaded through the ``pytest11`` entry point (or ``-p gpuemu_ls.pytest_plugin``); importing it costs
nothing until a gpuemu feature is used.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .api import Client, FuzzResult

CONFIG_NAME = "gpuemu.toml"
MARKER = "gpuemu_op"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpuemu", "gpuemu-ls kernel validation")
    group.addoption(
        "--gpuemu", action="store_true", default=False, help="collect the ops of gpuemu.toml files as test items"
    )
    group.addoption("--gpuemu-quick", action="store_true", default=False, help="quick cases (as gpuemu test --quick)")
    group.addoption("--gpuemu-iterations", type=int, default=None, metavar="N", help="cases per op")
    group.addoption("--gpuemu-seed", type=int, default=None, metavar="N", help="first case seed")
    group.addoption(
        "--gpuemu-workspace",
        default=None,
        metavar="PATH",
        help="workspace of the gpuemu_client/gpuemu_check fixtures (default: nearest gpuemu.toml above rootdir)",
    )
    group.addoption(
        "--gpuemu-no-store", action="store_true", default=False, help="record nothing in the workspace store"
    )
    group.addoption(
        "--gpuemu-isolate",
        action="store_true",
        default=False,
        help="run module/op_script ops in gpuemu worker processes (crash and timeout isolation)",
    )


class _State:
    """Per-process plugin state: one Client (one store run) per workspace, plans, covered client ops."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.clients: dict[Path, Client] = {}
        self.covered: dict[tuple[Path | None, str], list[str]] = {}
        self.plans: dict[tuple[Path, str], list[Any]] = {}
        self.shared_runs: dict[str, str] = {}  # controller: workspace root -> shared run id

    @property
    def mode(self) -> str:
        return "quick" if self.config.getoption("gpuemu_quick") else "thorough"

    def client(self, root: Path) -> Client:
        from .api import Client

        root = root.resolve()
        client = self.clients.get(root)
        if client is None:
            run_id = None
            workerinput = getattr(self.config, "workerinput", None)
            store = not self.config.getoption("gpuemu_no_store")
            if workerinput is not None and store:  # an xdist worker: one run shared by every worker
                run_id = hashlib.sha256(f"{workerinput['testrunuid']}:{root}".encode()).hexdigest()[:32]
                self.config.workeroutput.setdefault("gpuemu_runs", {})[str(root)] = run_id  # type: ignore[attr-defined]
            client = Client(
                root,
                store=store,
                source="pytest",
                one_run=True,
                mode=self.mode,
                command=_command(self.config),
                run_id=run_id,
            )
            self.clients[root] = client
        return client

    def plan(self, root: Path, op_name: str) -> list[Any]:
        from .engine.run.validate import plan_op

        key = (root.resolve(), op_name)
        if key not in self.plans:
            client = self.client(root)
            self.plans[key] = plan_op(
                client.config,
                client.op(op_name),
                self.mode,
                self.config.getoption("gpuemu_iterations"),
                self.config.getoption("gpuemu_seed"),
            )
        return self.plans[key]

    def default_root(self) -> Path:
        from .engine.config.load import find_workspace

        opt = self.config.getoption("gpuemu_workspace")
        if opt:
            p = Path(opt)
            return p.parent if p.name == CONFIG_NAME else p
        for start in (self.config.rootpath, Path.cwd()):
            found = find_workspace(start)
            if found is not None:
                return found
        raise pytest.UsageError(
            f"gpuemu: no {CONFIG_NAME} at or above {self.config.rootpath}; pass --gpuemu-workspace PATH"
        )

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
        self.clients.clear()


_STATE = pytest.StashKey[_State]()


def _state(config: pytest.Config) -> _State:
    state = config.stash.get(_STATE, None)
    if state is None:
        state = _State(config)
        config.stash[_STATE] = state
    return state


def _command(config: pytest.Config) -> str:
    return f"pytest {' '.join(config.invocation_params.args)}".strip()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(name, *, iterations=None, seed=None, dtypes=None, layouts=None, value_distribution=None, "
        "fail_fast=False, workspace=None): a hand-written test that validates the gpuemu op `name` "
        "through the gpuemu_check fixture",
    )
    _state(config)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist controller: note the shared runs a finished worker recorded into."""
    runs = (getattr(node, "workeroutput", None) or {}).get("gpuemu_runs") or {}
    _state(node.config).shared_runs.update(runs)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """xdist controller: write the final verdicts of the shared runs, over every worker's cases."""
    state = _state(session.config)
    if not state.shared_runs or hasattr(session.config, "workerinput"):
        return
    from .api.storeview import finish_shared_run
    from .engine.config.load import load_config
    from .engine.store.db import Store

    for root, run_id in sorted(state.shared_runs.items()):
        store = Store.for_workspace(Path(root))
        try:
            finish_shared_run(store, load_config(Path(root)), run_id, mode=state.mode, source="pytest")
        finally:
            store.close()
    state.shared_runs.clear()


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is not None:
        state.close()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.name == CONFIG_NAME and parent.config.getoption("gpuemu"):
        return GpuemuFile.from_parent(parent, path=file_path)
    return None


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Note which client-side ops hand-written tests validate (their gpuemu.toml items then defer to them)."""
    state = _state(config)
    for item in items:
        marker = item.get_closest_marker(MARKER)
        if marker is None:
            continue
        name = marker.args[0] if marker.args else marker.kwargs.get("name")
        if not name:
            continue
        ws = marker.kwargs.get("workspace")
        try:
            root = Path(ws).resolve() if ws else state.default_root().resolve()
        except pytest.UsageError:
            root = None
        state.covered.setdefault((root, str(name)), []).append(item.nodeid)


class GpuemuFile(pytest.File):
    """A gpuemu.toml: one item per op and dtype of the planned cases."""

    def collect(self) -> Iterator[pytest.Item]:
        from .engine.errors import ConfigError

        state = _state(self.config)
        root = self.path.parent.resolve()
        try:
            client = state.client(root)
        except ConfigError as exc:
            raise GpuemuConfigError(str(exc)) from None
        for op in client.config.ops:
            dtypes: list[str] = []
            for spec in state.plan(root, op.name):
                if spec.dtype not in dtypes:
                    dtypes.append(spec.dtype)
            for dtype in sorted(dtypes, key=list(op.dtypes).index):
                yield GpuemuItem.from_parent(self, name=f"{op.name}[{dtype}]", op_name=op.name, dtype=dtype)


class GpuemuConfigError(Exception):
    """gpuemu.toml cannot be used: shown as the collection error, with file, line and column."""


class GpuemuFailed(Exception):
    """An op item that did not pass (``result`` is None when the op could not run at all)."""

    def __init__(self, result: FuzzResult | None, text: str) -> None:
        self.result = result
        super().__init__(text)


class GpuemuItem(pytest.Item):
    def __init__(self, *, op_name: str, dtype: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.funcargs: dict[str, Any] = {}  # some plugins' hook wrappers (pytest-lsp) expect it on every item
        self.op_name = op_name
        self.dtype = dtype
        self.root = self.path.parent.resolve()

    def runtest(self) -> None:
        state = _state(self.config)
        client = state.client(self.root)
        op = client.op(self.op_name)
        specs = [s for s in state.plan(self.root, op.name) if s.dtype == self.dtype]
        if not op.runnable:
            tests = state.covered.get((self.root, op.name), [])
            if tests:
                pytest.skip(f"client-side op {op.name!r}: validated by {', '.join(tests[:3])}")
            raise GpuemuFailed(
                None,
                f"NOT RUN {op.name}: execution_mode = {op.execution_mode!r} and no module: the op runs only "
                f"from your code. Mark a test @pytest.mark.{MARKER}({op.name!r}) that calls "
                "gpuemu_check(run_op), or give the op a module.",
            )
        isolate = bool(self.config.getoption("gpuemu_isolate"))
        result = client.test_op(op, specs=specs, quick=state.mode == "quick", isolate=isolate)
        if not result.ok:
            raise GpuemuFailed(result, _failure_text(result, self.root))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, GpuemuFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"gpuemu op {self.op_name} [{self.dtype}]"


def _failure_text(result: FuzzResult, root: Path) -> str:
    lines = [result.summary()]
    if result.diagnosis:
        lines.append(f"    diagnosis: {result.diagnosis}")
    failures = result.failures
    for f in failures[:10]:
        lines.append("    " + str(f).replace("\n", "\n    "))
    if len(failures) > 10:
        lines.append(f"    ... {len(failures) - 10} more: gpuemu -C {root} failures --op {result.op}")
    return "\n".join(lines)


@pytest.fixture(scope="session")
def gpuemu_client(request: pytest.FixtureRequest) -> Client:
    """The session's :class:`gpuemu_ls.Client` for the default workspace (one store run per process)."""
    state = _state(request.config)
    return state.client(state.default_root())


@pytest.fixture
def gpuemu_check(request: pytest.FixtureRequest) -> Callable[..., FuzzResult]:
    """``gpuemu_check(run_op, **options)``: fuzz the op of the test's ``gpuemu_op`` marker through ``run_op``.

    Options (iterations, seed, dtypes, layouts, value_distribution, fail_fast, op, workspace, framework)
    override the marker's. Raises :class:`gpuemu_ls.ValidationError` (an AssertionError) listing every
    failure with its replay command; returns the :class:`FuzzResult` when every case passed.
    """
    from .api import ValidationError

    state = _state(request.config)
    marker = request.node.get_closest_marker(MARKER)
    base: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    name = base.pop("name", None)
    if marker is not None and (marker.args or name):
        base["op"] = marker.args[0] if marker.args else name

    def check(run_op: Callable[..., Any], **overrides: Any) -> FuzzResult:
        opts = {**base, **overrides}
        op = opts.pop("op", None)
        if op is None:
            raise pytest.UsageError(f"gpuemu_check: mark the test @pytest.mark.{MARKER}('op') or pass op=...")
        ws = opts.pop("workspace", None)
        root = Path(ws) if ws else state.default_root()
        iterations = opts.pop("iterations", None) or request.config.getoption("gpuemu_iterations")
        if iterations is None and state.mode == "quick":
            iterations = state.client(root).config.ci.quick_iterations
        seed = opts.pop("seed", None)
        result = state.client(root).fuzz_op_client_side(
            op,
            run_op,
            iterations=iterations,
            seed=seed if seed is not None else request.config.getoption("gpuemu_seed"),
            value_distribution=opts.pop("value_distribution", None),
            dtypes=opts.pop("dtypes", None),
            layouts=opts.pop("layouts", None),
            fail_fast=opts.pop("fail_fast", False),
            framework=opts.pop("framework", None),
        )
        if opts:
            raise pytest.UsageError(f"gpuemu_check: unknown options {sorted(opts)}")
        if not result.ok:
            raise ValidationError(result)
        return result

    return check
