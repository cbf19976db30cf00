"""Keyless signatures through Sigstore: in CI, the job's OIDC identity gets a short-lived certificate and the
signature is logged in a transparency log; the bundle (``R.sigstore.json``) then verifies offline against a
pinned trusted root (sigstore's production root, shipped in the ``sigstore`` package of the ``[attest]`` extra,
or ``--trusted-root FILE``), with the time the log recorded standing behind "when"."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ...errors import UsageError
from . import AttestFailed
from .dsse import PAYLOAD_TYPE

BUNDLE_SUFFIX = ".sigstore.json"
#: the OIDC issuer of GitHub Actions' workflow identities (``--issuer``'s default)
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"


def _need_sigstore() -> None:
    try:
        import sigstore  # noqa: F401
    except ImportError:
        raise UsageError("keyless signatures need the [attest] extra: pip install 'gpuemu-ls[attest]'") from None


@dataclass(frozen=True)
class KeylessPolicy:
    """Who must have signed (``--identity``, ``--issuer``) and the root of trust (``--trusted-root``)."""

    identity: str
    issuer: str = GITHUB_ISSUER
    trusted_root: Path | None = None


@dataclass(frozen=True)
class KeylessSigned:
    payload: bytes
    identity: str
    issuer: str
    times: list[tuple[str, datetime]]  # (what backs it, when), each verified


def _trusted_root(path: Path | None) -> Any:
    from sigstore.models import ClientTrustConfig, TrustedRoot

    if path is None:  # the root shipped with sigstore, read from its local copy: no TUF refresh, no network
        logging.getLogger("sigstore").setLevel(logging.ERROR)
        return ClientTrustConfig.production(offline=True).trusted_root
    if not path.is_file():
        raise UsageError(f"--trusted-root {path}: no such file")
    try:
        return TrustedRoot.from_file(str(path))
    except Exception as exc:  # pydantic's or sigstore's own: either way not a trusted root
        raise UsageError(f"--trusted-root {path}: not a Sigstore trusted root ({type(exc).__name__})") from None


def _sans(cert: Any) -> list[str]:
    from cryptography.x509 import RFC822Name, SubjectAlternativeName, UniformResourceIdentifier

    try:
        san = cert.extensions.get_extension_for_class(SubjectAlternativeName).value
    except Exception:
        return []
    return [*san.get_values_for_type(UniformResourceIdentifier), *san.get_values_for_type(RFC822Name)]


def verify_bundle(text: str, policy: KeylessPolicy) -> KeylessSigned:
    """The statement a Sigstore bundle signs, once certificate, SCT, log entry, times, identity and signature
    check out against the trusted root; AttestFailed saying which did not."""
    _need_sigstore()
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import Bundle
    from sigstore.verify import Verifier
    from sigstore.verify.policy import Identity

    root = _trusted_root(policy.trusted_root)
    try:
        bundle = Bundle.from_json(text)
    except Exception as exc:  # InvalidBundle, or the JSON model's validation error
        raise AttestFailed(f"not a Sigstore bundle: {str(exc).splitlines()[0][:200]}") from None
    signer = _sans(bundle.signing_certificate)
    verifier = Verifier(trusted_root=root)
    try:
        kind, payload = verifier.verify_dsse(bundle, Identity(identity=policy.identity, issuer=policy.issuer))
        verified = verifier._establish_time(bundle)  # the times verification just checked the chain at
    except Exception as exc:  # sigstore's VerificationError, or what malformed material raises on its way there
        why = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        if not isinstance(exc, SigstoreError):
            raise AttestFailed(
                f"the Sigstore bundle does not verify: malformed ({type(exc).__name__}: {why})"
            ) from None
        if "SAN" in why or "issuer" in why.lower() or "extension" in why.lower():
            raise AttestFailed(
                f"not signed by {policy.identity} (issuer {policy.issuer}): the certificate names "
                f"{', '.join(signer) or 'no identity'} ({why})"
            ) from None
        if "not valid at validation time" in why or "expired at time of signing" in why:
            raise AttestFailed(
                f"the signing certificate was not valid at the time the log recorded the signature ({why})"
            ) from None
        raise AttestFailed(f"the Sigstore bundle does not verify: {why}") from None
    if kind != PAYLOAD_TYPE:
        raise AttestFailed(f"payloadType {kind!r} is not {PAYLOAD_TYPE!r}: not an in-toto attestation")
    times = [
        ("a timestamp authority" if t.source.name == "TIMESTAMP_AUTHORITY" else "the transparency log", t.time)
        for t in verified
    ]
    return KeylessSigned(bytes(payload), policy.identity, policy.issuer, times)


def _trust_config(path: Path | None) -> Any:
    """The Sigstore instance to sign with: ``--trust-config FILE`` (a private instance's trusted root and
    signing config), else the public-good instance's, refreshed from its TUF repository."""
    from sigstore.models import ClientTrustConfig

    if path is None:
        try:
            return ClientTrustConfig.production()
        except Exception as exc:  # TUF's or sigstore's own, with no network or a repository out of reach
            raise UsageError(f"--keyless: cannot read Sigstore's trust config over TUF: {_first_line(exc)}") from None
    if not path.is_file():
        raise UsageError(f"--trust-config {path}: no such file")
    try:
        return ClientTrustConfig.from_json(path.read_text(encoding="utf-8"))
    except Exception as exc:  # pydantic's or sigstore's own: either way not a client trust config
        raise UsageError(f"--trust-config {path}: not a Sigstore client trust config ({type(exc).__name__})") from None


