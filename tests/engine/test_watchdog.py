"""The worker's hang watchdog keeps a fresh arming instead of re-arming it, and a hung script still leaves
its line in the log."""

from __future__ import annotations

from pathlib import Path

from kit.ops import op_toml, project_toml

from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.run import watchdog
from gpuemu_ls.engine.run.validate import RunOptions, run_validation


def test_a_fresh_arming_stands_and_a_stale_one_is_renewed(monkeypatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(watchdog.faulthandler, "dump_traceback_later", lambda s, exit: calls.append(f"arm {s}"))
    monkeypatch.setattr(watchdog.faulthandler, "cancel_dump_traceback_later", lambda: calls.append("cancel"))
    clock = [100.0]
    monkeypatch.setattr(watchdog.time, "monotonic", lambda: clock[0])
    w = watchdog.Watchdog()
    w.arm(10.0)
    clock[0] += 0.4  # within 5 % of 10 s: the dump still fires between 9.6 and 10 s after this phase began
    w.arm(10.0)
    clock[0] += 0.2  # 0.6 s after the arming: stale
    w.arm(10.0)
    w.arm(20.0)  # another delay is another arming
    w.disarm()
    w.arm(20.0)  # disarmed: armed again
    assert calls == ["arm 10.0", "arm 10.0", "arm 20.0", "cancel", "arm 20.0"]


REF_HANG = """
import json, sys, time
req = json.load(sys.stdin)
if req["inputs"]["x"]["shape"][0] == 5:
    time.sleep(60)
print(json.dumps({"outputs": {"result": req["inputs"]["x"]}}))
"""


def test_a_hung_script_reference_leaves_its_line(tmp_path: Path) -> None:
    plain = {"layouts": ["contiguous"], "distributions": ["normal"], "inputs": {"x": ["N"]}, "dims": {"N": [4, 5]}}
    op = op_toml("copy", module="ops:copy", reference="refs/hang.py", iterations=2, timeout=1, **plain)
    (tmp_path / "gpuemu.toml").write_text(project_toml(validation={"dtypes": ["float64"]}) + op)
    (tmp_path / "ops.py").write_text("def copy(x):\n    return x.copy()\n")
    (tmp_path / "refs").mkdir()
    (tmp_path / "refs" / "hang.py").write_text(REF_HANG.lstrip())
    (o,) = run_validation(load_config(tmp_path), RunOptions(mode="thorough", store=False)).outcomes
    kinds = {c.spec.dims["N"]: c.kind for c in o.cases}
    assert kinds[5] == "reference_timeout" and set(kinds) - {5} and all(kinds[n] is None for n in kinds if n != 5)
    for hung in (c for c in o.cases if c.kind):
        assert (Path(hung.file).name, hung.line) == ("hang.py", 4)  # the dump of the forked script
