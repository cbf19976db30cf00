"""Signing and verifying report files in process, with real keys: the round trip for every key type, and
every tamper class refused with its reason (never a false "verified")."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from kit.attest import built_report, write_keypair
from kit.workspace import write_ws

from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.errors import UsageError
from gpuemu_ls.engine.tools.attest import AttestFailed, dsse, statement
from gpuemu_ls.engine.tools.attest.keys import KEY_ENV, PASSPHRASE_ENV, load_public_key, load_signing_key
from gpuemu_ls.engine.tools.attest.sign import attest
from gpuemu_ls.engine.tools.attest.verify import describe, verify

TOML = '[project]\nname = "signed"\n\n[[ops]]\nname = "copy"\nmodule = "ops:copy"\nreference = "ops:copy"\n'


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A workspace, its results document (the real builder, no run) and a stand-in HTML in out/, Ed25519 keys."""
    root = tmp_path_factory.mktemp("attest")
    ws = write_ws(root / "ws", TOML, {"ops.py": "def copy(x):\n    return x\n"})
    out = root / "out"
    built_report(ws, out)
    private, public = write_keypair(root / "keys")
    _, other_public = write_keypair(root / "keys", name="other")
    return {"root": root, "ws": ws, "out": out, "key": private, "pub": public, "other": other_public}


@pytest.fixture
def signed(base: dict[str, Path], tmp_path: Path) -> Path:
    """A fresh copy of the report files, signed: the folder holding them and R.intoto.jsonl."""
    folder = tmp_path / "report"
    folder.mkdir()
    for name in ("R.json", "R.html"):
        (folder / name).write_bytes((base["out"] / name).read_bytes())
    attest([folder / "R.html", folder / "R.json"], load_signing_key(str(base["key"])))
    return folder


def _resign(folder: Path, key: Path, edit) -> None:
    """Sign a statement changed by ``edit`` with the real key: a signer who signs something untrue."""
    body = statement.build([folder / "R.html", folder / "R.json"])
    edit(body)
    payload = json.dumps(body).encode()
    signing = load_signing_key(str(key))
    sig = base64.b64encode(signing.sign(dsse.pae(dsse.PAYLOAD_TYPE, payload))).decode()
    env = dsse.Envelope(dsse.PAYLOAD_TYPE, payload, [{"keyid": signing.keyid, "sig": sig}])
    (folder / "R.intoto.jsonl").write_text(env.to_json() + "\n", encoding="utf-8")


def test_round_trip_says_what_it_proves(signed: Path, base: dict[str, Path]) -> None:
    line = (signed / "R.intoto.jsonl").read_text(encoding="utf-8")
    raw = json.loads(line)
    body = json.loads(base64.b64decode(raw["payload"]))
    assert raw["payloadType"] == "application/vnd.in-toto+json"
    assert body["_type"] == "https://in-toto.io/Statement/v1"
    assert {s["name"] for s in body["subject"]} == {"R.html", "R.json"}
    assert body["predicate"] == json.loads((signed / "R.json").read_text(encoding="utf-8"))
    pub = load_public_key(str(base["pub"]))
    done = verify(signed / "R.json", pub, load_config(base["ws"]))
    text = "\n".join(describe(done))
    assert done.keyid == pub.keyid == raw["signatures"][0]["keyid"]
    assert f"signed by: key {pub.keyid}" in text
    assert "the signer's claim" in text
    assert "config: matches" in text
    assert f"resolved settings sha256 {done.provenance['config_sha256'][:16]}" in text
    import numpy

    assert done.provenance["libraries"]["numpy"] == numpy.__version__
    libraries = next(line for line in text.splitlines() if line.startswith("libraries: "))
    assert libraries.startswith(f"libraries: Python {done.provenance['libraries']['python']}, ")
    assert f"numpy {numpy.__version__}" in libraries.split(": ", 1)[1].split(", ")


