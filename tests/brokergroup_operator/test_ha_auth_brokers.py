"""The operator's HA secret with real brokers: the broker.conf and Secret the operator renders
for a SYNC group, given to ``habroker serve`` processes on 127.0.0.1 (the file at the path the
Secret is mounted at in a pod is written here from the Secret's data). Only what a pod does
differently is overridden: addresses, ports, the store and the mount path."""

from __future__ import annotations

import base64
from pathlib import Path

from brokergroup_operator import manifests as m
from brokergroup_operator.admin_token import group_ha_secret, group_token
from brokergroup_operator.spec import parse_spec
from habroker.client import Producer
from habroker.config import read_properties
from habroker.local import LocalGroup

from tests.habroker.ha.test_ha_processes import SMALL, _wait

OWNER = {"name": "bg", "uid": "0b1c"}
KEY = b"operator-key-for-the-test-0123456789"
LOCAL = {"bindAddress", "listenPort", "haListenPort", "httpListenPort", "storePathRootDir"}


def _rendered(tmp_path: Path) -> tuple[dict[str, str], str]:
    """broker.conf's shared keys as the operator renders them, and the HA secret file."""
    group = parse_spec("bg", "ns", {"image": "x", "replicationMode": "SYNC", "slaves": 1})
    secret = group_ha_secret(KEY, "ns", "bg", OWNER["uid"])
    items = {
        (i["kind"], i["metadata"]["name"]): i for i in m.children(group, OWNER, ha_secret=secret)
    }
    conf = tmp_path / "broker.conf"
    conf.write_text(items[("ConfigMap", "bg-config")]["data"]["broker.conf"])
    props = read_properties(conf)
    assert props["haAuthSecretFile"] == f"{m.HA_SECRET_DIR}/{m.HA_SECRET_KEY}"
    data = items[("Secret", "bg-ha-secret")]["data"][m.HA_SECRET_KEY]
    mounted = tmp_path / "ha-secret"  # what the kubelet writes at /etc/habroker-ha/secret
    mounted.write_bytes(base64.b64decode(data))
    props["haAuthSecretFile"] = str(mounted)
    return {k: v for k, v in props.items() if k not in LOCAL}, str(mounted)


def test_rendered_group_replicates_with_its_ha_secret(tmp_path: Path) -> None:
    props, _ = _rendered(tmp_path)
    group = LocalGroup(tmp_path / "g", slaves=1, mode="SYNC", **{**props, **SMALL})
    try:
        group.start()
        group.wait_connected()
        with Producer(group.master.http_address, timeout=30) as producer:
            producer.create_topic("ha", queues=1)
            statuses = [producer.send("ha", b"x" * 100, queue_id=0).status for _ in range(10)]
        assert statuses == ["PUT_OK"] * 10
        (slave,) = group.master.status()["master"]["slaves"]
        assert slave["authenticated"] is True
        group.wait_replicated()
    finally:
        group.stop()


def test_the_admin_token_is_not_the_ha_secret(tmp_path: Path) -> None:
    """A slave given the group's admin token as its HA secret is refused by the master."""
    props, _ = _rendered(tmp_path)
    group = LocalGroup(tmp_path / "g", slaves=1, mode="SYNC", **{**props, **SMALL})
    wrong = tmp_path / "admin-token"
    wrong.write_text(group_token(KEY, "ns", "bg", OWNER["uid"]))
    group.slaves[0].config["haAuthSecretFile"] = str(wrong)
    try:
        group.start()
        _wait(
            lambda: "slave's proof does not match" in group.master.log_path.read_text(),
            what="the master refusing the slave",
        )
        assert group.master.status()["master"]["connectionCount"] == 0
    finally:
        group.stop()
