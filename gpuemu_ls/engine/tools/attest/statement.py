"""The in-toto Statement (v1) a report's signature covers: the report files as subjects by sha256, the
results document (the JSON report) as predicate, so a verifier reads what was claimed from what was signed."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import UsageError
from ...safe_read import read_bytes
from . import AttestFailed

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "urn:gpuemu-ls:attestation:results:v1"
#: a report file is read whole to be hashed: far above any results document or HTML report
MAX_SUBJECT_BYTES = 256 << 20
_DOC_KEYS = {"schema", "ops", "kernels", "summary", "exit_code"}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def results_document(data: bytes) -> dict[str, Any] | None:
    """The results document these bytes hold (``gpuemu report --format json``), else None."""
    try:
        doc = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) and set(doc) >= _DOC_KEYS else None


def read_subject(path: Path, what: str = "report file") -> bytes:
    try:
        return read_bytes(path, limit=MAX_SUBJECT_BYTES)
    except FileNotFoundError:
        raise UsageError(f"{what} {path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None


def build(files: list[Path]) -> dict[str, Any]:
    """The statement over ``files``: one of them must be a results document (it becomes the predicate);
    subjects are named by file name, so the report travels as one folder."""
    subjects, predicate, names = [], None, set()
    for f in files:
        if f.name in names:
            raise UsageError(f"two report files are named {f.name}: subjects are named by file name")
        names.add(f.name)
        data = read_subject(f)
        doc = results_document(data)
        if doc is not None:
            if predicate is not None:
                raise UsageError("more than one results document given: attest one report (one JSON) at a time")
            predicate = doc
        subjects.append({"name": f.name, "digest": {"sha256": sha256(data)}})
    if predicate is None:
        raise UsageError(
            "none of the files is a gpuemu results document: add the report's JSON "
            "(gpuemu report --format json --output R.json)"
        )
    return {"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": PREDICATE_TYPE, "predicate": predicate}


@dataclass(frozen=True)
class Statement:
    subjects: list[tuple[str, str]]  # (file name, sha256 hex)
    predicate: dict[str, Any]


def parse(payload: bytes) -> Statement:
    """The signed payload as a gpuemu statement; AttestFailed when it is another kind of statement."""
    try:
        raw = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise AttestFailed("the signed payload is not JSON") from None
    if not isinstance(raw, dict) or raw.get("_type") != STATEMENT_TYPE:
        raise AttestFailed(f"the signed payload is not an in-toto Statement ({STATEMENT_TYPE})")
    if raw.get("predicateType") != PREDICATE_TYPE:
        raise AttestFailed(f"predicateType {raw.get('predicateType')!r} is not a gpuemu report ({PREDICATE_TYPE})")
    listed = raw.get("subject")
    if not isinstance(listed, list):
        raise AttestFailed("the statement's subject is not a list")
    subjects = []
    for s in listed:
        digests = s.get("digest") if isinstance(s, dict) else None
        digest = digests.get("sha256") if isinstance(digests, dict) else None
        name = s.get("name") if isinstance(s, dict) else None
        plain = isinstance(name, str) and name not in ("", ".", "..") and not any(c in name for c in "/\\\0")
        if not plain or not isinstance(digest, str):
            raise AttestFailed("a subject without a plain file name and a sha256 digest")
        subjects.append((name, digest))
    if not subjects:
        raise AttestFailed("the statement names no subject")
    predicate = raw.get("predicate")
    if not isinstance(predicate, dict) or not set(predicate) >= _DOC_KEYS:
        raise AttestFailed("the predicate is not a gpuemu results document")
    return Statement(subjects, predicate)


__all__ = ["PREDICATE_TYPE", "STATEMENT_TYPE", "Statement", "build", "parse", "read_subject", "results_document"]
