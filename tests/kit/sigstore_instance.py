"""A Sigstore instance of the tests' own: a certificate authority, a certificate-transparency log and a
transparency log (Rekor v1), each with a disposable key made here. Its trusted root and the bundles it issues
are checked by sigstore's real verifier offline, nothing mocked: what CI's keyless signing produces (a short-lived
certificate for an OIDC identity, an SCT, a logged DSSE entry with its inclusion proof, checkpoint and signed
entry timestamp), without Fulcio, Rekor or a network. kit.sigstore_services serves the same instance over HTTP
on localhost as Fulcio and Rekor, for sigstore's real signing client."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, ExtensionOID, NameOID

#: the OIDC issuer of GitHub Actions and an identity as a workflow's certificate carries it
ISSUER = "https://token.actions.githubusercontent.com"
IDENTITY = "https://github.com/acme/kernels/.github/workflows/release.yml@refs/tags/v1.0.0"
ORIGIN = "log.test.invalid"
SIGNED_AT = datetime(2026, 1, 15, 12, 0, tzinfo=timezone.utc)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _spki(key: Any) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _ecdsa(key: Any, data: bytes) -> bytes:
    return bytes(key.sign(data, ec.ECDSA(hashes.SHA256())))


def _octet_string(data: bytes) -> bytes:
    """DER OCTET STRING (the SCT list extension's value)."""
    n = len(data)
    length = (
        bytes([n])
        if n < 0x80
        else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8, "big")
    )
    return b"\x04" + length + data


def dsse_body(payload: bytes, envelope: str, signatures: list[str], pem: bytes) -> bytes:
    """The canonical body of a Rekor v1 ``dsse`` entry: what the log stores, hashes and signs."""
    import rfc8785

    body = {
        "kind": "dsse",
        "apiVersion": "0.0.1",
        "spec": {
            "payloadHash": {"algorithm": "sha256", "value": hashlib.sha256(payload).hexdigest()},
            "envelopeHash": {"algorithm": "sha256", "value": hashlib.sha256(envelope.encode()).hexdigest()},
            "signatures": [{"signature": sig, "verifier": _b64(pem)} for sig in signatures],
        },
    }
    return bytes(rfc8785.dumps(body))


