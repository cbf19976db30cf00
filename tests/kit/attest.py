"""Signing keys made with ``cryptography`` (real keys, written outside any workspace), report files built from a
workspace (its stored results, or a document with no run) and signed in process, for the attest/verify suites;
the suites run ``gpuemu attest`` and ``gpuemu verify`` themselves where the command is under test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: a stand-in HTML report until a test renders the real one (any bytes are a subject)
HTML = "<!doctype html><title>gpuemu report</title><p>stand-in</p>\n"


def write_keypair(
    folder: Path, kind: str = "ed25519", name: str = "signing", passphrase: bytes | None = None
) -> tuple[Path, Path]:
    """A private key (PKCS#8 PEM) and its public half (SubjectPublicKeyInfo PEM) in ``folder``: (private, public)."""
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    if kind == "ed25519":
        key = ed25519.Ed25519PrivateKey.generate()
    elif kind == "p256":
        key = ec.generate_private_key(ec.SECP256R1())
    elif kind == "p384":
        key = ec.generate_private_key(ec.SECP384R1())
    else:
        key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    folder.mkdir(parents=True, exist_ok=True)
    enc = ser.BestAvailableEncryption(passphrase) if passphrase else ser.NoEncryption()
    private, public = folder / f"{name}.pem", folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, enc))
    public.write_bytes(key.public_key().public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def stored_report(workspace: Path, folder: Path, stem: str = "R", *, html: bool = False) -> list[Path]:
    """What ``gpuemu report --format json`` (and ``--format html`` with ``html``, else a stand-in page) writes of
    the workspace's stored results, built in this process by the same builder and renderer."""
    from gpuemu_ls.engine.config.load import load_config
    from gpuemu_ls.engine.report.results import document_from_store
    from gpuemu_ls.engine.store.db import Store

    cfg = load_config(workspace)
    return _write(document_from_store(cfg, Store.for_workspace(cfg.root, readonly=True)), folder, stem, html)


def built_report(workspace: Path, folder: Path, stem: str = "R") -> list[Path]:
    """A results document of the workspace with no run (the real builder, provenance and all) and a stand-in
    HTML in ``folder``: report files to sign where no run is needed."""
    from gpuemu_ls.engine.config.load import load_config
    from gpuemu_ls.engine.report.results import build_document

    return _write(build_document(load_config(workspace), None), folder, stem, html=False)


def _write(doc: dict[str, Any], folder: Path, stem: str, html: bool) -> list[Path]:
    from gpuemu_ls.engine.report.formats import render
    from gpuemu_ls.engine.report.results import dumps

    folder.mkdir(parents=True, exist_ok=True)
    json_path, html_path = folder / f"{stem}.json", folder / f"{stem}.html"
    json_path.write_text(dumps(doc), encoding="utf-8")
    html_path.write_text(render(doc, "html") if html else HTML, encoding="utf-8")
    return [html_path, json_path]


def sign(files: list[Path], key: Path) -> Path:
    """``files`` signed in this process with the private key file ``key``; the attestation's path."""
    from gpuemu_ls.engine.tools.attest.keys import load_signing_key
    from gpuemu_ls.engine.tools.attest.sign import attest as attest_files

    return attest_files(files, load_signing_key(str(key))).path
