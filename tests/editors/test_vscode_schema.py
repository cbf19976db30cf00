"""The JSON schema the VS Code extension contributes for gpuemu.toml (editors/vscode/schemas), against the
engine that reads the file: the same keys and enums, the example workspaces valid, and files the
engine rejects for an unknown key or a wrong enum rejected by the schema as well."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import jsonschema
import pytest

from gpuemu_ls.engine.config import keys as cfgkeys
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine import dtypes as dt
from gpuemu_ls.engine.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "editors" / "vscode" / "schemas" / "gpuemu.schema.json"
SCHEMA = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)
DEFS = SCHEMA["definitions"]
EXAMPLES = sorted((ROOT / "examples").glob("*/gpuemu.toml"))


def props(name: str) -> set[str]:
    return set(DEFS[name]["properties"])


def errors(doc: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in VALIDATOR.iter_errors(doc)]


def test_schema_is_valid_draft7() -> None:
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"


@pytest.mark.parametrize(
    ("where", "keys"),
    [
        ("top level", set(SCHEMA["properties"])),
        ("project", props("project")),
        ("validation", props("validation")),
        ("op", props("op")),
        ("input", props("input")),
        ("kernel", props("kernel")),
        ("artifactChecks", props("artifactChecks")),
        ("policies", props("policies")),
        ("ci", props("ci")),
        ("ci.quick", set(DEFS["ci"]["properties"]["quick"]["properties"])),
        ("cuda", props("cuda")),
        ("store", props("store")),
        ("tolerance", props("tolerance")),
        ("dim", set().union(*(b.get("properties", {}) for b in DEFS["dim"]["oneOf"]))),  # {min, max}, {candidates}
    ],
)
def test_schema_keys_are_the_engines(where: str, keys: set[str]) -> None:
    engine = {
        "top level": cfgkeys._TOP_KEYS,
        "project": cfgkeys._PROJECT_KEYS,
        "validation": cfgkeys._VALIDATION_KEYS,
        "op": cfgkeys._OP_KEYS,
        "input": cfgkeys._INPUT_KEYS,
        "kernel": cfgkeys._KERNEL_KEYS,
        "artifactChecks": cfgkeys._CHECK_KEYS,
        "policies": cfgkeys._POLICY_KEYS,
        "ci": cfgkeys._CI_KEYS,
        "ci.quick": cfgkeys._CI_QUICK_KEYS,
        "cuda": cfgkeys._CUDA_KEYS,
        "store": cfgkeys._STORE_KEYS,
        "tolerance": cfgkeys._TOL_KEYS,
        "dim": cfgkeys._DIM_KEYS,
    }[where]
    assert keys == set(engine)


def test_schema_enums_are_the_engines() -> None:
    assert DEFS["floatDtype"]["enum"] == list(dt.FLOAT_NAMES)
    assert DEFS["dtype"]["enum"] == list(dt.ALL_NAMES)
    assert DEFS["framework"]["enum"] == list(cfgkeys.FRAMEWORKS)
    assert DEFS["layout"]["enum"] == list(cfgkeys.LAYOUTS)
    assert DEFS["distribution"]["enum"] == list(cfgkeys.DISTRIBUTIONS)
    assert DEFS["invariant"]["enum"] == list(cfgkeys.INVARIANTS)
    assert DEFS["op"]["properties"]["execution_mode"]["enum"] == list(cfgkeys.EXECUTION_MODES)
    assert set(DEFS["tolerances"]["properties"]) == set(dt.FLOAT_NAMES)


def test_closed_tables_reject_unknown_keys() -> None:
    closed = [
        "project",
        "validation",
        "op",
        "input",
        "kernel",
        "artifactChecks",
        "policies",
        "ci",
        "cuda",
        "store",
        "tolerance",
        "tolerances",
    ]
    for name in closed:
        assert DEFS[name].get("additionalProperties") is False, name
    assert SCHEMA["additionalProperties"] is False
    assert DEFS["ci"]["properties"]["quick"]["additionalProperties"] is False


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_examples_are_valid(path: Path) -> None:
    assert len(EXAMPLES) >= 2
    assert errors(tomllib.loads(path.read_text(encoding="utf-8"))) == []


BROKEN = {
    "unknown op key": ('name = "softmax_tail_mask"', 'name = "softmax_tail_mask"\nrefrence = "x"', "refrence"),
    "unknown validation key": ("[validation]", "[validation]\nseeds = 3", "seeds"),
    "unknown dtype": ('dtypes = ["float32"', 'dtypes = ["float8", "float32"', "float8"),
    "unknown distribution": (
        'name = "softmax_tail_mask"',
        'name = "softmax_tail_mask"\ndistributions = ["gaussian", "normal"]',
        "gaussian",
    ),
    "unknown input key": ('[ops.inputs.x]\nshape = ["B", "N"]', '[ops.inputs.x]\nshape = ["B", "N"]\nshap = 1', "shap"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_schema_rejects_what_the_engine_rejects(case: str, tmp_path: Path) -> None:
    old, new, word = BROKEN[case]
    ws = tmp_path / "buggy"
    shutil.copytree(ROOT / "examples" / "buggy", ws, ignore=shutil.ignore_patterns(".gpuemu"))
    text = (ws / "gpuemu.toml").read_text(encoding="utf-8")
    assert old in text, old
    text = text.replace(old, new, 1)
    (ws / "gpuemu.toml").write_text(text, encoding="utf-8")
    found = errors(tomllib.loads(text))
    assert found and any(word in e for e in found), found
    with pytest.raises(ConfigError) as exc:
        load_config(ws)
    assert word in str(exc.value)