@dataclass
class Instance:
    ca_key: Any = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    ct_key: Any = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    log_key: Any = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    #: the CA is valid a year either side of this (the services sign now)
    around: datetime = SIGNED_AT

    def __post_init__(self) -> None:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpuemu test CA")])
        self.ca_name = name
        self.ca = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.ca_key.public_key())
            .serial_number(1)
            .not_valid_before(self.around - timedelta(days=365))
            .not_valid_after(self.around + timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.ca_key.public_key()), critical=False)
            .sign(self.ca_key, hashes.SHA256())
        )

    def trusted_root(self) -> str:
        """The trusted root JSON a verifier pins (``--trusted-root``)."""

        def log(key: Any, url: str) -> dict[str, Any]:
            return {
                "baseUrl": url,
                "hashAlgorithm": "SHA2_256",
                "logId": {"keyId": _b64(hashlib.sha256(_spki(key)).digest())},
                "publicKey": {
                    "rawBytes": _b64(_spki(key)),
                    "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                    "validFor": {"start": "2020-01-01T00:00:00Z"},
                },
            }

        ca = {
            "subject": {"organization": "gpuemu tests", "commonName": "gpuemu test CA"},
            "uri": "https://ca.test.invalid",
            "certChain": {"certificates": [{"rawBytes": _b64(self.ca.public_bytes(serialization.Encoding.DER))}]},
            "validFor": {"start": "2020-01-01T00:00:00Z"},
        }
        return json.dumps(
            {
                "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
                "tlogs": [log(self.log_key, f"https://{ORIGIN}")],
                "ctlogs": [log(self.ct_key, "https://ct.test.invalid")],
                "certificateAuthorities": [ca],
            }
        )

    def certificate(self, public_key: Any, identity: str, issuer: str, valid_from: datetime, valid_to: datetime) -> Any:
        """A short-lived code-signing certificate of ``public_key`` for ``identity`` from ``issuer``, its SCT
        embedded."""
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.ca_name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid_from)
            .not_valid_after(valid_to)
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
            .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(identity)]), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()), critical=False)
            .add_extension(
                x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.1"), issuer.encode()),
                critical=False,
            )
        )
        # RFC 6962 3.2: the log signs the certificate's TBS without the SCT list, with the issuer's key hash
        tbs = builder.sign(self.ca_key, hashes.SHA256()).tbs_certificate_bytes
        millis = int(valid_from.timestamp() * 1000)
        signed = (
            struct.pack("!BBQH", 0, 0, millis, 1)
            + hashlib.sha256(_spki(self.ca_key)).digest()
            + len(tbs).to_bytes(3, "big")
            + tbs
            + b"\x00\x00"
        )
        sig = _ecdsa(self.ct_key, signed)
        sct = b"\x00" + hashlib.sha256(_spki(self.ct_key)).digest() + struct.pack("!QH", millis, 0)
        sct += struct.pack("!BBH", 4, 3, len(sig)) + sig
        scts = struct.pack("!HH", len(sct) + 2, len(sct)) + sct
        ext = x509.UnrecognizedExtension(ExtensionOID.PRECERT_SIGNED_CERTIFICATE_TIMESTAMPS, _octet_string(scts))
        cert = builder.add_extension(ext, critical=False).sign(self.ca_key, hashes.SHA256())
        assert cert.tbs_precertificate_bytes == tbs
        return cert

    @property
    def log_id(self) -> bytes:
        return hashlib.sha256(_spki(self.log_key)).digest()

    def checkpoint(self, size: int, root: bytes) -> str:
        """The log's signed note on its tree of ``size`` entries with hash ``root``."""
        note = f"{ORIGIN}\n{size}\n{_b64(root)}\n"
        return note + f"\n\u2014 {ORIGIN} {_b64(self.log_id[:4] + _ecdsa(self.log_key, note.encode()))}\n"

    def entry_timestamp(self, canonical: bytes, when: int, index: int) -> bytes:
        """The signed entry timestamp: the log's promise that it logged ``canonical`` at ``when``."""
        import rfc8785

        promise = {"body": _b64(canonical), "integratedTime": when, "logID": self.log_id.hex(), "logIndex": index}
        return _ecdsa(self.log_key, rfc8785.dumps(promise))

    def bundle(
        self,
        payload: bytes,
        *,
        identity: str = IDENTITY,
        issuer: str = ISSUER,
        logged_at: datetime = SIGNED_AT,
        valid_from: datetime = SIGNED_AT - timedelta(minutes=1),
        valid_to: datetime = SIGNED_AT + timedelta(minutes=9),
        payload_type: str = "application/vnd.in-toto+json",
    ) -> str:
        """A Sigstore bundle (v0.3) of ``payload`` signed in a DSSE envelope by a fresh key certified for
        ``identity``, its entry logged at ``logged_at`` (the time the log records and signs)."""
        key = ec.generate_private_key(ec.SECP256R1())
        cert = self.certificate(key.public_key(), identity, issuer, valid_from, valid_to)
        kind = payload_type.encode()
        sig = _ecdsa(key, b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload))
        envelope = {"payload": _b64(payload), "payloadType": payload_type, "signatures": [{"sig": _b64(sig)}]}
        pem = cert.public_bytes(serialization.Encoding.PEM)
        canonical = dsse_body(payload, json.dumps(envelope), [_b64(sig)], pem)
        log_id = self.log_id
        leaf = hashlib.sha256(b"\x00" + canonical).digest()  # a one-entry tree: the root is the leaf
        checkpoint = self.checkpoint(1, leaf)
        when = int(logged_at.timestamp())
        entry = {
            "logIndex": "0",
            "logId": {"keyId": _b64(log_id)},
            "kindVersion": {"kind": "dsse", "version": "0.0.1"},
            "integratedTime": str(when),
            "canonicalizedBody": _b64(canonical),
            "inclusionPromise": {"signedEntryTimestamp": _b64(self.entry_timestamp(canonical, when, 0))},
            "inclusionProof": {
                "logIndex": "0",
                "rootHash": _b64(leaf),
                "treeSize": "1",
                "hashes": [],
                "checkpoint": {"envelope": checkpoint},
            },
        }
        return json.dumps(
            {
                "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
                "verificationMaterial": {
                    "certificate": {"rawBytes": _b64(cert.public_bytes(serialization.Encoding.DER))},
                    "tlogEntries": [entry],
                },
                "dsseEnvelope": envelope,
            }
        )
