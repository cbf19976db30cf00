"""The Python API with numpy run_op callables: every call, its verdicts, and what lands in the store."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from kit.ops import np_softmax, np_softmax_no_max
from kit.store import detail, rows

from gpuemu_ls import Client, ValidationError, validate_op
from gpuemu_ls.api import USER_SEED_BASE, FuzzResult, TestCase, ValidationResult
from gpuemu_ls.engine.cases.generate import generate_inputs
from gpuemu_ls.engine.cases.plan import derive_case, mode_filter
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.errors import ConfigError, UsageError
from gpuemu_ls.engine.run.validate import plan_op


def db(root: Path) -> Path:
    return root / ".gpuemu" / "gpuemu.db"


def test_import_gpuemu_ls_stays_cheap_and_exports_the_api_lazily() -> None:
    code = (
        "import sys, gpuemu_ls\n"
        "assert 'gpuemu_ls.api' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules)\n"
        "from gpuemu_ls import Client, ValidationError, validate_op\n"
        "assert 'gpuemu_ls.api' in sys.modules and Client.__module__ == 'gpuemu_ls.api.client'\n"
        "assert issubclass(ValidationError, AssertionError)\n"
        "try:\n    gpuemu_ls.nope\nexcept AttributeError:\n    print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_client_finds_the_workspace_from_a_subfolder_or_the_toml(client_ws: Path) -> None:
    sub = client_ws / "deep" / "er"
    sub.mkdir(parents=True)
    for where in (sub, client_ws / "gpuemu.toml", client_ws):
        with Client(where) as c:
            assert c.root == client_ws.resolve()
            assert c.ops() == ["softmax", "softmax_mod", "add"]
    with pytest.raises(ConfigError, match=r"no gpuemu\.toml"):
        Client(client_ws.parent)


def test_fuzz_correct_op_passes_and_records_a_fuzz_run(client_ws: Path) -> None:
    with Client(client_ws) as c:
        result = c.fuzz_op_client_side("softmax", np_softmax, iterations=12, seed=0)
    assert isinstance(result, FuzzResult)
    assert result.ok and bool(result) and result.status == "passed"
    assert (result.passed, result.total, result.failures) == (12, 12, [])
    assert result.max_diff is not None and result.max_diff < 1e-2
    (run,) = rows(db(client_ws), "SELECT * FROM runs")
    assert (run["source"], run["mode"], run["status"]) == ("api", "fuzz", "passed")
    (verdict,) = rows(db(client_ws), "SELECT * FROM op_results")
    assert (verdict["op"], verdict["status"], verdict["cases"], verdict["passed"]) == ("softmax", "passed", 12, 12)
    assert detail(verdict)["mode"] == "fuzz" and detail(verdict)["client_side"] is True
    cases = rows(db(client_ws), "SELECT seed FROM cases WHERE run_id = ? ORDER BY seed", (run["id"],))
    seeds = [r["seed"] for r in cases]  # from the seed upward; later seeds stand in for some (coverage rules)
    assert len(seeds) == 12 and seeds == sorted(set(seeds)) and seeds[0] == 0


def test_fuzz_buggy_op_fails_with_seed_dtype_shape_and_replay(client_ws: Path) -> None:
    with Client(client_ws) as c:
        result = c.fuzz_op_client_side("softmax", np_softmax_no_max, iterations=24, seed=0)
    assert not result.ok and result.status == "failed"
    assert 0 < result.passed < result.total == 24
    # failures list every case that did not pass; bugs fail it, edge findings (the dtype's top) do not
    assert result.failed == sum(f.tier == "bug" for f in result.failures) > 0
    assert all(f.status == ("edge" if f.tier == "edge" else "failed") for f in result.failures)
    f = result.failures[0]
    assert f.seed in range(24) and f.dtype in ("float32", "float16", "bfloat16")
    assert set(f.shapes) == {"x"} and len(f.shapes["x"]) == 2
    assert f.kind in ("mismatch", "unexpected_nan", "unexpected_inf")
    assert f.replay.endswith(f"reproduce --op softmax --seed {f.seed}")
    assert f.api_replay == f"Client({str(client_ws.resolve())!r}).reproduce('softmax', {f.seed}, run_op)"
    text = str(f)
    assert f"seed={f.seed}" in text and "replay: gpuemu" in text and ".reproduce('softmax'" in text
    assert result.diagnosis.startswith("fails ")
    # exp(x) without max-subtraction: overflow at large magnitudes, 0/0 once a whole row underflows
    overflowing = {"large", "boundary", "special", "mixed_magnitude", "positive", "wide", "underflow_rows"}
    assert {x.distribution for x in result.failures} <= overflowing
    # every failing case kept its input snapshot in the store
    stored = rows(db(client_ws), "SELECT seed, status, snapshot_id FROM cases WHERE status != 'passed'")
    assert sorted(r["seed"] for r in stored) == sorted(x.seed for x in result.failures)
    assert all(r["snapshot_id"] for r in stored)
    (verdict,) = rows(db(client_ws), "SELECT * FROM op_results")
    assert verdict["status"] == "failed" and verdict["failed"] == result.failed
    assert verdict["diagnosis"] == result.diagnosis


def test_fuzz_plans_exactly_the_cases_of_gpuemu_fuzz(client_ws: Path, gpuemu_cli) -> None:
    """Same op, same flags: the API and `gpuemu fuzz` run the same seeds and reach the same verdicts."""
    cli = gpuemu_cli(
        client_ws, "fuzz", "--op", "softmax_mod", "--iterations", "9", "--seed", "5", "--dtype", "float16",
        "--format", "json",
    )  # fmt: skip
    assert cli.returncode in (0, 1), cli.stderr
    doc = json.loads(cli.stdout)
    cli_seeds = rows(db(client_ws), "SELECT seed, status FROM cases ORDER BY seed")
    with Client(client_ws, store=False) as c:
        via_module = c.fuzz_op_client_side("softmax_mod", None, iterations=9, seed=5, dtypes="float16")
        via_run_op = c.fuzz_op_client_side("softmax_mod", np_softmax, iterations=9, seed=5, dtypes=["float16"])
    for result in (via_module, via_run_op):
        assert [(x.seed, x.status) for x in result.cases] == [(r["seed"], r["status"]) for r in cli_seeds]
        assert all(x.spec.dtype == "float16" for x in result.cases)
    assert doc["ops"][0]["cases"] == via_module.total == 9


def test_fuzz_filters_dtypes_layouts_distributions_and_rejects_unknown(client_ws: Path) -> None:
    with Client(client_ws, store=False) as c:
        r = c.fuzz_op_client_side(
            "softmax", np_softmax, iterations=5, value_distribution="normal", dtypes=["bfloat16"], layouts="strided"
        )
        assert r.total == 5 and r.ok
        assert {(x.spec.dtype, x.spec.layout, x.spec.distribution) for x in r.cases} == {
            ("bfloat16", "strided", "normal")
        }
        with pytest.raises(UsageError, match="dtypes 'float64'"):
            c.fuzz_op_client_side("softmax", np_softmax, dtypes=["float64"])
        with pytest.raises(UsageError, match=r"nope"):
            c.fuzz_op_client_side("nope", np_softmax)
        with pytest.raises(UsageError, match="pass run_op"):
            c.fuzz_op_client_side("softmax")


def test_fail_fast_stops_at_the_first_failure(client_ws: Path) -> None:
    with Client(client_ws, store=False) as c:
        r = c.fuzz_op_client_side("softmax", np_softmax_no_max, iterations=24, fail_fast=True)
    assert r.cases[-1].status != "passed" and all(x.passed for x in r.cases[:-1])
    assert r.stopped == "fail-fast" and r.total < 24


def test_run_op_gets_named_inputs_in_order_with_the_case_layout_and_kwargs(client_ws: Path) -> None:
    seen = []

    def run_op(inputs, alpha):
        seen.append(([(k, v.dtype.name, v.flags.c_contiguous) for k, v in inputs.items()], alpha))
        return inputs["x"] + alpha * inputs["y"]

    with Client(client_ws, store=False) as c:
        r = c.fuzz_op_client_side("add", run_op, iterations=6, layouts=["transposed"])
    assert r.ok, r.report()
    names = [[n for n, _, _ in s] for s, _ in seen]
    assert names == [["x", "y"]] * 6 and {a for _, a in seen} == {0.5}
    # transposed views reach the op as non-contiguous arrays (where the shape has 2+ elements per axis)
    assert any(not contig for s, _ in seen for _, _, contig in s)


def test_run_op_that_raises_is_an_error_case_at_the_user_line(client_ws: Path) -> None:
    def run_op(inputs, axis):
        raise ValueError("kernel launch failed")  # this line is the error site

    with Client(client_ws, store=False) as c:
        r = c.fuzz_op_client_side("softmax", run_op, iterations=2)
    assert r.status == "error" and r.errors == 2 and r.passed == 0
    case = r.cases[0]
    assert case.kind == "op_error" and "ValueError: kernel launch failed" in case.message
    assert case.file == __file__ and case.line is not None
    assert "this line is the error site" in Path(__file__).read_text().splitlines()[case.line - 1]


def test_writing_into_an_input_is_caught_even_in_the_gaps_of_a_strided_view(client_ws: Path) -> None:
    def writes_input(inputs, axis):
        out = np_softmax(inputs, axis)
        inputs["x"][...] = 0
        return out

    def writes_gap(inputs, axis):
        out = np_softmax(inputs, axis)
        inputs["x"].base[..., 1::2] = 0  # the poison between the strided elements
        return out

    with Client(client_ws, store=False) as c:
        for fn in (writes_input, writes_gap):
            r = c.fuzz_op_client_side("softmax", fn, iterations=3, layouts=["strided"])
            assert {x.kind for x in r.cases} == {"input_mutation"}, fn.__name__


def test_get_test_case_is_the_case_the_cli_names(client_ws: Path) -> None:
    cfg = load_config(client_ws)
    op = cfg.op("softmax")
    with Client(client_ws) as c:
        case = c.get_test_case("softmax", 7)
        assert isinstance(case, TestCase) and case.spec == derive_case(op, 7)
        expected = generate_inputs(op, case.spec)
        for name, view in expected.views.items():
            assert case.arrays[name].tobytes() == view.tobytes()
            assert case.arrays[name].strides == view.strides
            assert case.inputs[name] is case.arrays[name]  # numpy framework: the engine's own views
        assert case.kwargs == {"axis": -1} and case.args == (case.inputs["x"],)
        assert case.replay() == "gpuemu reproduce --op softmax --seed 7"
        assert "seed=7" in case.describe() and case.framework == "numpy" and case.device == "cpu"
        good = c.submit_output(case, np_softmax(case.inputs))
        assert isinstance(good, ValidationResult) and good.passed and good.seed == 7
        bad = c.submit_output(case, np_softmax(case.inputs) + 0.5)
        assert not bad.passed and bad.failures[0].seed == 7 and bad.failures[0].kind == "mismatch"
        assert bad.max_diff is not None and bad.max_diff > 1e-3
    stored = rows(db(client_ws), "SELECT seed, status, snapshot_id, from_snapshot FROM cases ORDER BY id")
    assert [(r["seed"], r["status"]) for r in stored] == [(7, "passed"), (7, "failed")]
    assert stored[1]["snapshot_id"] and stored[1]["from_snapshot"] == 0


def test_submit_output_catches_a_write_into_the_case_inputs(client_ws: Path) -> None:
    with Client(client_ws, store=False) as c:
        case = c.get_test_case("softmax", 3)
        out = np_softmax(case.inputs)
        case.inputs["x"][0] = 1.0
        r = c.submit_output(case, out)
    assert r.status == "failed" and r.case is not None and r.case.kind == "input_mutation"


def test_get_test_batch_counts_filters_and_keeps_pinned_seeds_first(client_ws: Path) -> None:
    cfg = load_config(client_ws)
    op = cfg.op("softmax")
    with Client(client_ws, store=False) as c:
        batch = c.get_test_batch("softmax", 5, seed=10)
        assert [b.seed for b in batch] == list(range(10, 15))
        f16 = c.get_test_batch("softmax", 4, seed=0, dtypes="float16")
        assert len(f16) == 4 and all(b.dtype == "float16" for b in f16)
        expected = plan_op(cfg, op, "thorough", 4, 0, mode_filter(op, dtypes=("float16",)))
        assert [b.seed for b in f16] == [s.seed for s in expected]
        results = [c.submit_output(b, np_softmax(b.inputs)) for b in batch]
    assert all(r.passed for r in results)


def test_validate_op_with_own_inputs_names_a_replayable_case(client_ws: Path) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 17)).astype(np.float32)
    with Client(client_ws) as c:
        ok = c.validate_op("softmax", {"x": x}, np_softmax({"x": x}))
        bad = c.validate_op("softmax", {"x": x}, np_softmax({"x": x}) + np.float32(0.01))
        assert ok.passed and not bad.passed and bool(ok) and not bool(bad)
        assert ok.seed == bad.seed and bad.seed >= USER_SEED_BASE  # same inputs, same seed
        f = bad.failures[0]
        assert (f.dtype, f.shapes, f.layout, f.distribution, f.strategy) == (
            "float32",
            {"x": [3, 17]},
            "contiguous",
            "user",
            "user",
        )
        assert f.dims == {"B": 3, "N": 17}
        # the stored snapshot replays byte for byte through the API, with any run_op
        replay_bad = c.reproduce("softmax", bad.seed, lambda i, axis: np_softmax(i, axis) + np.float32(0.01))
        replay_ok = c.reproduce("softmax", bad.seed, np_softmax)
        assert replay_bad.source.startswith("stored snapshot") and not replay_bad.passed
        assert replay_ok.passed and replay_ok.case is not None and replay_ok.case.from_snapshot
        other = c.validate_op("softmax", [x[:, :5].copy()], np_softmax({"x": x[:, :5]}))
        assert other.passed and other.seed != ok.seed
        transposed = np.ascontiguousarray(x.T).T
        assert c.validate_op("softmax", transposed, np_softmax({"x": x})).failures == []
        with pytest.raises(UsageError, match="takes inputs"):
            c.validate_op("softmax", {"y": x}, x)
        with pytest.raises(UsageError, match="takes 2 inputs"):
            c.validate_op("add", [x], x)
        with pytest.raises(UsageError, match="no snapshot"):
            c.reproduce("softmax", ok.seed + 1, np_softmax)
    kinds = rows(db(client_ws), "SELECT mode FROM runs ORDER BY started_at")
    assert [r["mode"] for r in kinds] == ["client", "reproduce", "reproduce"]


def test_single_checks_share_one_run_with_a_cumulative_verdict(client_ws: Path) -> None:
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)
    with Client(client_ws) as c:
        c.validate_op("softmax", x, np_softmax({"x": x}))
        c.validate_op("softmax", x, np_softmax({"x": x}) * 2)
        c.validate_op("add", {"x": x, "y": x}, x + 0.5 * x)
        run_id = c.run_id
    (run,) = rows(db(client_ws), "SELECT * FROM runs")
    assert run["id"] == run_id and run["status"] == "failed" and run["finished_at"]
    verdicts = {r["op"]: r for r in rows(db(client_ws), "SELECT * FROM op_results")}
    assert (verdicts["softmax"]["cases"], verdicts["softmax"]["failed"], verdicts["softmax"]["status"]) == (
        2,
        1,
        "failed",
    )
    assert verdicts["add"]["status"] == "passed"


def test_validate_op_context_manager(client_ws: Path) -> None:
    x = np.full((2, 8), 0.25, dtype=np.float32)
    with Client(client_ws) as c:
        with validate_op(c, "softmax", inputs={"x": x}) as check:
            check.output = np_softmax({"x": x})
        assert check.result is not None and check.result.passed
        with pytest.raises(ValidationError) as info, validate_op(c, "softmax", inputs={"x": x}) as check:
            check.set_output(np_softmax({"x": x}) * 3)
        assert isinstance(info.value, AssertionError) and not info.value.result.passed
        assert "replay: gpuemu" in str(info.value) and "mismatch" in str(info.value)
        with validate_op(c, "softmax", seed=4) as check:  # no inputs: the case (op, 4) is generated
            assert check.case is not None and check.case.seed == 4 and check.kwargs == {"axis": -1}
            check.output = np_softmax({"x": check.args[0]})
        with pytest.raises(KeyError), validate_op(c, "softmax", inputs={"x": x}):  # propagates unchecked
            raise KeyError("boom")
        with pytest.raises(UsageError, match=r"check\.output"), validate_op(c, "softmax", inputs={"x": x}):
            pass
    assert len(rows(db(client_ws), "SELECT * FROM cases")) == 3


def test_test_op_runs_the_cases_of_gpuemu_test(client_ws: Path) -> None:
    cfg = load_config(client_ws)
    op = cfg.op("softmax")
    with Client(client_ws, store=False) as c:
        thorough = c.test_op("softmax", np_softmax)
        quick = c.test_op("softmax", np_softmax, quick=True)
        f16 = c.test_op("softmax", np_softmax, dtypes="float16")
        isolated = c.test_op("softmax_mod", isolate=True, dtypes=["float32"])
    assert [x.seed for x in thorough.cases] == [s.seed for s in plan_op(cfg, op, "thorough", None, None)]
    assert [x.seed for x in quick.cases] == [s.seed for s in plan_op(cfg, op, "quick", None, None)]
    # float32, and a few half-precision cases for the dtypes the op lists ([ci] quick_dtypes unset)
    assert [x.spec.dtype for x in quick.cases].count("float32") > len(quick.cases) // 2
    assert f16.total > 0 and {x.spec.dtype for x in f16.cases} == {"float16"}
    assert isolated.ok and isolated.total > 0 and {x.spec.dtype for x in isolated.cases} == {"float32"}


def test_calibrate_tolerance_matches_gpuemu_calibrate_and_writes_back(client_ws: Path) -> None:
    """A float16-intermediate softmax is 'known good' at a looser float32 tolerance: propose it, write it."""
    from gpuemu_ls.engine.tools.calibrate import CalibrationRefused, calibrate

    (client_ws / "ops.py").write_text(
        (client_ws / "ops.py").read_text()
        + "\n\ndef softmax_f16(x, axis=-1):\n    return softmax(x.astype(np.float16), axis).astype(x.dtype)\n"
    )
    toml = (client_ws / "gpuemu.toml").read_text().replace('module = "ops:softmax"', 'module = "ops:softmax_f16"')
    (client_ws / "gpuemu.toml").write_text(toml)
    spec = importlib.util.spec_from_file_location("calibrate_ops_under_test", client_ws / "ops.py")
    ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ops)
    run_op = lambda inputs, **kw: ops.softmax_f16(inputs["x"], **kw)  # noqa: E731
    cfg = load_config(client_ws)
    # on every distribution the float16 intermediates overflow to NaN: no tolerance covers that, both faces refuse
    with pytest.raises(CalibrationRefused, match="unexpected nan"):
        calibrate(cfg, cfg.op("softmax_mod"), dtypes=["float32"], iterations=20)
    with Client(client_ws, store=False) as c, pytest.raises(CalibrationRefused, match="unexpected nan"):
        c.calibrate_tolerance("softmax_mod", run_op, dtypes="float32", iterations=20)
    # the op's contract is moderate values (a value domain, not a tolerance): there it only rounds coarsely
    toml = toml.replace(
        'module = "ops:softmax_f16"', 'module = "ops:softmax_f16"\ndistributions = ["normal", "uniform"]'
    )
    (client_ws / "gpuemu.toml").write_text(toml)
    cfg = load_config(client_ws)
    engine = calibrate(cfg, cfg.op("softmax_mod"), dtypes=["float32"], iterations=20)
    with Client(client_ws, store=False) as c:
        tame = ["normal", "uniform"]  # fp16 intermediates overflow on large values: not a tolerance matter
        before = c.fuzz_op_client_side("softmax_mod", run_op, 20, dtypes="float32", value_distribution=tame)
        assert not before.ok
        api = c.calibrate_tolerance("softmax_mod", run_op, dtypes="float32", iterations=20)
        assert [p.to_dict() for p in api] == [p.to_dict() for p in engine]
        assert api[0].atol > 1e-5 and api[0].failing_now > 0
        c.calibrate_tolerance("softmax_mod", run_op, dtypes="float32", iterations=20, write=True)
        written = load_config(client_ws).op("softmax_mod").tolerances["float32"]
        assert (written.atol, written.rtol) == (api[0].atol, api[0].rtol)
        assert c.config.op("softmax_mod").tolerances["float32"] == written  # the client reloaded it
        after = c.fuzz_op_client_side("softmax_mod", run_op, 20, dtypes="float32", value_distribution=tame)
        assert after.ok, after.report()
        with pytest.raises(UsageError, match="method"):
            c.calibrate_tolerance("softmax_mod", run_op, method="p42")


def test_store_false_keeps_nothing_and_gpuemu_store_redirects(
    client_ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Client(client_ws, store=False) as c:
        r = c.fuzz_op_client_side("softmax", np_softmax, iterations=2)
        assert r.run_id is None and c.store_path is None
    assert not (client_ws / ".gpuemu").exists()
    other = tmp_path / "elsewhere.db"
    monkeypatch.setenv("GPUEMU_STORE", str(other))
    with Client(client_ws) as c:
        c.fuzz_op_client_side("softmax", np_softmax, iterations=2)
    assert len(rows(other, "SELECT * FROM cases")) == 2


def test_export_results_is_the_stored_results_document(client_ws: Path, tmp_path: Path) -> None:
    with Client(client_ws) as c:
        c.fuzz_op_client_side("softmax", np_softmax_no_max, iterations=12)
        out = tmp_path / "results.json"
        text = c.export_results(out)
    doc = json.loads(out.read_text())
    assert json.loads(text) == doc and doc["schema"] == 2
    (entry,) = [e for e in doc["ops"] if e["name"] == "softmax"]
    assert entry["status"] == "failed" and entry["failures"]
    assert entry["failures"][0]["replay"].startswith("gpuemu reproduce --op softmax --seed ")


def test_results_render_and_serialize(client_ws: Path) -> None:
    with Client(client_ws, store=False) as c:
        r = c.fuzz_op_client_side("softmax", np_softmax_no_max, iterations=12)
        v = c.validate_op("softmax", np.ones((1, 4), np.float32), np.zeros((1, 4), np.float32))
    d = r.to_dict()
    assert d["passed"] == r.passed and d["total"] == 12 and len(d["failures"]) == r.failed + r.errors + r.edges
    json.dumps(d, default=str)
    assert r.report().startswith("FAILED softmax: ") and "diagnosis:" in r.report()
    assert v.to_dict()["passed"] is False and v.to_dict()["max_diff"] == pytest.approx(0.25)
    assert v.summary().startswith("FAILED softmax: 0/1 cases passed")


def test_writes_into_device_copies_are_copied_back_and_caught(client_ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs copied to a device (here a fake one: a numpy copy) are copied back after run_op, so writes show."""
    from gpuemu_ls.engine.run.frameworks import Adapter

    class CopyingAdapter(Adapter):
        name = "copying"
        device = "fake:0"

        def place(self, arr):
            dev = np.array(arr, copy=True)

            def back() -> None:
                arr[...] = dev

            return dev, back

    def writes(inputs, axis):
        out = np_softmax(inputs, axis)
        inputs["x"][...] = 1.0
        return out

    monkeypatch.setattr(Client, "adapter", lambda self, op, framework=None: CopyingAdapter())
    with Client(client_ws, store=False) as c:
        r = c.fuzz_op_client_side("softmax", writes, iterations=3, value_distribution="normal")
        ok = c.fuzz_op_client_side("softmax", np_softmax, iterations=3, value_distribution="normal")
    assert {x.kind for x in r.cases} == {"input_mutation"}
    assert ok.ok


def test_a_mutated_test_case_is_stored_with_its_original_inputs(client_ws: Path) -> None:
    with Client(client_ws) as c:
        case = c.get_test_batch("softmax", 1, layouts="contiguous")[0]
        original = np.array(case.arrays["x"], copy=True)
        out = np_softmax(case.inputs)
        case.inputs["x"][...] = 7
        r = c.submit_output(case, out)
        assert r.case is not None and r.case.kind == "input_mutation"
        stored = c.store.load_snapshot(c.store.find_case("softmax", case.seed)["snapshot_id"])
    assert stored["x"].tobytes() == original.tobytes()
