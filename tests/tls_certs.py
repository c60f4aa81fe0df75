"""Test certificates made with the openssl command: a CA and certificates it signs.

EC P-256 keys (generated in milliseconds), valid for two days, with the extensions a strict
verifier wants (a CA with basicConstraints and keyCertSign; leaves with subjectAltName).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30)


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


@dataclass(frozen=True)
class CertAuthority:
    cert: Path
    key: Path

    @classmethod
    def create(cls, directory: Path, name: str = "test-ca") -> CertAuthority:
        directory.mkdir(parents=True, exist_ok=True)
        cert, key = directory / f"{name}.pem", directory / f"{name}.key"
        _openssl(
            "req", "-x509", *_KEY, "-keyout", str(key), "-out", str(cert), "-days", "2",
            "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip
        return cls(cert, key)

    def issue(
        self,
        directory: Path,
        name: str,
        *,
        ips: tuple[str, ...] = ("127.0.0.1",),
        client: bool = False,
        password: str | None = None,
    ) -> Issued:
        """A server (or, with ``client``, a client) certificate for ``ips``; with ``password``
        the key file is encrypted with it (AES-256)."""
        cert, key, csr = (directory / f"{name}{ext}" for ext in (".pem", ".key", ".csr"))
        ext = directory / f"{name}.ext"
        usage = "clientAuth" if client else "serverAuth"
        ext.write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature\n"
            f"extendedKeyUsage={usage}\n"
            f"subjectAltName={','.join(f'IP:{ip}' for ip in ips)}\n"
        )
        _openssl(
            "req", "-new", *_KEY, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}"
        )
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key),
            "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(ext),
        )  # fmt: skip
        if password is not None:
            encrypted = directory / f"{name}.enc.key"
            _openssl(
                "pkey", "-in", str(key), "-aes256", "-passout", f"pass:{password}",
                "-out", str(encrypted),
            )  # fmt: skip
            key = encrypted
        return Issued(cert, key)
