"""A key server (``purgectl keys serve``) run as its own process for a test, on a free port, with
its own directory and token; and a self-signed certificate for serving it over TLS."""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
import ssl
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from purgekeeper.storage.key_client import HttpKeyStore
from tests.helpers.served import BIN, START_S, clean_environment, free_port, stop

TOKEN = secrets.token_hex(32)


@dataclass(frozen=True)
class TlsFiles:
    keyfile: Path
    certfile: Path

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.certfile))


@dataclass(frozen=True)
class KeyServerProcess:
    url: str
    token: str
    directory: Path  # the key store's
    process: subprocess.Popen[bytes]
    log: Path

    def client(self, *, token: str | None = None, timeout: float = 10.0) -> HttpKeyStore:
        return HttpKeyStore(self.url, self.token if token is None else token, timeout=timeout)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def running_key_server(
    directory: Path,
    *flags: str,
    token: str = TOKEN,
    env: Mapping[str, str] | None = None,
    tls: TlsFiles | None = None,
) -> Iterator[KeyServerProcess]:
    """``purgectl keys serve`` on a free port with its store in ``directory/store``, once
    ``/healthz`` answers (200 or 503: a fault test's store may be failing on purpose); stopped
    (SIGTERM to its group) at the end."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = [str(BIN / "purgectl"), "keys", "serve", "--directory", str(directory / "store")]
    command += ["--port", str(port), *flags]
    if tls is not None:
        command += ["--ssl-keyfile", str(tls.keyfile), "--ssl-certfile", str(tls.certfile)]
    log = directory / f"key-server-{port}.log"
    with log.open("ab") as sink:
        process = subprocess.Popen(
            command,
            env=clean_environment(PURGEKEEPER_KEY_SERVER_TOKEN=token, **(env or {})),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    scheme = "http" if tls is None else "https"
    served = KeyServerProcess(f"{scheme}://127.0.0.1:{port}", token, directory / "store", process, log)
    try:
        _wait_answering(served, True if tls is None else tls.context())
        yield served
    finally:
        stop(process)


def _wait_answering(served: KeyServerProcess, verify: bool | ssl.SSLContext) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if served.process.poll() is not None:
            pytest.fail(f"purgectl keys serve exited with {served.process.returncode}:\n{served.output()}")
        try:
            httpx.get(f"{served.url}/healthz", timeout=1.0, verify=verify)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    pytest.fail(f"purgectl keys serve did not answer within {START_S} s:\n{served.output()}")


def self_signed(directory: Path, host: str = "127.0.0.1") -> TlsFiles:
    """A key and a certificate for ``host`` (an IP address), valid for a day either side of now."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    files = TlsFiles(directory / "server.key", directory / "server.pem")
    files.keyfile.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    files.keyfile.chmod(0o600)
    files.certfile.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return files
