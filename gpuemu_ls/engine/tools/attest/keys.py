"""The signer's key and signature checks (Ed25519, ECDSA P-256/P-384) through ``cryptography``.

A private key comes from a PEM file or an environment variable holding the PEM text, is read into memory
and never written anywhere: a key file inside a workspace (the folder of a gpuemu.toml) is refused, since
workspaces get committed and uploaded. ``cryptography`` is the ``[attest]`` extra, imported here only.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...config.keys import CONFIG_NAME
from ...errors import UsageError

#: the environment variable holding a PEM private key (CI secrets), and the one holding its passphrase
KEY_ENV = "GPUEMU_SIGNING_KEY"
PASSPHRASE_ENV = "GPUEMU_SIGNING_KEY_PASSPHRASE"
MAX_KEY_BYTES = 64 * 1024


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
    except ImportError:
        raise UsageError("signing needs the [attest] extra: pip install 'gpuemu-ls[attest]'") from None
    return serialization


def keyid(public: Any) -> str:
    """``sha256:<hex>`` of the public key's DER SubjectPublicKeyInfo: what a verifier compares."""
    serialization = _crypto()
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def _kind(key: Any) -> str:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    if isinstance(key, (ed25519.Ed25519PrivateKey, ed25519.Ed25519PublicKey)):
        return "ed25519"
    if isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)) and key.curve.name in (
        "secp256r1",
        "secp384r1",
    ):
        return f"ecdsa-{key.curve.name}"
    raise UsageError(f"unsupported key type {type(key).__name__}: use Ed25519 or ECDSA P-256/P-384")


def _scheme(kind: str) -> tuple[Any, ...]:
    """What ``sign``/``verify`` take after the data for a key of ``kind``: nothing for Ed25519 (the scheme fixes
    its hash), ECDSA with the curve's hash otherwise. Signing and checking read the same table."""
    if kind == "ed25519":
        return ()
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    return (ec.ECDSA(hashes.SHA384() if kind == "ecdsa-secp384r1" else hashes.SHA256()),)


@dataclass(frozen=True)
class SigningKey:
    """A private key in memory and where it came from (a file or an environment variable)."""

    key: Any
    source: str

    @property
    def kind(self) -> str:
        return _kind(self.key)

    @property
    def keyid(self) -> str:
        return keyid(self.key.public_key())

    def sign(self, data: bytes) -> bytes:
        return bytes(self.key.sign(data, *_scheme(self.kind)))


def _inside_workspace(path: Path) -> Path | None:
    for folder in path.resolve().parents:
        if (folder / CONFIG_NAME).is_file():
            return folder
    return None


def _read_key_file(path: Path, what: str) -> bytes:
    try:
        if not path.is_file():
            raise UsageError(f"{what} {path}: no such file")
        if path.stat().st_size > MAX_KEY_BYTES:
            raise UsageError(f"{what} {path}: larger than {MAX_KEY_BYTES} bytes, not a PEM key")
        return path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None


def load_signing_key(path: str | None, environ: dict[str, str] | None = None) -> SigningKey:
    """The private key of ``--key FILE``, else of ``$GPUEMU_SIGNING_KEY`` (PEM, PKCS#8 or the traditional
    forms ``cryptography`` reads; a passphrase from ``$GPUEMU_SIGNING_KEY_PASSPHRASE``)."""
    serialization = _crypto()
    env = os.environ if environ is None else environ
    if path:
        file = Path(path).expanduser()
        home = _inside_workspace(file)
        if home is not None:
            raise UsageError(
                f"--key {path}: a private key inside the workspace {home} can be committed or uploaded with it; "
                f"keep it elsewhere, or pass it in ${KEY_ENV}"
            )
        pem, source = _read_key_file(file, "--key"), f"file {file}"
    elif env.get(KEY_ENV, "").strip():
        pem, source = env[KEY_ENV].encode(), f"${KEY_ENV}"
    else:
        raise UsageError(f"no signing key: pass --key FILE (a PEM private key) or set ${KEY_ENV} to one")
    passphrase = env.get(PASSPHRASE_ENV)
    try:
        key = serialization.load_pem_private_key(pem, password=passphrase.encode() if passphrase else None)
    except TypeError as exc:  # encrypted without a passphrase, or a passphrase for a plain key
        raise UsageError(f"signing key from {source}: {exc} (passphrase: ${PASSPHRASE_ENV})") from None
    except ValueError:
        raise UsageError(
            f"signing key from {source}: not a PEM private key (or a wrong passphrase); "
            "make one with: openssl genpkey -algorithm ed25519 -out signing.pem"
        ) from None
    signing = SigningKey(key, source)
    _ = signing.kind  # an RSA or other key is refused before anything is signed
    return signing


@dataclass(frozen=True)
class PublicKey:
    """A verifier's public key (``--key PUB``)."""

    key: Any
    path: Path

    @property
    def keyid(self) -> str:
        return keyid(self.key)

    def check(self, data: bytes, signature: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature

        try:
            self.key.verify(signature, data, *_scheme(_kind(self.key)))
        except InvalidSignature:
            return False
        return True


def load_public_key(path: str) -> PublicKey:
    """``--key PUB``: a PEM public key (SubjectPublicKeyInfo, what ``openssl pkey -pubout`` writes)."""
    serialization = _crypto()
    file = Path(path).expanduser()
    pem = _read_key_file(file, "--key")
    try:
        key = serialization.load_pem_public_key(pem)
    except ValueError:
        if b"PRIVATE KEY" in pem:
            raise UsageError(
                f"--key {path} is a private key; verify with its public half "
                f"(openssl pkey -in {path} -pubout -out signing.pub)"
            ) from None
        raise UsageError(f"--key {path}: not a PEM public key") from None
    _kind(key)
    return PublicKey(key, file)


__all__ = ["KEY_ENV", "PASSPHRASE_ENV", "PublicKey", "SigningKey", "keyid", "load_public_key", "load_signing_key"]
