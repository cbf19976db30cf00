"""``gpuemu attest``: sign report files with the user's key into ``<report>.intoto.jsonl`` beside them."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

from ...errors import UsageError
from ...replace_file import replace_file
from . import statement
from .dsse import PAYLOAD_TYPE, Envelope, pae
from .keyless import BUNDLE_SUFFIX, sign_keyless
from .keys import SigningKey

SUFFIX = ".intoto.jsonl"


@dataclass(frozen=True)
class Signed:
    path: Path
    signer: str  # the key id, or the keyless certificate
    subjects: list[dict[str, object]]


def envelope_path(files: list[Path], output: str | None, suffix: str = SUFFIX) -> Path:
    """``--output``, else ``<stem><suffix>`` of the results JSON's stem; always in the report's folder,
    where a verifier looks for the files the attestation names."""
    folders = {f.resolve().parent for f in files}
    if len(folders) != 1:
        raise UsageError("the report files must lie in one folder: the attestation names them by file name")
    folder = folders.pop()
    if output:
        out = Path(output).expanduser()
        if out.resolve().parent != folder:
            raise UsageError(f"--output must be in {folder}, beside the report files it names")
        if not out.name.endswith(suffix):
            raise UsageError(f"--output {output}: this attestation's file name ends in {suffix}")
        return out
    stem = next((f for f in files if f.suffix == ".json"), files[0]).stem
    return folder / f"{stem}{suffix}"


def attest(
    files: list[Path], key: SigningKey | None, output: str | None = None, trust_config: Path | None = None
) -> Signed:
    """Sign the statement over ``files`` with ``key`` (None: keyless, through Sigstore, the instance
    ``trust_config`` names or the public-good one) and write the envelope (``.intoto.jsonl``) or bundle
    (``.sigstore.json``) atomically: a failed write leaves none."""
    if not files:
        raise UsageError("no report files given")
    if trust_config is not None and key is not None:
        raise UsageError("--trust-config is for keyless signing (--keyless), not --key")
    out = envelope_path(files, output, SUFFIX if key is not None else BUNDLE_SUFFIX)
    if out.resolve() in {f.resolve() for f in files}:
        raise UsageError(f"{out} is one of the report files")
    body = statement.build(files)
    payload = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    if key is None:
        text, signer = sign_keyless(payload, trust_config), "a Sigstore certificate of this job's identity"
    else:
        sig = base64.b64encode(key.sign(pae(PAYLOAD_TYPE, payload))).decode()
        text = Envelope(PAYLOAD_TYPE, payload, [{"keyid": key.keyid, "sig": sig}]).to_json()
        signer = f"key {key.keyid}"
    try:
        replace_file(out, text + "\n")
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    return Signed(out, signer, body["subject"])


__all__ = ["SUFFIX", "Signed", "attest", "envelope_path"]
