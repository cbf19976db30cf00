"""``gpuemu verify``: check an attestation's signature, every subject's digest and the config it names, and
say exactly what that proves (who signed, which commit and config, and when, as the signer's claim)."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...config.model import Config
from ...errors import UsageError
from ...report.libraries import shown
from ...safe_read import read_text
from . import AttestFailed, dsse, statement
from .keyless import BUNDLE_SUFFIX, KeylessPolicy, verify_bundle
from .keys import PublicKey
from .sign import SUFFIX

#: an envelope holds one results document: far below this
MAX_ENVELOPE_BYTES = 256 << 20


@dataclass
class Verified:
    """What a passing verification established."""

    envelope: Path
    signer: str  # "key sha256:..." or the keyless certificate's identity and issuer
    subjects: list[tuple[str, str]]
    document: dict[str, Any]
    config: list[str] = field(default_factory=list)  # how the recorded config compares with this workspace's
    keyid: str | None = None
    times: list[tuple[str, datetime.datetime]] = field(default_factory=list)  # verified: (what backs it, when)

    @property
    def provenance(self) -> dict[str, Any]:
        prov = self.document.get("provenance")
        return prov if isinstance(prov, dict) else {}


#: who must have signed: a public key, or a keyless identity under a trusted root
Signer = PublicKey | KeylessPolicy


def envelope_of(report: Path, suffix: str = SUFFIX) -> Path:
    """The attestation a path names: itself (``R.intoto.jsonl``, ``R.sigstore.json``), or the one with
    ``suffix`` beside a report file."""
    named = report.name.endswith((SUFFIX, BUNDLE_SUFFIX))
    found = report if named else report.with_name(report.stem + suffix)
    if not found.is_file():
        raise UsageError(f"{found}: no such attestation (gpuemu attest writes it beside the report)")
    return found


def _signed_by(env: dsse.Envelope, key: PublicKey) -> str:
    """The keyid of the signature ``key`` verifies; AttestFailed saying why none does."""
    signed = dsse.pae(env.payload_type, env.payload)
    for sig in env.signatures:
        if key.check(signed, dsse.signature_bytes(sig)):
            return key.keyid
    ids = sorted({s["keyid"] for s in env.signatures if s["keyid"]})
    if key.keyid in ids:
        raise AttestFailed(f"the signature by {key.keyid} does not verify: the attestation was altered after signing")
    named = ", ".join(ids) or "an unnamed key"
    raise AttestFailed(f"not signed by this key: signed by {named}; --key {key.path.name} is {key.keyid}")


def _check_subjects(folder: Path, st: statement.Statement) -> None:
    holds_predicate = False
    for name, digest in st.subjects:
        path = folder / name
        if not path.is_file():
            raise AttestFailed(f"{name}, signed by this attestation, is missing from {folder}")
        data = statement.read_subject(path)
        got = statement.sha256(data)
        if got != digest:
            raise AttestFailed(f"{name} was changed after signing (sha256 {got[:16]}..., signed {digest[:16]}...)")
        holds_predicate = holds_predicate or statement.results_document(data) == st.predicate
    if not holds_predicate:
        raise AttestFailed("no signed file holds the signed results document: the statement does not match its report")


def compare_config(doc: dict[str, Any], config: Config) -> list[str]:
    """How the report's recorded config compares with ``config``: lines when it matches or was not recorded;
    AttestFailed when the report was made under another gpuemu.toml or other resolved settings."""
    prov = doc.get("provenance") if isinstance(doc.get("provenance"), dict) else {}
    recorded_toml, recorded_cfg = prov.get("toml_sha256"), prov.get("config_sha256")
    if not recorded_toml and not recorded_cfg:
        return [f"config: not recorded in the report, not compared with {config.path}"]
    from ...report.provenance import canonical_json, config_settings  # the hashes exactly as they were recorded

    try:
        here_toml = statement.sha256(config.path.read_bytes())
    except OSError as exc:
        raise UsageError(f"cannot read {config.path}: {exc.strerror or exc}") from None
    if recorded_toml and recorded_toml != here_toml:
        raise AttestFailed(
            f"the report is from another config: its gpuemu.toml had sha256 {recorded_toml[:16]}..., "
            f"{config.path} has {here_toml[:16]}..."
        )
    here_cfg = statement.sha256(canonical_json(config_settings(config)))
    if recorded_cfg and recorded_cfg != here_cfg:
        if not recorded_toml:  # the resolved settings are all the report says of its config
            raise AttestFailed(
                f"the report is from another config: its resolved settings hash {recorded_cfg[:16]}..., "
                f"{config.path} resolves to {here_cfg[:16]}..."
            )
        # the same gpuemu.toml read over other user defaults (~/.config/gpuemu) or by another gpuemu version
        return [
            f"config: the same gpuemu.toml as {config.path}; its resolved settings differ here "
            f"({here_cfg[:16]}..., recorded {recorded_cfg[:16]}...: user defaults or the gpuemu version)"
        ]
    return [f"config: matches {config.path} (gpuemu.toml and resolved settings)"]


def verify(report: Path, signer: Signer, config: Config | None = None) -> Verified:
    """Verify the attestation of ``report`` as signed by ``signer`` (and against ``config`` in a workspace)."""
    keyless = isinstance(signer, KeylessPolicy)
    path = envelope_of(report, BUNDLE_SUFFIX if keyless else SUFFIX)
    try:
        text = read_text(path, limit=MAX_ENVELOPE_BYTES, errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    if isinstance(signer, KeylessPolicy):
        if path.name.endswith(SUFFIX):
            raise UsageError(f"{path.name} is signed with a key: verify it with --key PUB, not --identity")
        got = verify_bundle(text, signer)
        payload, who, keyid, times = got.payload, f"{got.identity} (issuer {got.issuer})", None, got.times
    else:
        if path.name.endswith(BUNDLE_SUFFIX):
            raise UsageError(f"{path.name} is a keyless Sigstore bundle: verify it with --identity ID, not --key")
        env = dsse.parse(text)
        keyid = _signed_by(env, signer)
        payload, who, times = env.payload, f"key {keyid}", []
    st = statement.parse(payload)
    _check_subjects(path.resolve().parent, st)
    done = Verified(path, who, st.subjects, st.predicate, keyid=keyid, times=times)
    if config is not None:
        done.config = compare_config(st.predicate, config)
    return done


def _date(value: Any) -> str | None:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, (int, float)):
        return datetime.datetime.fromtimestamp(value, datetime.timezone.utc).isoformat(timespec="seconds")
    return None


def describe(v: Verified) -> list[str]:
    """What the verification proves, one fact a line, each saying where it comes from."""
    prov, doc = v.provenance, v.document
    git = prov.get("git") if isinstance(prov.get("git"), dict) else None
    if git and git.get("commit"):
        commit = str(git["commit"])
        if git.get("dirty"):
            commit += f" with uncommitted changes (diff sha256 {str(git.get('diff_sha256') or '?')[:16]}...)"
        else:
            commit += " (clean tree)"
    else:
        commit = "not recorded" if not prov else "not recorded (not a git checkout)"
    of = {"run": "when the run ended", "report": "when the report was built from the store"}.get(prov.get("of"))
    claimed = _date(prov.get("date")) or _date(doc.get("created_at")) or "not recorded"
    if v.keyid:
        who = f"signed by: key {v.keyid} (the holder of the private key; no identity beyond it)"
    else:
        who = f"signed by: {v.signer}, a Sigstore certificate checked against the trusted root"
    when = [
        f"when: {t.isoformat(timespec='seconds')} (recorded by {src}: the signature existed then)" for src, t in v.times
    ]
    when.append(
        f"report date: {claimed} (the signer's claim)"
        if v.times
        else f"when: {claimed} (the signer's claim: no timestamp authority or transparency log backs it)"
    )
    summary = doc.get("summary") or {}
    lines = [
        who,
        "subjects: " + ", ".join(f"{n} sha256 {d[:16]}..." for n, d in v.subjects) + " (every digest matches)",
        f"results: {doc.get('status')} ({summary.get('ops', 0)} ops, {summary.get('kernels', 0)} kernels), "
        f"exit code {doc.get('exit_code')}, gpuemu-ls {(doc.get('tool') or {}).get('version', '?')}",
        f"commit: {commit}",
        f"config: gpuemu.toml sha256 {_short(prov.get('toml_sha256'))}, "
        f"resolved settings sha256 {_short(prov.get('config_sha256'))}",
        *v.config,
        f"libraries: {shown(prov.get('libraries')) or 'not recorded (a report made before gpuemu recorded them)'}",
        *when,
    ]
    if of:
        lines.append(f"provenance: recorded {of}")
    return lines


def _short(value: Any) -> str:
    return f"{value[:16]}..." if isinstance(value, str) and value else "not recorded"


def to_dict(v: Verified) -> dict[str, Any]:
    return {
        "schema": 1,
        "verified": True,
        "attestation": str(v.envelope),
        "signer": v.signer,
        "keyid": v.keyid,
        "subjects": [{"name": n, "sha256": d} for n, d in v.subjects],
        "status": v.document.get("status"),
        "provenance": json.loads(json.dumps(v.provenance)),
        "when_backed_by": [{"by": src, "time": t.isoformat()} for src, t in v.times] or None,
        "config": v.config,
        "facts": describe(v),
    }


__all__ = ["Signer", "Verified", "compare_config", "describe", "envelope_of", "to_dict", "verify"]
