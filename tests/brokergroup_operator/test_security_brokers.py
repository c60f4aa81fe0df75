"""spec.security.tls and spec.security.acl with real brokers: the broker.conf the operator
renders for a group, given to ``habroker serve`` processes on 127.0.0.1, with the Secrets' files
written where a pod would mount them (here: a temporary folder instead of /etc/habroker-tls and
/etc/habroker-acl). Only what a pod does differently is overridden: addresses, ports, the store
and the mount paths."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from brokergroup_operator import manifests as m
from brokergroup_operator.spec import SpecError, parse_spec
from habroker.client import MQAdmin, MQClientError
from habroker.config import read_properties
from habroker.local import LocalGroup
from habroker.remoting.acl import SessionCredentials
from habroker.remoting.tls import client_context

from tests.habroker.ha.test_ha_processes import SMALL
from tests.tls_certs import CertAuthority

OWNER = {"name": "bg", "uid": "0b1c"}
LOCAL = {"bindAddress", "listenPort", "haListenPort", "httpListenPort", "storePathRootDir"}
USER = SessionCredentials("appKey0001", "app-secret-0001")


def _rendered(tmp_path: Path, security: dict[str, Any]) -> dict[str, str]:
    """broker.conf's shared keys as the operator renders them for ``spec.security``."""
    group = parse_spec(
        "bg", "ns", {"image": "x", "replicationMode": "SYNC", "slaves": 1, "security": security}
    )
    items = {(i["kind"], i["metadata"]["name"]): i for i in m.children(group, OWNER)}
    conf = tmp_path / "broker.conf"
    conf.write_text(items[("ConfigMap", "bg-config")]["data"]["broker.conf"])
    return {k: v for k, v in read_properties(conf).items() if k not in LOCAL}


def _mounted(props: dict[str, str], pod_dir: str, here: Path) -> dict[str, str]:
    """The rendered paths under ``pod_dir`` moved to ``here``, where the test wrote the files."""
    return {k: v.replace(pod_dir, str(here)) for k, v in props.items()}


def test_tls_secret_serves_the_client_port_and_slaves_speak_tls(tmp_path: Path) -> None:
    props = _rendered(tmp_path, {"haAuth": False, "tls": {"secretName": "bg-tls"}})
    assert props["tls.server.mode"] == "enforcing" and props["tls.enable"] == "true"
    assert props["tls.server.certPath"] == f"{m.TLS_DIR}/tls.crt"
    # what the kubelet writes from a kubernetes.io/tls Secret (cert-manager's names)
    secret = tmp_path / "tls-secret"
    secret.mkdir()
    ca = CertAuthority.create(tmp_path / "ca")
    issued = ca.issue(tmp_path / "ca", "broker")
    (secret / "tls.crt").write_bytes(issued.cert.read_bytes())
    (secret / "tls.key").write_bytes(issued.key.read_bytes())
    props = _mounted(props, m.TLS_DIR, secret)
    group = LocalGroup(
        tmp_path / "g", slaves=1, mode="SYNC", metaSyncInterval=500, **props, **SMALL
    )
    try:
        group.start()
        group.wait_connected()
        master, slave = group.master, group.slaves[0]

        async def clients() -> None:
            tls = client_context(ca_path=str(ca.cert))
            async with MQAdmin(master.address, tls=tls) as admin:
                await admin.create_topic("secured", 2, broker_addr=master.address)
            async with MQAdmin(master.address, timeout=3) as plain:
                with pytest.raises(MQClientError):
                    await plain.create_topic("plain", 2, broker_addr=master.address)

        asyncio.run(clients())
        deadline = time.monotonic() + 20
        while "secured" not in slave.request("GET", "/v1/topics")[1]["topicConfigTable"]:
            assert time.monotonic() < deadline, f"no metadata over TLS; {slave.tail_log()}"
            time.sleep(0.2)
        assert "closing plain connection" in master.tail_log(500)  # the plain client, only
        assert "plain" not in master.request("GET", "/v1/topics")[1]["topicConfigTable"]
    finally:
        group.stop()


def test_acl_secret_turns_on_rocketmq_acl(tmp_path: Path) -> None:
    props = _rendered(tmp_path, {"acl": {"secretName": "bg-acl"}})
    assert props["aclEnable"] == "true"
    assert props["aclFile"] == f"{m.ACL_DIR}/plain_acl.yml"
    secret = tmp_path / "acl-secret"
    secret.mkdir()
    (secret / "plain_acl.yml").write_text(
        yaml.safe_dump(
            {
                "globalWhiteRemoteAddresses": ["10.250.*.*"],
                "accounts": [
                    {"accessKey": USER.access_key, "secretKey": USER.secret_key, "admin": True}
                ],
            }
        )
    )
    props = _mounted(props, m.ACL_DIR, secret)
    group = LocalGroup(tmp_path / "g", slaves=0, mode="ASYNC", **props, **SMALL)
    try:
        group.start()
        master = group.master

        async def clients() -> None:
            async with MQAdmin(master.address, credentials=USER) as admin:
                await admin.create_topic("allowed", 2, broker_addr=master.address)
            async with MQAdmin(master.address, timeout=3) as anonymous:
                with pytest.raises(MQClientError, match="No accessKey"):
                    await anonymous.create_topic("refused", 2, broker_addr=master.address)

        asyncio.run(clients())
        topics = master.request("GET", "/v1/topics")[1]["topicConfigTable"]
        assert "allowed" in topics and "refused" not in topics
    finally:
        group.stop()


def test_pods_mount_the_secrets_read_only_and_a_change_rolls(tmp_path: Path) -> None:
    base = {"image": "x", "replicationMode": "SYNC", "slaves": 1}
    plain = parse_spec("bg", "ns", base)
    secured = parse_spec(
        "bg",
        "ns",
        {
            **base,
            "security": {
                "tls": {"secretName": "bg-tls", "mode": "permissive"},
                "acl": {"secretName": "bg-acl", "key": "acl.yml"},
            },
        },
    )
    assert m.config_hash(plain) != m.config_hash(secured)
    sts = m.statefulset(secured, OWNER, m.MASTER)
    pod = sts["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "bg-tls"
    assert volumes["acl"]["secret"]["secretName"] == "bg-acl"
    mounts = {v["name"]: v for v in pod["containers"][0]["volumeMounts"]}
    assert mounts["tls"] == {"name": "tls", "mountPath": m.TLS_DIR, "readOnly": True}
    assert mounts["acl"] == {"name": "acl", "mountPath": m.ACL_DIR, "readOnly": True}
    props = m.broker_properties(secured)
    assert props["tls.server.mode"] == "permissive"
    assert props["aclFile"] == f"{m.ACL_DIR}/acl.yml"
    unsecured = m.statefulset(plain, OWNER, m.MASTER)["spec"]["template"]["spec"]
    assert not {"tls", "acl"} & {v["name"] for v in unsecured["volumes"]}
    # the operator never creates or reads these Secrets: they are the user's
    assert not [i for i in m.children(secured, OWNER) if i["kind"] == "Secret"]
    for bad in (
        {"tls": {"secretName": "s", "mode": "optional"}},
        {"acl": {"secretName": "s", "key": "a/b"}},
    ):
        with pytest.raises(SpecError):
            parse_spec("bg", "ns", {**base, "security": bad})
