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
from .keys import SigningKey

SUFFIX = ".intoto.jsonl"


@dataclass(frozen=True)
class Signed:
    path: Path
    keyid: str
    subjects: list[dict[str, object]]


def envelope_path(files: list[Path], output: str | None) -> Path:
    """``--output``, else ``<stem>.intoto.jsonl`` of the results JSON's stem; always in the report's folder,
    where a verifier looks for the files the attestation names."""
    folders = {f.resolve().parent for f in files}
    if len(folders) != 1:
        raise UsageError("the report files must lie in one folder: the attestation names them by file name")
    folder = folders.pop()
    if output:
        out = Path(output).expanduser()
        if out.resolve().parent != folder:
            raise UsageError(f"--output must be in {folder}, beside the report files it names")
        if not out.name.endswith(SUFFIX):
            raise UsageError(f"--output {output}: an attestation file ends in {SUFFIX}")
        return out
    stem = next((f for f in files if f.suffix == ".json"), files[0]).stem
    return folder / f"{stem}{SUFFIX}"


def attest(files: list[Path], key: SigningKey, output: str | None = None) -> Signed:
    """Sign the statement over ``files`` and write its envelope atomically (a failed write leaves none)."""
    if not files:
        raise UsageError("no report files given")
    out = envelope_path(files, output)
    if out.resolve() in {f.resolve() for f in files}:
        raise UsageError(f"{out} is one of the report files")
    body = statement.build(files)
    payload = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    sig = base64.b64encode(key.sign(pae(PAYLOAD_TYPE, payload))).decode()
    env = Envelope(PAYLOAD_TYPE, payload, [{"keyid": key.keyid, "sig": sig}])
    try:
        replace_file(out, env.to_json() + "\n")
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    return Signed(out, key.keyid, body["subject"])


__all__ = ["SUFFIX", "Signed", "attest", "envelope_path"]
