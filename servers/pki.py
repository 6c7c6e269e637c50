"""A fresh private CA and server certificate per run (openssl CLI, argument lists only).

Per run, so no client can have cached or pinned an earlier key, and a leaked key is worth
nothing after the run. ECDSA P-256 keeps handshakes small and cheap, as on the real web.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import os
import re
import secrets
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DAYS = 30


class PkiError(RuntimeError):
    """openssl failed; the message carries its stderr."""


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path  # ca.pem: what clients trust (--cacert)
    cert: Path  # server.pem
    key: Path  # server.key, mode 0600
    server_name: str
    server_ip: str
    spki_sha256: str  # base64 sha256 of the server's SubjectPublicKeyInfo (Chromium's SPKI list)
    ca_sha256: str  # hex sha256 of the CA certificate (DER), to tell runs' CAs apart


def _openssl(*args: str | Path) -> bytes:
    proc = subprocess.run(["openssl", *map(str, args)], capture_output=True, timeout=60)
    if proc.returncode != 0:
        raise PkiError(f"openssl {args[0]} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def _pem_body(pem: bytes, label: str) -> bytes:
    """The DER inside the first PEM block with this label."""
    text = pem.decode()
    begin, end = f"-----BEGIN {label}-----", f"-----END {label}-----"
    start = text.index(begin) + len(begin)
    return base64.b64decode("".join(text[start : text.index(end, start)].split()))


def spki_sha256(cert: Path) -> str:
    """Chromium's --ignore-certificate-errors-spki-list value for this certificate."""
    der = _pem_body(_openssl("x509", "-in", cert, "-pubkey", "-noout"), "PUBLIC KEY")
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


def cert_sha256(cert: Path) -> str:
    return hashlib.sha256(_pem_body(cert.read_bytes(), "CERTIFICATE")).hexdigest()


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


ORIGINS_DIR = "origins"  # a replayed page's certificates, one per origin
ORIGIN_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")  # workloads/har.py checks more
_P256 = ("-pkeyopt", "ec_paramgen_curve:P-256")  # every key of the run: the CA's, the servers'


def origin_files(pki_dir: Path, name: str) -> tuple[Path, Path]:
    """Where an origin's certificate and key are: origins/NAME.pem and origins/NAME.key."""
    return pki_dir / ORIGINS_DIR / f"{name}.pem", pki_dir / ORIGINS_DIR / f"{name}.key"


def _issue(ca: Path, ca_key: Path, name: str, sans: list[str], cert: Path, key: Path) -> None:
    """A P-256 key (0600) and its certificate for `name` with these SANs, signed by the CA."""
    csr, ext = cert.with_suffix(".csr"), cert.with_suffix(".ext")
    try:
        _write_private(key, _openssl("genpkey", "-algorithm", "EC", *_P256))
        _openssl("req", "-new", "-key", key, "-subj", f"/O=quicbed/CN={name}", "-out", csr)
        ext.write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature\n"
            "extendedKeyUsage=serverAuth\n"
            f"subjectAltName={','.join(sans)}\n"
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            csr,
            "-CA",
            ca,
            "-CAkey",
            ca_key,
            "-set_serial",
            str(secrets.randbits(63)),
            "-days",
            str(DAYS),
            "-extfile",
            ext,
            "-out",
            cert,
        )
    finally:
        csr.unlink(missing_ok=True)
        ext.unlink(missing_ok=True)


def generate_pki(
    out_dir: Path, server_ip: str, server_name: str = "server.quicbed", origins: Sequence[str] = ()
) -> Pki:
    """Write ca.pem, server.pem and server.key (0600) into out_dir; the CA key is discarded.

    SANs: server_name, localhost (ngtcp2 and others send SNI "localhost" for IP hosts),
    server_ip and 127.0.0.1 (checks from inside the server's own namespace, compose ports).
    `origins`: the host names of a replayed page (workloads/replay.py), each with a
    certificate of its own name only (`origins/NAME.pem`, `origins/NAME.key`), from the same
    CA in the same pass, so that two origins share a connection only where a client coalesces
    them as it would on the Internet.
    """
    ipaddress.ip_address(server_ip)  # fail early and clearly on a typo
    for name in origins:
        if not ORIGIN_NAME.fullmatch(name):
            raise PkiError(f"not a host name for a certificate: {name!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ca_key, ca = out_dir / "ca.key", out_dir / "ca.pem"
    cert, key = out_dir / "server.pem", out_dir / "server.key"
    tag = secrets.token_hex(4)  # distinguishes one run's CA from another's in a trust store
    try:
        _openssl(
            "req",
            "-x509",
            "-new",
            "-newkey",
            "ec",
            *_P256,
            "-nodes",
            "-keyout",
            ca_key,
            "-out",
            ca,
            "-days",
            str(DAYS),
            "-subj",
            f"/O=quicbed/CN=quicbed run CA {tag}",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        )
        os.chmod(ca_key, 0o600)
        sans = [f"DNS:{server_name}", "DNS:localhost", f"IP:{server_ip}"]
        if server_ip != "127.0.0.1":
            sans.append("IP:127.0.0.1")
        _issue(ca, ca_key, server_name, sans, cert, key)
        if origins:
            (out_dir / ORIGINS_DIR).mkdir(exist_ok=True)
        for name in dict.fromkeys(origins):
            pem, private = origin_files(out_dir, name)
            _issue(ca, ca_key, name, [f"DNS:{name}"], pem, private)
            pem.chmod(0o644)
    finally:
        # Without the CA key nobody, not even a later run, can mint certs this run's clients trust.
        ca_key.unlink(missing_ok=True)
    # Containers read the public parts as other users (nginx workers); the key stays 0600.
    ca.chmod(0o644)
    cert.chmod(0o644)
    return Pki(
        dir=out_dir,
        ca=ca,
        cert=cert,
        key=key,
        server_name=server_name,
        server_ip=server_ip,
        spki_sha256=spki_sha256(cert),
        ca_sha256=cert_sha256(ca),
    )
