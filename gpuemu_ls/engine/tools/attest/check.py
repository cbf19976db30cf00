"""One ``gpuemu verify``: the attestation checked, then (``--replay``, once the caller's trust is given) its
cases replayed; the lines that say what this proves and the exit code, for any face to print."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...._version import __version__
from ...config.load import load_config
from ...errors import UsageError
from . import replay as replaying
from .keyless import GITHUB_ISSUER, KeylessPolicy
from .keys import load_public_key
from .verify import Signer, Verified, describe, to_dict, verify


@dataclass
class Outcome:
    verified: Verified
    replay: replaying.Replay | None
    lines: list[str]

    @property
    def exit_code(self) -> int:
        return 0 if self.replay is None or self.replay.passed else 1

    def to_dict(self) -> dict[str, Any]:
        out = to_dict(self.verified)
        out["replay"] = replaying.to_dict(self.replay) if self.replay else None
        out["exit_code"] = self.exit_code
        return out


def trust_question(commit: str, repo: Path, ops: list[str]) -> str:
    shown = ", ".join(ops[:8]) + (f" and {len(ops) - 8} more" if len(ops) > 8 else "")
    return (
        f"--replay runs the code of commit {commit[:12]} of {repo} on this machine (ops {shown}), "
        "code from whoever made that commit. Run it only if you trust it. Run it?"
    )


def signer_of(key: str | None, identity: str | None, issuer: str | None, trusted_root: str | None) -> Signer:
    """Who must have signed: the public key file ``key``, or the keyless ``identity`` (``issuer``, GitHub
    Actions' by default) under ``trusted_root`` (sigstore's shipped root by default)."""
    if key:
        if trusted_root or issuer:
            raise UsageError("--issuer and --trusted-root are for keyless signatures (--identity), not --key")
        return load_public_key(key)
    if not identity:
        raise UsageError("give --key PUB (a key's signature) or --identity ID (a keyless one)")
    root = Path(trusted_root).expanduser() if trusted_root else None
    return KeylessPolicy(identity, issuer or GITHUB_ISSUER, root)


def check(
    report: Path, signer: Signer, workspace: Path | None, *, replay: bool, confirm: Callable[[str], bool]
) -> Outcome:
    """Verify ``report`` as signed by ``signer``. Without ``replay`` the workspace (when there is one) must hold
    the config the report records; with it, the recorded commit's config must, and ``confirm`` is asked before
    any of its code runs."""
    config = load_config(workspace) if workspace is not None and not replay else None
    done = verify(report, signer, config)
    lines = ["VERIFIED: the signature and every digest check out", *describe(done)]
    if not replay:
        return Outcome(done, None, lines)
    if workspace is None:
        raise UsageError("--replay needs the workspace the report is from: run it there or pass -C")
    repo, folder = replaying.repository(workspace)
    commit = str(((done.provenance.get("git") or {}) if done.provenance else {}).get("commit") or "")
    ops = [str(e.get("name")) for e in done.document.get("ops") or []]
    if commit and not confirm(trust_question(commit, repo, ops)):
        raise UsageError("not replayed: the commit's code was not trusted (--yes trusts it)")
    rep = replaying.replay(done.document, repo, folder)
    recorded = (done.document.get("tool") or {}).get("version")
    return Outcome(done, rep, lines + replaying.describe(rep, __version__, recorded))


__all__ = ["Outcome", "check", "signer_of", "trust_question"]
