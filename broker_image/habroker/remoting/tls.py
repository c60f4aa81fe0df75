"""TLS for the remoting protocol: RocketMQ's three server modes and the contexts both ends use.

RocketMQ (``TlsSystemConfig``) lets a server run ``disabled`` (plain only), ``permissive``
(each connection chooses: one whose first byte is 0x16, a TLS handshake record, gets TLS; any
other is plain) or ``enforcing`` (TLS only); a client either speaks TLS from its first byte or
not at all. The contexts are built once, when a server or client starts: certificates changed on
disk take effect at the next start.
"""

from __future__ import annotations

import ssl
from enum import StrEnum

#: the first byte of a TLS record carrying a handshake (a ClientHello starts every connection)
TLS_HANDSHAKE_RECORD = 0x16


class TlsMode(StrEnum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


class ClientAuth(StrEnum):
    """``tls.server.need.client.auth``: whether a client must show a certificate."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"


class TlsSetupError(ValueError):
    """A certificate, key or CA file that cannot be used; the message names the file."""


def server_context(
    cert_path: str,
    key_path: str,
    *,
    key_password: str | None = None,
    client_auth: ClientAuth = ClientAuth.NONE,
    trust_cert_path: str | None = None,
) -> ssl.SSLContext:
    """The server side: our certificate chain (PEM) and key; with ``client_auth`` other than
    NONE, client certificates are checked against ``trust_cert_path`` (PEM CA certificates)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_path, key_path, password=key_password or None)
    except (OSError, ssl.SSLError) as exc:
        raise TlsSetupError(
            f"cannot load the certificate {cert_path} with the key {key_path}: {exc}"
        ) from None
    if client_auth is not ClientAuth.NONE:
        if not trust_cert_path:
            raise TlsSetupError(f"client auth {client_auth.value} needs trusted CA certificates")
        _load_ca(context, trust_cert_path)
        context.verify_mode = (
            ssl.CERT_REQUIRED if client_auth is ClientAuth.REQUIRE else ssl.CERT_OPTIONAL
        )
    return context


def client_context(
    *,
    ca_path: str | None = None,
    verify: bool = True,
    check_hostname: bool = False,
    cert_path: str | None = None,
    key_path: str | None = None,
    key_password: str | None = None,
) -> ssl.SSLContext:
    """The client side. ``verify``: the server's chain must lead to ``ca_path`` (PEM; the
    system's CAs when None). ``check_hostname`` is off by default, as in RocketMQ's Java client:
    routes name brokers by IP address, which certificates rarely list. ``verify=False`` is
    RocketMQ's ``tls.test.mode.enable``: encrypted, but any server is believed."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if verify:
        context.check_hostname = check_hostname
        context.verify_mode = ssl.CERT_REQUIRED
        if ca_path:
            _load_ca(context, ca_path)
        else:
            context.load_default_certs()
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_path:
        try:
            context.load_cert_chain(cert_path, key_path or None, password=key_password or None)
        except (OSError, ssl.SSLError) as exc:
            raise TlsSetupError(f"cannot load the client certificate {cert_path}: {exc}") from None
    return context


def _load_ca(context: ssl.SSLContext, path: str) -> None:
    try:
        context.load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError) as exc:
        raise TlsSetupError(f"cannot load CA certificates from {path}: {exc}") from None