def test_a_report_made_before_library_versions_verifies_as_before(signed: Path, base: dict[str, Path]) -> None:
    """A provenance record of version 1 (no ``libraries``), signed: verified, its versions said unrecorded."""
    doc = json.loads((signed / "R.json").read_text(encoding="utf-8"))
    del doc["provenance"]["libraries"]
    doc["provenance"]["version"] = 1
    (signed / "R.json").write_text(json.dumps(doc), encoding="utf-8")
    attest([signed / "R.html", signed / "R.json"], load_signing_key(str(base["key"])))
    done = verify(signed / "R.json", load_public_key(str(base["pub"])), load_config(base["ws"]))
    text = "\n".join(describe(done))
    assert "config: matches" in text and "libraries: not recorded (a report made before" in text


@pytest.mark.parametrize("kind", ["p256", "p384"])
def test_ecdsa_keys_round_trip(kind: str, signed: Path, tmp_path: Path) -> None:
    private, public = write_keypair(tmp_path / "keys", kind)
    attest([signed / "R.html", signed / "R.json"], load_signing_key(str(private)))
    assert verify(signed / "R.intoto.jsonl", load_public_key(str(public))).keyid == load_public_key(str(public)).keyid
    with pytest.raises(AttestFailed, match="not signed by this key"):
        verify(signed / "R.intoto.jsonl", load_public_key(str(write_keypair(tmp_path / "keys", kind, "x")[1])))


def test_a_key_from_the_environment_is_never_written(signed: Path, base: dict[str, Path]) -> None:
    pem = base["key"].read_text(encoding="utf-8")
    key = load_signing_key(None, {KEY_ENV: pem})
    attest([signed / "R.html", signed / "R.json"], key)
    for f in signed.iterdir():
        text = f.read_text(encoding="utf-8")
        assert "PRIVATE KEY" not in text and pem.splitlines()[1] not in text
    assert verify(signed / "R.json", load_public_key(str(base["pub"]))).keyid == key.keyid


def test_keys_that_are_refused(base: dict[str, Path], tmp_path: Path) -> None:
    inside, _ = write_keypair(write_ws(tmp_path / "ws", TOML) / "secrets")
    with pytest.raises(UsageError, match="inside the workspace"):
        load_signing_key(str(inside))
    rsa, _ = write_keypair(tmp_path, "rsa", "rsa")
    with pytest.raises(UsageError, match="Ed25519 or ECDSA"):
        load_signing_key(str(rsa))
    with pytest.raises(UsageError, match="no signing key"):
        load_signing_key(None, {})
    with pytest.raises(UsageError, match="private key"):
        load_public_key(str(base["key"]))
    locked, _ = write_keypair(tmp_path, name="locked", passphrase=b"s3cret")
    with pytest.raises(UsageError, match=PASSPHRASE_ENV):
        load_signing_key(str(locked), {})
    assert load_signing_key(str(locked), {PASSPHRASE_ENV: "s3cret"}).kind == "ed25519"


def _edit_file(name: str, text: str):
    def tamper(folder: Path, base: dict[str, Path]) -> None:
        (folder / name).write_text(text, encoding="utf-8")

    return tamper


def _edit_json(folder: Path, base: dict[str, Path]) -> None:
    doc = json.loads((folder / "R.json").read_text(encoding="utf-8"))
    doc["status"] = "passed"
    (folder / "R.json").write_text(json.dumps(doc), encoding="utf-8")


def _edit_payload(folder: Path, base: dict[str, Path]) -> None:
    path = folder / "R.intoto.jsonl"
    raw = json.loads(path.read_text(encoding="utf-8"))
    body = json.loads(base64.b64decode(raw["payload"]))
    body["predicate"]["status"] = "passed"
    raw["payload"] = base64.b64encode(json.dumps(body).encode()).decode()
    path.write_text(json.dumps(raw), encoding="utf-8")


def _payload_type(folder: Path, base: dict[str, Path]) -> None:
    path = folder / "R.intoto.jsonl"
    raw = json.loads(path.read_text(encoding="utf-8"))
    raw["payloadType"] = "application/json"
    path.write_text(json.dumps(raw), encoding="utf-8")


def _predicate_not_the_json(folder: Path, base: dict[str, Path]) -> None:
    _resign(folder, base["key"], lambda body: body["predicate"].update(status="passed"))


