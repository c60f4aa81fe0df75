"""TLS on the client port (``tls.server.*``): real ``habroker serve`` processes, certificates
made by openssl, the CLI and the Python client over real sockets.

The real Java client against the same broker is tests/interop/test_habroker_java_tls.py.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from habroker.client import MQAdmin, MQClientError
from habroker.config import BrokerConfig, ConfigError
from habroker.local import LocalBroker, LocalGroup
from habroker.remoting import RemotingCommand, RequestCode
from habroker.remoting.client import RemotingClient
from habroker.remoting.tls import client_context

from tests.tls_certs import CertAuthority, Issued

BrokerFactory = Callable[..., LocalBroker]


class Certs:
    def __init__(self, directory: Path) -> None:
        self.ca = CertAuthority.create(directory, "habroker-test-ca")
        self.server = self.ca.issue(directory, "server")
        self.client = self.ca.issue(directory, "client", client=True)
        self.other_ca = CertAuthority.create(directory, "other-ca")
        self.locked = self.ca.issue(directory, "locked", password="s3cret")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return Certs(tmp_path_factory.mktemp("certs"))


def tls_keys(mode: str, server: Issued, **more: str) -> dict[str, str]:
    return {
        "tls.server.mode": mode,
        "tls.server.certPath": str(server.cert),
        "tls.server.keyPath": str(server.key),
        **more,
    }


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "habroker", *args], capture_output=True, text=True, timeout=60
    )


def failed_in_one_line(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    return res.stderr


def plain_request_closed(address: str) -> bool:
    """A plain remoting request (what a client without TLS sends): True when the broker closes
    the connection without an answer."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO).encode_bytes())
        try:
            return sock.recv(65536) == b""
        except ConnectionResetError:
            return True


async def cluster_brokers(address: str, tls: ssl.SSLContext | None) -> list[str]:
    async with MQAdmin(address, tls=tls, timeout=5.0) as admin:
        info = await admin.cluster_info()
    return sorted(info.brokers)


# -- configuration ---------------------------------------------------------------------------


def test_tls_keys_use_rocketmq_names_and_default_to_disabled(certs: Certs) -> None:
    assert BrokerConfig().tlsServerMode.value == "disabled"
    keys = BrokerConfig.keys()
    for key in ("tls.server.mode", "tls.server.certPath", "tls.server.keyPath",
                "tls.server.keyPassword", "tls.server.need.client.auth",
                "tls.server.trustCertPath"):  # fmt: skip
        assert key in keys
    cfg = BrokerConfig.from_mapping(
        tls_keys("enforcing", certs.locked, **{"tls.server.keyPassword": "s3cret"})
    )
    assert cfg.tlsServerMode.value == "enforcing" and cfg.tlsServerKeyPath == str(certs.locked.key)
    props = cfg.to_properties()
    assert props["tls.server.mode"] == "enforcing"
    assert props["tls.server.keyPassword"] == "******"  # never shown by the config APIs
    assert cfg.to_properties(reveal_secrets=True)["tls.server.keyPassword"] == "s3cret"
    assert BrokerConfig.from_mapping(cfg.to_properties(reveal_secrets=True)) == cfg


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"tls.server.mode": "enforcing"}, "tls.server.certPath: required when tls.server.mode"),
        (
            {"tls.server.mode": "permissive", "tls.server.certPath": "/x.pem"},
            "tls.server.keyPath: required when tls.server.mode=permissive",
        ),
        ({"tls.server.mode": "strict"}, "one of disabled, permissive, enforcing"),
        ({"tls.server.need.client.auth": "require"}, "tls.server.trustCertPath: required"),
        ({"tls.server.need.client.auth": "maybe"}, "one of none, optional, require"),
        ({"tls.server.modes": "enforcing"}, "did you mean tls.server.mode?"),
    ],
)
def test_tls_config_mistakes_are_refused(values: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("?", r"\?")):
        BrokerConfig.from_mapping(values)


