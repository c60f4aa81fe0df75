"""The broker's TLS contexts from its ``tls.*`` keys (RocketMQ's TlsSystemConfig names).

``tls.server.*``: what the remoting listeners (listenPort, fastListenPort, externalListenPort)
present and ask for; ``tls.enable`` and ``tls.client.*``: how the broker's own remoting
connections to other brokers and name servers speak. Files are read when the broker starts:
renewed certificates take effect at the next start (docs/security.md).
"""

from __future__ import annotations

import logging
import ssl

from habroker.config import BrokerConfig, ConfigError
from habroker.remoting.tls import TlsMode, TlsSetupError, client_context, server_context

log = logging.getLogger(__name__)


def server_tls(config: BrokerConfig) -> ssl.SSLContext | None:
    """The listeners' context (None when ``tls.server.mode=disabled``); a file that cannot be
    used is a ConfigError naming it."""
    if config.tlsServerMode is TlsMode.DISABLED:
        return None
    try:
        context = server_context(
            config.tlsServerCertPath,
            config.tlsServerKeyPath,
            key_password=config.tlsServerKeyPassword or None,
            client_auth=config.tlsServerNeedClientAuth,
            trust_cert_path=config.tlsServerTrustCertPath or None,
        )
    except TlsSetupError as exc:
        raise ConfigError(f"tls.server.*: {exc}") from None
    log.info(
        "remoting listeners: tls.server.mode=%s, certificate %s, client auth %s",
        config.tlsServerMode.value,
        config.tlsServerCertPath,
        config.tlsServerNeedClientAuth.value,
    )
    return context


def client_tls(config: BrokerConfig) -> ssl.SSLContext | None:
    """The context of the broker's own remoting connections (None unless ``tls.enable``).

    As RocketMQ's TlsHelper: the server's certificate is checked (against
    ``tls.client.trustCertPath``, else the system's CAs) only when ``tls.test.mode.enable`` is
    false and ``tls.client.authServer`` true; ``tls.client.certPath``/``keyPath`` is shown to
    servers that ask for a client certificate.
    """
    if not config.tlsEnable:
        return None
    try:
        return client_context(
            ca_path=config.tlsClientTrustCertPath or None,
            verify=not config.tlsTestModeEnable and config.tlsClientAuthServer,
            cert_path=config.tlsClientCertPath or None,
            key_path=config.tlsClientKeyPath or None,
            key_password=config.tlsClientKeyPassword or None,
        )
    except TlsSetupError as exc:
        raise ConfigError(f"tls.client.*: {exc}") from None
