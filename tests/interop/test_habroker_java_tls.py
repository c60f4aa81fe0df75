"""TLS on habroker's client port under the real RocketMQ Java client (4.9.7) and mqadmin.

The JVM gets the system properties RocketMQ's TlsSystemConfig reads: ``tls.enable`` (speak
TLS), ``tls.test.mode.enable=false`` with ``tls.client.authServer=true`` and
``tls.client.trustCertPath`` (verify the broker's certificate against our CA), and
``tls.config.file`` pointed at a file that does not exist (so nothing under /etc/rocketmq can
change the outcome). The brokers run in a private network namespace; certificates are made by
openssl for 127.0.0.1 (tests/tls_certs.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from habroker.local import LocalBroker

from tests.interop.rocketmq_java import (
    NetNS,
    events_of,
    run_driver,
    run_mqadmin,
    summary,
)
from tests.tls_certs import CertAuthority, Issued

pytestmark = pytest.mark.timeout(240)

V4 = "4.9.7"


class Certs:
    def __init__(self, directory: Path) -> None:
        self.ca = CertAuthority.create(directory, "habroker-test-ca")
        self.server: Issued = self.ca.issue(directory, "server")
        self.other_ca = CertAuthority.create(directory, "other-ca")


@pytest.fixture(scope="module")
def certs(module_netns: NetNS) -> Certs:
    return Certs(module_netns.root / "certs")


def java_tls(ca: Path, ns: NetNS) -> tuple[str, ...]:
    """A Java client that speaks TLS and believes only certificates issued by ``ca``."""
    return (
        "-Dtls.enable=true",
        "-Dtls.test.mode.enable=false",
        "-Dtls.client.authServer=true",
        f"-Dtls.client.trustCertPath={ca}",
        f"-Dtls.config.file={ns.root / 'no-tls.properties'}",
    )


def start_broker(ns: NetNS, name: str, mode: str, certs: Certs) -> LocalBroker:
    broker = ns.local_broker(
        ns.root / name,
        mappedFileSizeCommitLog=16 * 1024 * 1024,
        **{
            "tls.server.mode": mode,
            "tls.server.certPath": str(certs.server.cert),
            "tls.server.keyPath": str(certs.server.key),
        },
    )
    return broker.start()


@pytest.fixture(scope="module")
def enforcing(module_netns: NetNS, certs: Certs) -> Iterator[LocalBroker]:
    yield start_broker(module_netns, "enforcing", "enforcing", certs)


@pytest.fixture(scope="module")
def permissive(module_netns: NetNS, certs: Certs) -> Iterator[LocalBroker]:
    yield start_broker(module_netns, "permissive", "permissive", certs)


def produce(ns: NetNS, broker: LocalBroker, topic: str, prefix: str, jvm: tuple[str, ...],
            *, check: bool = True, count: int = 10) -> list[dict]:  # fmt: skip
    return run_driver(
        ns, V4, "produce", "--namesrv", broker.address, "--topic", topic, "--count", str(count),
        "--id-prefix", prefix, "--send-timeout-ms", "3000", "--retries", "0",
        check=check, jvm=jvm, timeout=90,
    )  # fmt: skip


def test_java_client_produces_and_consumes_over_tls_in_enforcing_mode(
    module_netns: NetNS, enforcing: LocalBroker, certs: Certs
) -> None:
    ns, tls = module_netns, java_tls(certs.ca.cert, module_netns)
    run_mqadmin(ns, V4, "updateTopic", "-n", enforcing.address, "-c", "DefaultCluster",
                "-t", "TLS-T", "-r", "2", "-w", "2", jvm=tls)  # fmt: skip
    events = produce(ns, enforcing, "TLS-T", "tls-", tls, count=20)
    assert summary(events)["sendOk"] == 20
    assert {s["status"] for s in events_of(events, "send")} == {"SEND_OK"}
    sent = {i for s in events_of(events, "send") for i in s["ids"]}
    events = run_driver(ns, V4, "lite-pull", "--namesrv", enforcing.address, "--topic", "TLS-T",
                        "--group", "g-tls", "--expect", "20", "--timeout-s", "40",
                        jvm=tls, timeout=90)  # fmt: skip
    assert {m["id"] for m in events_of(events, "message")} == sent
    # every one of those connections was TLS; none was refused
    assert "closing plain connection" not in enforcing.tail_log(500)


def test_plain_java_client_is_refused_in_enforcing_mode(
    module_netns: NetNS, enforcing: LocalBroker
) -> None:
    events = produce(module_netns, enforcing, "TLS-T", "plain-", (), check=False, count=1)
    assert not [s for s in events_of(events, "send") if s.get("status") == "SEND_OK"], events
    assert "closing plain connection from 127.0.0.1" in enforcing.tail_log(500)


def test_java_client_that_does_not_trust_the_ca_fails(
    module_netns: NetNS, enforcing: LocalBroker, certs: Certs
) -> None:
    distrust = java_tls(certs.other_ca.cert, module_netns)
    events = produce(module_netns, enforcing, "TLS-T", "distrust-", distrust, check=False, count=1)
    assert not [s for s in events_of(events, "send") if s.get("status") == "SEND_OK"], events
    # the client aborts the handshake: the broker logs the failed handshake, not a request
    assert "TLS handshake with 127.0.0.1" in enforcing.tail_log(500)


def test_permissive_mode_serves_plain_and_tls_java_clients(
    module_netns: NetNS, permissive: LocalBroker, certs: Certs
) -> None:
    ns, tls = module_netns, java_tls(certs.ca.cert, module_netns)
    run_mqadmin(ns, V4, "updateTopic", "-n", permissive.address, "-c", "DefaultCluster",
                "-t", "MIXED-T", "-r", "2", "-w", "2")  # fmt: skip
    plain = produce(ns, permissive, "MIXED-T", "plain-", ())
    secure = produce(ns, permissive, "MIXED-T", "tls-", tls)
    assert summary(plain)["sendOk"] == 10 and summary(secure)["sendOk"] == 10
    events = run_driver(ns, V4, "lite-pull", "--namesrv", permissive.address, "--topic",
                        "MIXED-T", "--group", "g-mixed", "--expect", "20", "--timeout-s", "40",
                        jvm=tls, timeout=90)  # fmt: skip
    ids = {m["id"] for m in events_of(events, "message")}
    assert ids == {f"plain-{i}" for i in range(10)} | {f"tls-{i}" for i in range(10)}