def test_a_certificate_that_cannot_be_loaded_stops_startup_in_one_line(
    certs: Certs, tmp_path: Path
) -> None:
    conf = tmp_path / "broker.conf"
    wrong_key = {**tls_keys("enforcing", certs.server), "tls.server.keyPath": str(certs.client.key)}
    for values, named in (
        ({**tls_keys("enforcing", certs.server), "tls.server.certPath": "/nonexistent.pem"},
         "/nonexistent.pem"),
        (wrong_key, str(certs.server.cert)),
        (tls_keys("enforcing", certs.locked), str(certs.locked.cert)),  # no password given
    ):  # fmt: skip
        conf.write_text(
            "".join(f"{k}={v}\n" for k, v in {**values, "storePathRootDir": str(tmp_path)}.items())
        )
        res = cli("serve", "--config", str(conf))
        assert res.returncode == 2, res.stderr
        errors = [line for line in res.stderr.splitlines() if "ERROR" in line]
        assert len(errors) == 1 and named in errors[0], res.stderr
        assert "Traceback" not in res.stderr


# -- enforcing -------------------------------------------------------------------------------


def test_enforcing_serves_tls_clients_and_closes_plain_ones(
    broker_factory: BrokerFactory, certs: Certs
) -> None:
    srv = broker_factory(
        **tls_keys("enforcing", certs.locked, **{"tls.server.keyPassword": "s3cret"})
    )
    ns = ("--namesrv", srv.address)
    tls = ("--tls", "--tls-ca", str(certs.ca.cert))
    res = cli("topic", "create", "secure", "--queues", "2", *ns, *tls)
    assert res.returncode == 0, res.stderr
    res = cli("produce", *ns, *tls, "--topic", "secure", "--count", "50", "--size", "64")
    assert res.returncode == 0 and '"SEND_OK": 50' in res.stderr, res.stderr
    res = cli("consume", *ns, *tls, "--topic", "secure", "--group", "g", "--from", "earliest",
              "--count", "50", "--format", "json")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert len([json.loads(line) for line in res.stdout.splitlines()]) == 50
    # without TLS: the broker closes the connection, the CLI says so in one line
    assert plain_request_closed(srv.address)
    failed_in_one_line(cli("topic", "list", *ns))
    assert "closing plain connection from 127.0.0.1" in srv.tail_log(200)
    assert "tls.server.mode=enforcing accepts TLS only" in srv.tail_log(200)
    # a client that does not trust the broker's CA refuses it
    err = failed_in_one_line(
        cli("topic", "list", *ns, "--tls", "--tls-ca", str(certs.other_ca.cert))
    )
    assert "CERTIFICATE_VERIFY_FAILED" in err, err
    # ... and one that trusts the system's CAs only, too
    err = failed_in_one_line(cli("topic", "list", *ns, "--tls"))
    assert "CERTIFICATE_VERIFY_FAILED" in err, err
    # the test mode (encrypted, any certificate believed) works, as -Dtls.test.mode.enable does
    res = cli("topic", "list", *ns, "--tls-no-verify")
    assert res.returncode == 0 and "secure" in res.stdout.split(), res.stderr
    # the certificate names 127.0.0.1: checking the hostname passes too
    res = cli("topic", "list", *ns, *tls, "--tls-check-hostname")
    assert res.returncode == 0 and "secure" in res.stdout.split(), res.stderr
    # the password stays in broker.conf
    code, config = srv.request("GET", "/v1/admin/config")
    assert code == 200 and config["tls.server.keyPassword"] == "******", config


