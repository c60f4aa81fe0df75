"""RocketMQ ACL 1.0 on habroker's remoting port, with the real Java client's AclClientRPCHook, and
a real RocketMQ 4.9.7 broker with ``aclEnable=true`` and the same plain_acl.yml as the oracle.

One private namespace: a Java name server; the Java broker ``java-a`` (topic ``AclJ``) and a
habroker ``ha-a`` (topic ``AclH``) both register with it, so the Java client reaches each broker
the same way and each scenario runs against both; the answers (response code and the
AclException's text) must be the same.  docs/security.md describes the feature.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from habroker.client import (
    MQAdmin,
    MQBrokerError,
    MQClientError,
    MQProducer,
    SessionCredentials,
)
from habroker.local import LocalBroker
from habroker.remoting.acl import request_content, sign_request, signature
from habroker.remoting.command import RemotingCommand

from tests.interop.rocketmq_java import (
    ROCKETMQ_HOME,
    BrokerSpec,
    JavaBroker,
    JavaNameServer,
    NetNS,
    events_of,
    run_driver,
    summary,
)

pytestmark = pytest.mark.timeout(240)

T = TypeVar("T")
V4 = "4.9.7"
NAMESRV = "127.0.0.1:9876"
ADMIN = SessionCredentials("RocketMQAdmin", "admin-secret-1")
WRITER = SessionCredentials("writerKey", "writer-secret-1")
READER = SessionCredentials("readerKey", "reader-secret-1")
WHITE = SessionCredentials("whiteKey", "white-secret-1")
TOPICS = {"java": "AclJ", "habroker": "AclH"}


def acl_file(global_white: list[str]) -> dict[str, Any]:
    both = list(TOPICS.values())
    return {
        "globalWhiteRemoteAddresses": global_white,
        "accounts": [
            {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "admin": True},
            {
                "accessKey": WRITER.access_key,
                "secretKey": WRITER.secret_key,
                "admin": False,
                "defaultTopicPerm": "DENY",
                "defaultGroupPerm": "SUB",
                "topicPerms": [f"{t}=PUB|SUB" for t in both],
            },
            {
                "accessKey": READER.access_key,
                "secretKey": READER.secret_key,
                "admin": False,
                "defaultTopicPerm": "DENY",
                "defaultGroupPerm": "SUB",
                "topicPerms": [f"{t}=SUB" for t in both],
            },
            {
                # signatures from this address are not checked (a wrong secret passes)
                "accessKey": WHITE.access_key,
                "secretKey": WHITE.secret_key,
                "whiteRemoteAddress": "127.0.0.1",
                "admin": False,
                "defaultTopicPerm": "PUB|SUB",
                "defaultGroupPerm": "SUB",
            },
        ],
    }


@dataclass
class Cluster:
    ns: NetNS
    java: JavaBroker
    habroker: LocalBroker
    habroker_acl: Path

    def address(self, kind: str) -> str:
        return self.java.address if kind == "java" else self.habroker.address


def in_ns(ns: NetNS, scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return ns.call(lambda: asyncio.run(scenario()), timeout=120)


@pytest.fixture(scope="module")
def cluster(module_netns: NetNS) -> Iterator[Cluster]:
    ns = module_netns
    text = yaml.safe_dump(acl_file([]))
    java_acl = ns.root / "java-acl" / "plain_acl.yml"
    java_acl.parent.mkdir(parents=True)
    java_acl.write_text(text)
    JavaNameServer(ns, ns.root / "namesrv").start()
    java = JavaBroker(
        ns,
        V4,
        ns.root / "java-a",
        BrokerSpec(
            broker_name="java-a",
            listen_port=10911,
            extra={"aclEnable": "true"},
            # RocketMQ reads <ROCKETMQ_HOME>/<rocketmq.acl.plain.file>
            jvm_props=[f"rocketmq.acl.plain.file={os.path.relpath(java_acl, ROCKETMQ_HOME)}"],
        ),
    ).start(wait=False)
    ha_root = ns.root / "ha-a"
    ha_acl = ha_root / "conf" / "plain_acl.yml"  # the default: <storePathRootDir>/../conf
    ha_acl.parent.mkdir(parents=True)
    ha_acl.write_text(text)
    habroker = ns.local_broker(
        ha_root,
        brokerName="ha-a",
        namesrvAddr=NAMESRV,
        registerNameServerPeriod=10000,
        aclEnable=True,
    ).start()

    async def create(address: str, topic: str) -> None:
        async with MQAdmin(NAMESRV, credentials=ADMIN) as admin:
            await admin.create_topic(topic, 2, broker_addr=address)

    # our client's signature, accepted by habroker and by the Java broker's verifier
    in_ns(ns, lambda: create(habroker.address, TOPICS["habroker"]))
    java.wait_booted()
    in_ns(ns, lambda: create(java.address, TOPICS["java"]))

    async def routed() -> None:  # habroker registers its new topic within 10 s
        async with MQAdmin(NAMESRV) as admin:
            deadline = time.monotonic() + 30
            while True:
                try:
                    await admin.topic_route(TOPICS["habroker"])
                    return
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.5)

    in_ns(ns, routed)
    yield Cluster(ns, java, habroker, ha_acl)


def creds(c: SessionCredentials, secret: str | None = None) -> list[str]:
    return ["--access-key", c.access_key, "--secret-key", secret or c.secret_key]


def produce(cluster: Cluster, kind: str, *auth: str, count: int = 1) -> list[dict[str, Any]]:
    return run_driver(
        cluster.ns,
        V4,
        "produce",
        "--namesrv",
        NAMESRV,
        "--topic",
        TOPICS[kind],
        "--count",
        str(count),
        "--retries",
        "0",
        "--send-timeout-ms",
        "3000",
        "--id-prefix",
        f"{kind}-",
        *auth,
        check=False,
    )


def refusal(events: list[dict[str, Any]], kind: str) -> tuple[int, str]:
    """The broker's answer to a refused send: code and the AclException's text (topic named
    generically, Java's stack frame after ', ' dropped)."""
    sends = events_of(events, "send")
    assert sends and all(s["status"] == "EXCEPTION" for s in sends), sends
    first = sends[0]
    assert "responseCode" in first, first
    remark = str(first["remark"]).split(", org.apache.rocketmq.acl.plain")[0]
    return int(first["responseCode"]), remark.replace(TOPICS[kind], "<topic>")


KINDS = ["java", "habroker"]


def test_the_right_credentials_produce_and_a_sub_only_account_consumes(cluster: Cluster) -> None:
    for kind in KINDS:
        events = produce(cluster, kind, *creds(WRITER), count=4)
        assert summary(events)["sendOk"] == 4, (kind, events[-3:])
        got = run_driver(
            cluster.ns,
            V4,
            "lite-pull",
            "--namesrv",
            NAMESRV,
            "--topic",
            TOPICS[kind],
            "--group",
            f"acl-reader-{kind}",
            "--expect",
            "4",
            "--timeout-s",
            "30",
            *creds(READER),
        )
        ids = {m["id"] for m in events_of(got, "message")}
        assert ids == {f"{kind}-{i}" for i in range(4)}, (kind, got[-3:])


@pytest.mark.parametrize(
    ("auth", "expected"),
    [
        ([], "org.apache.rocketmq.acl.common.AclException: No accessKey is configured"),
        (
            creds(WRITER, "not-the-secret"),
            "org.apache.rocketmq.acl.common.AclException: Check signature failed for "
            "accessKey=writerKey",
        ),
        (
            creds(SessionCredentials("nobodyKey", "nobody-secret")),
            "org.apache.rocketmq.acl.common.AclException: No acl config for nobodyKey",
        ),
        (
            creds(READER),
            "org.apache.rocketmq.acl.common.AclException: No default permission for topic:<topic>",
        ),
    ],
    ids=["no-credentials", "wrong-secret", "unknown-key", "sub-only-account-sends"],
)
def test_refusals_match_the_java_broker(cluster: Cluster, auth: list[str], expected: str) -> None:
    answers = {kind: refusal(produce(cluster, kind, *auth), kind) for kind in KINDS}
    assert answers["java"] == (1, expected), answers  # SYSTEM_ERROR, RocketMQ's own text
    assert answers["habroker"] == answers["java"]


def test_the_5_3_1_client_signs_for_habroker_too(cluster: Cluster) -> None:
    """RocketMQ 5.x's remoting client with the same hook (its headers carry more fields)."""
    args = ["produce", "--namesrv", NAMESRV, "--topic", TOPICS["habroker"], "--count", "2"]
    events = run_driver(cluster.ns, "5.3.1", *args, "--retries", "0", *creds(WRITER))
    assert summary(events)["sendOk"] == 2, events[-3:]
    refused = run_driver(cluster.ns, "5.3.1", *args, "--retries", "0", *creds(READER), check=False)
    assert refusal(refused, "habroker") == (
        1,
        "org.apache.rocketmq.acl.common.AclException: No default permission for topic:<topic>",
    )


def test_admin_requests_need_an_admin_account(cluster: Cluster) -> None:
    """UPDATE_AND_CREATE_TOPIC signed by a non-admin account (our Python client): the same
    answer from both brokers."""

    async def create(credentials: SessionCredentials, address: str) -> tuple[int, str]:
        async with MQAdmin(NAMESRV, credentials=credentials) as admin:
            try:
                await admin.create_topic("AclNotAllowed", 1, broker_addr=address)
            except MQBrokerError as exc:
                return exc.code, exc.remark.split(", org.apache.rocketmq.acl.plain")[0]
        return 0, "created"

    answers = {
        kind: in_ns(cluster.ns, lambda kind=kind: create(WRITER, cluster.address(kind)))
        for kind in KINDS
    }
    assert answers["java"] == (
        1,
        "org.apache.rocketmq.acl.common.AclException: Need admin permission for request "
        "code=17, but accessKey=writerKey is not",
    ), answers
    assert answers["habroker"] == answers["java"]


def test_a_white_listed_address_needs_no_signature(cluster: Cluster) -> None:
    for kind in KINDS:
        events = produce(cluster, kind, *creds(WHITE, "not-the-secret"), count=2)
        assert summary(events)["sendOk"] == 2, (kind, events[-3:])


def test_our_client_signs_as_the_java_hook_does(cluster: Cluster) -> None:
    """The signature our clients send, against AclClientRPCHook itself (through the jars)."""
    # keys ordered as Java orders Strings: by UTF-16 code unit (U+1F600 before U+FF21)
    fields = {"topic": "AclH", "queueId": "3", "é": "ü", "producerGroup": "g", "zz": "",
              "\U0001f600": "smile", "\uff21": "fullwidth"}  # fmt: skip
    body = bytes(range(256)) + "héllo".encode()
    args = [f"--field={k}={v}" for k, v in fields.items()]
    events = run_driver(
        cluster.ns,
        V4,
        "acl-sign",
        "--code",
        "310",
        "--body-hex",
        body.hex(),
        *args,
        *creds(WRITER),
        check=False,
    )
    java = events_of(events, "signed")[0]["extFields"]
    request = RemotingCommand.request(310, fields, body)
    sign_request(request, WRITER)
    assert request.ext_fields == java
    assert java["Signature"] == signature(request_content(java, body), WRITER.secret_key)


def test_habroker_reloads_the_file_global_white_list(cluster: Cluster) -> None:
    """habroker re-reads plain_acl.yml when it changes: a global white address then needs no
    credentials at all; back to the old file, the same unsigned send is refused again."""
    topic = TOPICS["habroker"]

    async def unsigned_send() -> str:
        async with MQProducer(NAMESRV, "acl-unsigned") as producer:
            try:
                result = await producer.send(topic, b"white")
            except MQClientError as exc:
                return f"refused: {exc}"
            return str(result.status)

    old = cluster.habroker_acl.read_text()
    assert in_ns(cluster.ns, unsigned_send).startswith("refused")
    try:
        cluster.habroker_acl.write_text(yaml.safe_dump(acl_file(["127.0.0.*"])))
        time.sleep(1.5)  # looked at on a request at most every 0.5 s
        assert in_ns(cluster.ns, unsigned_send) == "SEND_OK"
    finally:
        cluster.habroker_acl.write_text(old)
    time.sleep(1.5)
    answer = in_ns(cluster.ns, unsigned_send)
    assert answer.startswith("refused") and "No accessKey is configured" in answer, answer
    log = cluster.habroker.log_path.read_text()
    assert "ACL refused SEND_MESSAGE_V2" in log
    for secret in (WRITER.secret_key, READER.secret_key, "not-the-secret"):
        assert secret not in log
    assert not re.search(r"Signature", log)
