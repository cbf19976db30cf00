"""``gpuemu attest --keyless`` end to end: sigstore's real signing client in the real CLI, in a job that looks
like GitHub Actions with ``id-token: write``, gets its token from a local token endpoint, its certificate from a
local Fulcio and its log entry from a local Rekor (kit.sigstore_services: the real services are unreachable
here), and ``gpuemu verify --identity`` accepts the bundle offline. Without an identity, or with the services
down, signing fails in one line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kit.attest import built_report
from kit.cli import env, gpuemu, out
from kit.sigstore_instance import ISSUER
from kit.sigstore_services import SIGNER, Services
from kit.workspace import write_ws

from gpuemu_ls.cli import gpuemu_main
from gpuemu_ls.engine.errors import UsageError
from gpuemu_ls.engine.tools.attest.keyless import sign_keyless

pytest.importorskip("sigstore", reason="keyless signing needs the [attest] extra's sigstore")

TOML = '[project]\nname = "keyless"\n\n[[ops]]\nname = "copy"\nmodule = "ops:copy"\nreference = "ops:copy"\n'
#: what would make a job look like one with an OIDC identity
CI_VARS = ("GITHUB_ACTIONS", "ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "SIGSTORE_ID_TOKEN")
STATEMENT = b'{"_type":"https://in-toto.io/Statement/v1","predicate":{},"predicateType":"urn:t",'
STATEMENT += b'"subject":[{"digest":{"sha256":"' + b"0" * 64 + b'"},"name":"R.json"}]}'


@pytest.fixture(scope="module")
def services() -> Iterator[Services]:
    with Services() as running:
        yield running


def _no_identity() -> dict[str, str]:
    e = env()
    for name in CI_VARS:
        e.pop(name, None)
    return e


def test_keyless_signing_round_trip_through_local_sigstore_services(
    services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = write_ws(tmp_path / "ws", TOML, {"ops.py": "def copy(x):\n    return x\n"})
    html, json_file = built_report(ws, tmp_path / "out")
    trust, root = tmp_path / "trust_config.json", tmp_path / "trusted_root.json"
    trust.write_text(services.trust_config(), encoding="utf-8")
    root.write_text(services.instance.trusted_root(), encoding="utf-8")
    before = len(services.requests)
    done = gpuemu("attest", "--keyless", "--trust-config", str(trust), str(html), str(json_file), cwd=ws,
                  environ={**_no_identity(), **services.ci_env()})  # fmt: skip
    assert done.returncode == 0, out(done)
    bundle = tmp_path / "out" / "R.sigstore.json"
    assert f"-> {bundle}" in done.stdout, out(done)
    # the token, then the certificate, then the log entry: the client's own order, against these services
    assert services.requests[before:] == ["GET /token", "POST /api/v2/signingCert", "POST /api/v1/log/entries"]
    monkeypatch.chdir(ws)  # `gpuemu verify` in the workspace, in process (the CLI's own entry point)
    assert gpuemu_main(["verify", str(bundle), "--identity", SIGNER, "--trusted-root", str(root)]) == 0
    said = capsys.readouterr().out
    assert said.startswith("VERIFIED"), said
    assert f"signed by: {SIGNER} (issuer {ISSUER}), a Sigstore certificate" in said
    assert "(recorded by the transparency log: the signature existed then)" in said
    assert "config: matches" in said
    evil = SIGNER.replace("acme", "evil")
    assert gpuemu_main(["verify", str(bundle), "--identity", evil, "--trusted-root", str(root)]) == 1
    assert f"the certificate names {SIGNER}" in capsys.readouterr().err


def test_keyless_without_an_oidc_identity_fails_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = write_ws(tmp_path / "ws", TOML, {"ops.py": "def copy(x):\n    return x\n"})
    html, json_file = built_report(ws, tmp_path / "out")
    for name in CI_VARS:
        monkeypatch.delenv(name, raising=False)
    assert gpuemu_main(["attest", "--keyless", str(html), str(json_file)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "--keyless needs an OIDC identity: a GitHub Actions job with `permissions: id-token: write`" in err
    assert not (tmp_path / "out" / "R.sigstore.json").exists()


def test_a_job_without_id_token_permission_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CI_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    with pytest.raises(UsageError, match=r"^--keyless: no OIDC identity here: GitHub: missing or insufficient OIDC"):
        sign_keyless(STATEMENT)


def test_unreachable_services_fail_in_one_line(
    services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The services' trust config with their port closed: the token still comes, Fulcio does not answer."""
    with Services(services.instance) as gone:
        trust = tmp_path / "trust_config.json"
        trust.write_text(gone.trust_config(), encoding="utf-8")
    for name, value in services.ci_env().items():
        monkeypatch.setenv(name, value)
    with pytest.raises(UsageError, match=r"^--keyless signing failed: a Sigstore service is unreachable: ") as got:
        sign_keyless(STATEMENT, trust)
    assert "\n" not in str(got.value)