async def test_python_client_over_tls_and_client_certificates(
    broker_factory: BrokerFactory, certs: Certs
) -> None:
    srv = broker_factory(
        **tls_keys(
            "enforcing",
            certs.locked,
            **{
                "tls.server.keyPassword": "s3cret",
                "tls.server.need.client.auth": "require",
                "tls.server.trustCertPath": str(certs.ca.cert),
            },
        )
    )
    with_cert = client_context(
        ca_path=str(certs.ca.cert), cert_path=str(certs.client.cert), key_path=str(certs.client.key)
    )
    assert await cluster_brokers(srv.address, with_cert) == ["broker-a"]
    # GET_BROKER_CONFIG (mqadmin getBrokerConfig) does not show the key's password
    async with RemotingClient(tls=with_cert) as client:
        answer = await client.call(srv.address, RequestCode.GET_BROKER_CONFIG)
    text = answer.body_bytes.decode()
    assert "tls.server.keyPassword=******" in text and "s3cret" not in text, text
    # no client certificate: the broker ends the handshake
    with pytest.raises(MQClientError):
        await cluster_brokers(srv.address, client_context(ca_path=str(certs.ca.cert)))
    # a client certificate from another CA: refused as well
    stranger = certs.other_ca.issue(certs.ca.cert.parent, "stranger", client=True)
    with pytest.raises(MQClientError):
        await cluster_brokers(
            srv.address,
            client_context(
                ca_path=str(certs.ca.cert), cert_path=str(stranger.cert), key_path=str(stranger.key)
            ),
        )
    assert "TLS handshake with 127.0.0.1" in srv.tail_log(200)


# -- permissive ------------------------------------------------------------------------------


async def test_permissive_serves_tls_and_plain_clients_on_the_same_port(
    broker_factory: BrokerFactory, certs: Certs
) -> None:
    srv = broker_factory(**tls_keys("permissive", certs.server))
    tls = client_context(ca_path=str(certs.ca.cert))
    assert await cluster_brokers(srv.address, tls) == ["broker-a"]
    assert await cluster_brokers(srv.address, None) == ["broker-a"]
    assert not plain_request_closed(srv.address)
    # a client that does not trust the CA still fails: permissive is not "anything goes"
    with pytest.raises(MQClientError, match="CERTIFICATE_VERIFY_FAILED"):
        await cluster_brokers(srv.address, client_context(ca_path=str(certs.other_ca.cert)))
    res = cli("produce", "--namesrv", srv.address, "--topic", "absent", "--count", "1")
    assert "absent" in failed_in_one_line(res)  # plain requests get answers, not a closed port


def test_disabled_is_plain_only(broker_factory: BrokerFactory, certs: Certs) -> None:
    srv = broker_factory()
    res = cli("topic", "list", "--namesrv", srv.address, "--tls", "--tls-ca", str(certs.ca.cert))
    failed_in_one_line(res)
    res = cli("topic", "list", "--namesrv", srv.address)
    assert res.returncode == 0, res.stderr


# -- the broker's own connections (tls.enable) -----------------------------------------------


async def test_slave_copies_metadata_from_an_enforcing_master_with_tls_enable(
    group_factory: Callable[..., LocalGroup], certs: Certs
) -> None:
    """A slave copies topics through its master's client port: with tls.server.mode=enforcing
    on the master, the slave needs tls.enable (and verifies the master with our CA)."""
    group = group_factory(
        mode="SYNC",
        metaSyncInterval=500,
        **tls_keys("enforcing", certs.server),
        **{
            "tls.enable": "true",
            "tls.test.mode.enable": "false",
            "tls.client.authServer": "true",
            "tls.client.trustCertPath": str(certs.ca.cert),
        },
    )
    master, slave = group.master, group.slaves[0]
    async with MQAdmin(master.address, tls=client_context(ca_path=str(certs.ca.cert))) as admin:
        await admin.create_topic("copied", 2, broker_addr=master.address)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        _, topics = slave.request("GET", "/v1/topics")
        if "copied" in topics["topicConfigTable"]:
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError(f"the slave never copied the topic; log:\n{slave.tail_log()}")
    assert "closing plain connection" not in master.tail_log(500)


def test_tls_enable_with_a_ca_that_cannot_be_read_stops_startup(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"storePathRootDir={tmp_path}\ntls.enable=true\ntls.test.mode.enable=false\n"
        "tls.client.authServer=true\ntls.client.trustCertPath=/nonexistent-ca.pem\n"
    )
    res = cli("serve", "--config", str(conf))
    assert res.returncode == 2 and "/nonexistent-ca.pem" in res.stderr, res.stderr
