"""DSSE envelopes (https://github.com/secure-systems-lab/dsse, v1): the signature covers the payload type
and the payload through the pre-authentication encoding, so neither can be swapped after signing."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from . import AttestFailed

PAYLOAD_TYPE = "application/vnd.in-toto+json"


def pae(payload_type: str, payload: bytes) -> bytes:
    """``DSSEv1 SP LEN(type) SP type SP LEN(body) SP body``: what is signed."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


@dataclass(frozen=True)
class Envelope:
    payload_type: str
    payload: bytes
    signatures: list[dict[str, str]]

    def to_json(self) -> str:
        """One line (the ``.intoto.jsonl`` form: one envelope a line)."""
        return json.dumps(
            {
                "payloadType": self.payload_type,
                "payload": base64.b64encode(self.payload).decode(),
                "signatures": self.signatures,
            },
            separators=(",", ":"),
        )


def _b64(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise AttestFailed(f"not a DSSE envelope: {what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise AttestFailed(f"not a DSSE envelope: {what} is not valid base64") from None


def parse(text: str) -> Envelope:
    """The envelope of an ``.intoto.jsonl`` file (its one non-empty line); AttestFailed when it is not one."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) != 1:
        raise AttestFailed(f"not a gpuemu attestation: expected one DSSE envelope line, found {len(lines)}")
    try:
        raw = json.loads(lines[0])
    except json.JSONDecodeError as exc:
        raise AttestFailed(f"not a DSSE envelope: not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("signatures"), list) or not raw["signatures"]:
        raise AttestFailed("not a DSSE envelope: no signatures")
    sigs = []
    for s in raw["signatures"]:
        if not isinstance(s, dict) or not isinstance(s.get("sig"), str):
            raise AttestFailed("not a DSSE envelope: a signature without 'sig'")
        sigs.append({"keyid": str(s.get("keyid") or ""), "sig": s["sig"]})
    kind = raw.get("payloadType")
    if kind != PAYLOAD_TYPE:
        raise AttestFailed(f"payloadType {kind!r} is not {PAYLOAD_TYPE!r}: not an in-toto attestation")
    return Envelope(kind, _b64(raw.get("payload"), "payload"), sigs)


def signature_bytes(sig: dict[str, str]) -> bytes:
    return _b64(sig["sig"], "a signature")


__all__ = ["PAYLOAD_TYPE", "Envelope", "pae", "parse", "signature_bytes"]
