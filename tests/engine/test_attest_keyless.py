"""Keyless (Sigstore) attestations verified offline by sigstore's real verifier against a pinned trusted root:
a Sigstore instance of the tests' own issues the bundles (kit.sigstore_instance). The round trip says who signed
and when the log recorded it; a foreign identity or issuer, a certificate not valid at the log's recorded time,
another instance's bundle, tampering and the wrong kind of check are refused with their reason. (Keyless signing,
against the same instance served as Fulcio and Rekor: tests/cli/test_attest_keyless_signing.py.)"""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from pathlib import Path

import pytest
from kit.attest import built_report, sign, write_keypair
from kit.cli import gpuemu, out
from kit.sigstore_instance import IDENTITY, ISSUER, SIGNED_AT, Instance
from kit.workspace import write_ws

from gpuemu_ls.engine.errors import UsageError
from gpuemu_ls.engine.tools.attest import AttestFailed, statement
from gpuemu_ls.engine.tools.attest.keyless import KeylessPolicy
from gpuemu_ls.engine.tools.attest.keys import load_public_key
from gpuemu_ls.engine.tools.attest.verify import describe, verify

pytest.importorskip("sigstore", reason="keyless verification needs the [attest] extra's sigstore")

TOML = '[project]\nname = "keyless"\n\n[[ops]]\nname = "copy"\nmodule = "ops:copy"\nreference = "ops:copy"\n'