def _missing(folder: Path, base: dict[str, Path]) -> None:
    (folder / "R.html").unlink()


TAMPERS = {
    "html edited": (_edit_file("R.html", "<p>everything passed</p>"), "R.html was changed after signing"),
    "json edited": (_edit_json, "R.json was changed after signing"),
    "statement edited": (_edit_payload, "does not verify: the attestation was altered"),
    "payload type": (_payload_type, "not an in-toto attestation"),
    "predicate is not the json": (_predicate_not_the_json, "no signed file holds the signed results document"),
    "subject missing": (_missing, "R.html, signed by this attestation, is missing"),
    "not an envelope": (_edit_file("R.intoto.jsonl", "<html>\n"), "not a DSSE envelope: not JSON"),
    "two envelopes": (_edit_file("R.intoto.jsonl", "{}\n{}\n"), "found 2"),
}


@pytest.mark.parametrize("name", list(TAMPERS))
def test_tampering_is_refused(name: str, signed: Path, base: dict[str, Path]) -> None:
    tamper, reason = TAMPERS[name]
    tamper(signed, base)
    with pytest.raises(AttestFailed, match=reason):
        verify(signed / "R.json", load_public_key(str(base["pub"])))


def test_a_wrong_key_is_refused(signed: Path, base: dict[str, Path]) -> None:
    other = load_public_key(str(base["other"]))
    with pytest.raises(AttestFailed, match=f"not signed by this key: signed by sha256:.*is {other.keyid}"):
        verify(signed / "R.json", other)


def test_other_user_defaults_over_the_same_gpuemu_toml_are_said_not_refused(
    signed: Path, base: dict[str, Path], tmp_path: Path
) -> None:
    """The verifier's own ~/.config/gpuemu defaults change the resolved settings, not the report's config."""
    user = tmp_path / "user.toml"
    user.write_text("[validation]\nseed = 99\n", encoding="utf-8")
    done = verify(signed / "R.json", load_public_key(str(base["pub"])), load_config(base["ws"], user_config=user))
    assert (
        done.config[0].startswith("config: the same gpuemu.toml as")
        and "resolved settings differ here" in done.config[0]
    )


def test_a_report_from_another_config_is_refused(signed: Path, base: dict[str, Path], tmp_path: Path) -> None:
    changed = write_ws(tmp_path / "ws", TOML + "\n[validation]\nseed = 7\n", {"ops.py": "def copy(x):\n    return x\n"})
    with pytest.raises(AttestFailed, match=r"the report is from another config: its gpuemu\.toml had sha256"):
        verify(signed / "R.json", load_public_key(str(base["pub"])), load_config(changed))


def _shapes(value: object, at: tuple = ()) -> list[tuple]:
    """Every path into a JSON value (dict keys and list indices)."""
    out = [at] if at else []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        out += _shapes(v, (*at, k))
    return out


def test_no_signed_statement_shape_crashes_verification(signed: Path, base: dict[str, Path]) -> None:
    """Seeded: 120 statements with one field of another JSON type (or a path-like name), each signed with the
    real key, are verified or refused: never an exception of another kind (a subject of `true` was a TypeError)."""
    import copy
    import random

    body = statement.build([signed / "R.html", signed / "R.json"])
    paths = _shapes({k: v for k, v in body.items() if k != "predicate"})
    paths += [("predicate",), ("predicate", "provenance"), ("predicate", "ops")]
    values = [None, 0, 1.5, "", [], {}, [1], {"a": 1}, True, "../R.json", "R.json", "a\x00b", "a\\b"]
    rng, outcomes, public = random.Random(0), set(), load_public_key(str(base["pub"]))
    for _ in range(120):
        edited, path = copy.deepcopy(body), rng.choice(paths)
        place = edited
        for k in path[:-1]:
            place = place[k]
        place[path[-1]] = rng.choice(values)
        _resign(signed, base["key"], lambda b, e=edited: (b.clear(), b.update(e)))
        try:
            verify(signed / "R.json", public)
            outcomes.add("verified")
        except AttestFailed:
            outcomes.add("refused")
    assert "refused" in outcomes