def sign_keyless(payload: bytes, trust_config: Path | None = None) -> str:
    """The Sigstore bundle of ``payload`` signed with this CI job's OIDC identity (GitHub Actions with
    ``id-token: write``): Fulcio certifies a fresh key, Rekor logs the signature. Needs the network (or the
    services ``trust_config`` names)."""
    _need_sigstore()
    import requests
    from sigstore import dsse
    from sigstore._internal.fulcio.client import FulcioClientError
    from sigstore._internal.rekor import RekorClientError
    from sigstore.errors import Error as SigstoreError
    from sigstore.oidc import IdentityError, IdentityToken, detect_credential
    from sigstore.sign import SigningContext

    try:
        token = detect_credential()
    except IdentityError as exc:
        raise UsageError(f"--keyless: no OIDC identity here: {_first_line(exc)}") from None
    if not token:
        raise UsageError(
            "--keyless needs an OIDC identity: a GitHub Actions job with `permissions: id-token: write` "
            "(elsewhere, sign with --key)"
        )
    config = _trust_config(trust_config)
    try:
        context = SigningContext.from_trust_config(config)
        # cache: one ephemeral key for the certificate request and the signature (without it, each use of the
        # signer's key makes a new one, and the signature is not the certified key's)
        with context.signer(IdentityToken(token), cache=True) as signer:
            return str(signer.sign_dsse(dsse.Statement(payload)).to_json())
    except FulcioClientError as exc:
        raise UsageError(f"--keyless signing failed: the certificate authority refused: {_first_line(exc)}") from None
    except RekorClientError as exc:
        raise UsageError(f"--keyless signing failed: the transparency log refused: {_first_line(exc)}") from None
    except requests.RequestException as exc:
        raise UsageError(f"--keyless signing failed: a Sigstore service is unreachable: {_first_line(exc)}") from None
    except (SigstoreError, ValueError) as exc:  # an SCT that does not verify, a malformed answer
        raise UsageError(f"--keyless signing failed: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    lines = [*str(exc).splitlines(), *(str(exc.__cause__ or "").splitlines())]
    return (next((ln for ln in lines if ln.strip()), "") or type(exc).__name__)[:300]


__all__ = ["BUNDLE_SUFFIX", "GITHUB_ISSUER", "KeylessPolicy", "KeylessSigned", "sign_keyless", "verify_bundle"]