@pytest.fixture(scope="module")
def instance(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The instance, its trusted root in a file, and report files (no run) to sign."""
    root = tmp_path_factory.mktemp("keyless")
    made = Instance()
    trusted = root / "trusted_root.json"
    trusted.write_text(made.trusted_root(), encoding="utf-8")
    ws = write_ws(root / "ws", TOML, {"ops.py": "def copy(x):\n    return x\n"})
    return {"instance": made, "trusted": trusted, "ws": ws}


def _signed(instance: dict[str, object], folder: Path, **bundle: object) -> Path:
    """Report files in ``folder`` and their bundle R.sigstore.json, as CI's keyless signing writes them."""
    files = built_report(instance["ws"], folder)  # type: ignore[arg-type]
    payload = json.dumps(statement.build(files)).encode()
    made: Instance = instance["instance"]  # type: ignore[assignment]
    (folder / "R.sigstore.json").write_text(made.bundle(payload, **bundle), encoding="utf-8")  # type: ignore[arg-type]
    return folder / "R.sigstore.json"


def _policy(instance: dict[str, object], identity: str = IDENTITY, issuer: str = ISSUER) -> KeylessPolicy:
    return KeylessPolicy(identity, issuer, instance["trusted"])  # type: ignore[arg-type]


def test_round_trip_names_the_identity_and_the_logs_time(instance: dict[str, object], tmp_path: Path) -> None:
    bundle = _signed(instance, tmp_path)
    done = verify(tmp_path / "R.json", _policy(instance))
    assert done.envelope == bundle and done.keyid is None
    text = "\n".join(describe(done))
    assert f"signed by: {IDENTITY} (issuer {ISSUER}), a Sigstore certificate" in text
    assert f"when: {SIGNED_AT.isoformat(timespec='seconds')} (recorded by the transparency log" in text
    assert "report date:" in text and "(the signer's claim)" in text


@pytest.mark.parametrize(
    ("identity", "issuer"),
    [
        ("https://github.com/mallory/kernels/.github/workflows/release.yml@refs/tags/v1.0.0", ISSUER),
        (IDENTITY, "https://accounts.google.com"),
    ],
    ids=["foreign identity", "foreign issuer"],
)
def test_another_signer_is_refused(identity: str, issuer: str, instance: dict[str, object], tmp_path: Path) -> None:
    _signed(instance, tmp_path)
    with pytest.raises(AttestFailed, match=f"not signed by {identity} .*the certificate names {IDENTITY}"):
        verify(tmp_path / "R.json", _policy(instance, identity, issuer))


def test_a_certificate_not_valid_at_the_logs_time_is_refused(instance: dict[str, object], tmp_path: Path) -> None:
    """The log recorded the entry an hour after the 10-minute certificate expired (every signature valid)."""
    _signed(instance, tmp_path, logged_at=SIGNED_AT + timedelta(hours=1))
    with pytest.raises(AttestFailed, match="certificate was not valid at the time the log recorded the signature"):
        verify(tmp_path / "R.json", _policy(instance))


def test_another_instances_bundle_and_the_shipped_root_refuse(instance: dict[str, object], tmp_path: Path) -> None:
    files = built_report(instance["ws"], tmp_path)  # type: ignore[arg-type]
    payload = json.dumps(statement.build(files)).encode()
    (tmp_path / "R.sigstore.json").write_text(Instance().bundle(payload), encoding="utf-8")
    with pytest.raises(AttestFailed, match="does not verify: failed to build timestamp certificate chain"):
        verify(tmp_path / "R.json", _policy(instance))
    with pytest.raises(AttestFailed, match="does not verify: failed to build"):  # sigstore's production root, offline
        verify(tmp_path / "R.json", KeylessPolicy(IDENTITY, ISSUER, None))


def _edit_payload(bundle: Path) -> None:
    raw = json.loads(bundle.read_text(encoding="utf-8"))
    body = json.loads(base64.b64decode(raw["dsseEnvelope"]["payload"]))
    body["predicate"]["status"] = "passed"
    raw["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(body).encode()).decode()
    bundle.write_text(json.dumps(raw), encoding="utf-8")


def test_tampering_is_refused(instance: dict[str, object], tmp_path: Path) -> None:
    bundle = _signed(instance, tmp_path / "a")
    (tmp_path / "a" / "R.html").write_text("<p>all passed</p>", encoding="utf-8")
    with pytest.raises(AttestFailed, match=r"R\.html was changed after signing"):
        verify(bundle, _policy(instance))
    bundle = _signed(instance, tmp_path / "b")
    _edit_payload(bundle)
    with pytest.raises(AttestFailed, match="does not verify"):
        verify(bundle, _policy(instance))
    (tmp_path / "b" / "R.sigstore.json").write_text("{}", encoding="utf-8")
    with pytest.raises(AttestFailed, match="not a Sigstore bundle"):
        verify(bundle, _policy(instance))


def test_the_cli_verifies_a_bundle_and_refuses_the_wrong_kind_of_check(
    instance: dict[str, object], tmp_path: Path
) -> None:
    bundle = _signed(instance, tmp_path)
    done = gpuemu(
        "verify", str(bundle), "--identity", IDENTITY, "--trusted-root", str(instance["trusted"]), cwd=tmp_path
    )
    assert done.returncode == 0, out(done)
    assert done.stdout.startswith("VERIFIED") and "recorded by the transparency log" in done.stdout
    private, public = write_keypair(tmp_path / "keys")
    with pytest.raises(UsageError, match="keyless Sigstore bundle: verify it with --identity"):
        verify(bundle, load_public_key(str(public)))
    keyed = sign(built_report(instance["ws"], tmp_path / "keyed"), private)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="signed with a key: verify it with --key"):
        verify(keyed, _policy(instance))


def test_no_corrupted_bundle_crashes_verification(instance: dict[str, object], tmp_path: Path) -> None:
    """Seeded: 80 bundles with a few bytes replaced, dropped or inserted are refused, or verify where the change
    decodes to the same bytes (sigstore reads base64 leniently): never another exception (a stray base64 character
    in the log entry was a binascii.Error)."""
    import random

    bundle = _signed(instance, tmp_path)
    good = bundle.read_bytes()
    rng, outcomes = random.Random(0), set()
    for _ in range(80):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            at, how = rng.randrange(len(data)), rng.random()
            if how < 0.5:
                data[at] = rng.randrange(32, 127)
            elif how < 0.75:
                del data[at]
            else:
                data.insert(at, rng.randrange(32, 127))
        bundle.write_bytes(bytes(data))
        try:
            verify(bundle, _policy(instance))
            outcomes.add("verified")
        except AttestFailed:
            outcomes.add("refused")
    assert "refused" in outcomes
