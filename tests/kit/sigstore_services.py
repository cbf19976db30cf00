"""Sigstore's signing services for a Sigstore instance of the tests' own (kit.sigstore_instance), served over
HTTP on localhost: GitHub Actions' OIDC token endpoint (tokens the tests' issuer key signs), Fulcio
(``/api/v2/signingCert``: checks the token's signature, audience and expiry and the request's proof of
possession, then certifies the key for the token's workflow identity with an embedded SCT) and Rekor v1
(``/api/v1/log/entries``: checks the DSSE signature against the certificate, appends the entry to an RFC 6962
tree and answers with its inclusion proof, checkpoint and signed entry timestamp). sigstore's real client signs
against them as it would against the real services in a CI job: ``gpuemu attest --keyless --trust-config``
with :meth:`Services.ci_env`. Nothing of gpuemu or sigstore is patched."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
import urllib.parse
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from .sigstore_instance import ISSUER, Instance, dsse_body

#: the workflow a minted token names, and the certificate identity Fulcio makes of it
WORKFLOW_REF = "acme/kernels/.github/workflows/release.yml@refs/tags/v1.0.0"
SIGNER = f"https://github.com/{WORKFLOW_REF}"
REQUEST_TOKEN = "gpuemu-tests-request-token"


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _root(leaves: list[bytes]) -> bytes:
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)  # the largest power of two below the size (RFC 6962 2.1)
    return _node(_root(leaves[:k]), _root(leaves[k:]))


def _path(index: int, leaves: list[bytes]) -> list[bytes]:
    """The audit path of leaf ``index`` (RFC 6962 2.1.1), leaf side first."""
    if len(leaves) == 1:
        return []
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    if index < k:
        return [*_path(index, leaves[:k]), _root(leaves[k:])]
    return [*_path(index - k, leaves[k:]), _root(leaves[:k])]


class Services:
    """The services of ``instance`` (one made around now) on ``127.0.0.1``; a context manager."""

    def __init__(self, instance: Instance | None = None) -> None:
        self.instance = instance or Instance(around=datetime.now(timezone.utc))
        self.oidc_key = ec.generate_private_key(ec.SECP256R1())
        self.leaves: list[bytes] = []  # the log's leaf hashes
        self.lock = threading.Lock()
        self.requests: list[str] = []  # "GET /token", ...: what the client asked, in order
        services = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet: the tests read what they assert
                pass

            def do_GET(self) -> None:
                self._answer(services.get)

            def do_POST(self) -> None:
                self._answer(services.post)

            def _answer(self, how: Any) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                services.requests.append(f"{self.command} {self.path.split('?')[0]}")
                try:
                    status, answer = how(self.path, dict(self.headers), body)
                except Refused as exc:
                    status, answer = exc.status, {"code": exc.status, "message": str(exc)}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        for n in range(4):  # an entry among others: its inclusion proof has a path to check
            self.leaves.append(hashlib.sha256(b"\x00" + f"earlier entry {n}".encode()).digest())

    def __enter__(self) -> Services:
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def ci_env(self) -> dict[str, str]:
        """What a GitHub Actions job with ``id-token: write`` has, its token endpoint this one."""
        return {
            "GITHUB_ACTIONS": "true",
            "ACTIONS_ID_TOKEN_REQUEST_URL": f"{self.url}/token?api-version=2.0",
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN": REQUEST_TOKEN,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }

    def trust_config(self) -> str:
        """The client trust config naming these services (``gpuemu attest --trust-config``)."""
        service = {"url": self.url, "majorApiVersion": 1, "validFor": {"start": "2020-01-01T00:00:00Z"}}
        service["operator"] = "gpuemu-tests"
        return json.dumps(
            {
                "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
                "trustedRoot": json.loads(self.instance.trusted_root()),
                "signingConfig": {
                    "mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json",
                    "caUrls": [service],
                    "oidcUrls": [],
                    "rekorTlogUrls": [service],
                    "tsaUrls": [],
                    "rekorTlogConfig": {"selector": "ANY"},
                    "tsaConfig": {"selector": "ANY"},
                },
            }
        )

    # --- GitHub Actions' token endpoint --------------------------------------------------------

    def token(self, audience: str, *, lifetime: int = 300) -> str:
        import jwt

        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "aud": audience,
            "sub": "repo:acme/kernels:ref:refs/tags/v1.0.0",
            "job_workflow_ref": WORKFLOW_REF,
            "iat": now,
            "nbf": now,
            "exp": now + lifetime,
        }
        return str(jwt.encode(claims, self.oidc_key, algorithm="ES256"))

    def get(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        url = urllib.parse.urlsplit(path)
        if url.path != "/token":
            raise Refused(404, f"no {url.path}")
        if headers.get("Authorization", "").lower() != f"bearer {REQUEST_TOKEN}":
            raise Refused(401, "bad request token")
        audience = urllib.parse.parse_qs(url.query).get("audience", [""])[0]
        return 200, {"value": self.token(audience)}

    def post(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        if path == "/api/v2/signingCert":
            return 200, self.fulcio(headers, json.loads(body))
        if path == "/api/v1/log/entries":
            return 201, self.rekor(json.loads(body))
        raise Refused(404, f"no {path}")

    # --- Fulcio --------------------------------------------------------------------------------

    def fulcio(self, headers: dict[str, str], request: dict[str, Any]) -> dict[str, Any]:
        import jwt

        auth = headers.get("Authorization", "")
        try:
            claims = jwt.decode(
                auth.removeprefix("Bearer "),
                self.oidc_key.public_key(),
                algorithms=["ES256"],
                audience="sigstore",
                issuer=ISSUER,
            )
        except jwt.PyJWTError as exc:
            raise Refused(401, f"identity token refused: {exc}") from None
        csr = x509.load_pem_x509_csr(base64.b64decode(request["certificateSigningRequest"]))
        if not csr.is_signature_valid:
            raise Refused(400, "the request's proof of possession does not verify")
        now = datetime.now(timezone.utc)
        identity = f"https://github.com/{claims['job_workflow_ref']}"
        cert = self.instance.certificate(
            csr.public_key(), identity, claims["iss"], now - timedelta(seconds=30), now + timedelta(minutes=10)
        )
        pems = [c.public_bytes(serialization.Encoding.PEM).decode() for c in (cert, self.instance.ca)]
        return {"signedCertificateEmbeddedSct": {"chain": {"certificates": pems}}}

    # --- Rekor v1 ------------------------------------------------------------------------------

    def rekor(self, proposed: dict[str, Any]) -> dict[str, Any]:
        if proposed.get("kind") != "dsse":
            raise Refused(400, f"this log takes dsse entries, not {proposed.get('kind')}")
        content = proposed["spec"]["proposedContent"]
        envelope_text: str = content["envelope"]
        envelope = json.loads(envelope_text)
        pem = base64.b64decode(content["verifiers"][0])
        key = x509.load_pem_x509_certificate(pem).public_key()
        payload = base64.b64decode(envelope["payload"])
        kind = envelope["payloadType"].encode()
        pae = b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)
        sigs = [s["sig"] for s in envelope["signatures"]]
        try:
            for sig in sigs:
                key.verify(base64.b64decode(sig), pae, ec.ECDSA(hashes.SHA256()))  # type: ignore[union-attr]
        except InvalidSignature:
            raise Refused(400, "the envelope's signature does not verify with its certificate") from None
        canonical = dsse_body(payload, envelope_text, sigs, pem)
        leaf = hashlib.sha256(b"\x00" + canonical).digest()
        with self.lock:
            self.leaves.append(leaf)
            index, leaves = len(self.leaves) - 1, list(self.leaves)
        when = int(time.time())
        root = _root(leaves)
        entry = {
            "body": base64.b64encode(canonical).decode(),
            "integratedTime": when,
            "logID": self.instance.log_id.hex(),
            "logIndex": index,
            "verification": {
                "inclusionProof": {
                    "checkpoint": self.instance.checkpoint(len(leaves), root),
                    "hashes": [h.hex() for h in _path(index, leaves)],
                    "logIndex": index,
                    "rootHash": root.hex(),
                    "treeSize": len(leaves),
                },
                "signedEntryTimestamp": base64.b64encode(
                    self.instance.entry_timestamp(canonical, when, index)
                ).decode(),
            },
        }
        return {leaf.hex(): entry}


__all__ = ["REQUEST_TOKEN", "SIGNER", "WORKFLOW_REF", "Services"]
