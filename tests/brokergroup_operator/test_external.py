"""External access: the per-broker Services and the addresses clients outside are told."""

from __future__ import annotations

import pytest
from brokergroup_operator import manifests as m
from brokergroup_operator.external import (
    ExternalDoor,
    external_addresses,
    external_door,
    external_peer_addresses,
    stale_doors,
)
from brokergroup_operator.spec import SpecError, parse_spec
from brokergroup_operator.status import PodInfo

OWNER = {"name": "bg", "uid": "u"}


def spec(kind: str | None = "NodePort", **extra: object):
    body: dict[str, object] = {"image": "i", "slaves": 2, **extra}
    if kind:
        body["externalAccess"] = {"type": kind, "annotations": {"lb.example/x": "1"}}
    return parse_spec("bg", "ns", body)


def test_each_broker_gets_its_own_service_on_the_external_listener() -> None:
    items = {(i["kind"], i["metadata"]["name"]): i for i in m.children(spec(), OWNER)}
    names = [n for (k, n) in items if k == "Service" and n.endswith("-external")]
    assert names == ["bg-master-0-external", "bg-slave-0-external", "bg-slave-1-external"]
    svc = items[("Service", "bg-slave-1-external")]
    assert svc["spec"]["type"] == "NodePort"
    assert svc["spec"]["externalTrafficPolicy"] == "Local"
    assert svc["spec"]["selector"] == {
        "brokergroup.io/group": "bg",
        "statefulset.kubernetes.io/pod-name": "bg-slave-1",
    }
    assert svc["spec"]["ports"][0]["targetPort"] == "external"
    assert svc["metadata"]["annotations"] == {"lb.example/x": "1"}
    assert svc["metadata"]["labels"]["app.kubernetes.io/component"] == "external"
    conf = items[("ConfigMap", "bg-config")]["data"]["broker.conf"]
    assert "externalListenPort=10915" in conf.splitlines()
    container = items[("StatefulSet", "bg-master")]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "external", "containerPort": 10915, "protocol": "TCP"} in container["ports"]
    # none of it without externalAccess
    plain = m.children(spec(None), OWNER)
    assert not [i for i in plain if i["metadata"]["name"].endswith("-external")]
    assert "externalListenPort" not in m.render_broker_conf(spec(None))


def test_bad_external_specs_name_the_field() -> None:
    with pytest.raises(SpecError, match=r"spec\.ports"):
        spec(ports={"external": 10911})
    with pytest.raises(SpecError, match=r"spec\.externalAccess\.type"):
        spec("Ingress")
    with pytest.raises(SpecError, match="externalListenPort"):
        parse_spec("bg", "ns", {"image": "i", "brokerConfig": {"externalListenPort": "1"}})


def pod(name: str, broker_id: int, host: str | None) -> PodInfo:
    return PodInfo(name=name, broker_id=broker_id, ip="10.244.1.5", host_ip=host)


def test_addresses_are_the_node_and_node_port_or_the_load_balancer() -> None:
    door = external_door(
        "bg-master-0-external",
        {"type": "NodePort", "ports": [{"name": "external", "port": 10915, "nodePort": 31001}]},
        {},
    )
    assert door == ExternalDoor("bg-master-0-external", "NodePort", 31001, None)
    doors = [door, ExternalDoor("bg-slave-0-external", "NodePort", 31002)]
    pods = [pod("bg-master-0", 0, "10.201.0.11"), pod("bg-slave-0", 1, None)]
    # the slave has no node yet: left out, not guessed
    assert external_addresses(spec(), pods, doors) == {0: "10.201.0.11:31001"}
    pods[1] = pod("bg-slave-0", 1, "10.201.0.12")
    assert external_addresses(spec(), pods, doors) == {
        0: "10.201.0.11:31001",
        1: "10.201.0.12:31002",
    }
    # with failover the brokerIds are the assignment's, whatever the pod names say
    swapped = [pod("bg-master-0", 1, "10.201.0.11"), pod("bg-slave-0", 0, "10.201.0.12")]
    assert external_addresses(spec(), swapped, doors)[0] == "10.201.0.12:31002"

    lb = external_door(
        "bg-master-0-external",
        {"type": "LoadBalancer", "ports": [{"name": "external", "port": 10915}]},
        {"loadBalancer": {"ingress": [{"hostname": "mq.example.com"}]}},
    )
    assert external_addresses(spec("LoadBalancer"), pods[:1], [lb]) == {0: "mq.example.com:10915"}
    pending = ExternalDoor("bg-master-0-external", "LoadBalancer")
    assert external_addresses(spec("LoadBalancer"), pods[:1], [pending]) == {}


def test_stale_services_are_the_removed_brokers_or_all_when_turned_off() -> None:
    doors = [ExternalDoor(f"bg-slave-{i}-external", "NodePort") for i in range(4)]
    doors.append(ExternalDoor("bg-master-0-external", "NodePort"))
    assert stale_doors(spec(), doors) == ["bg-slave-2-external", "bg-slave-3-external"]
    assert len(stale_doors(spec(None), doors)) == 5


def dledger_spec(kind: str | None = "NodePort", replicas: int = 3):
    body: dict[str, object] = {"image": "i", "replicationMode": "DLEDGER", "replicas": replicas}
    if kind:
        body["externalAccess"] = {"type": kind}
    return parse_spec("bg", "ns", body)


def test_each_dledger_peer_gets_its_own_service() -> None:
    items = {(i["kind"], i["metadata"]["name"]): i for i in m.children(dledger_spec(), OWNER)}
    names = sorted(n for (k, n) in items if k == "Service" and n.endswith("-external"))
    assert names == ["bg-peers-0-external", "bg-peers-1-external", "bg-peers-2-external"]
    assert items[("Service", "bg-peers-2-external")]["spec"]["selector"] == {
        "brokergroup.io/group": "bg",
        "statefulset.kubernetes.io/pod-name": "bg-peers-2",
    }
    conf = items[("ConfigMap", "bg-config")]["data"]["broker.conf"]
    assert "externalListenPort=10915" in conf.splitlines()
    container = items[("StatefulSet", "bg-peers")]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "external", "containerPort": 10915, "protocol": "TCP"} in container["ports"]
    # while a membership change still has 5 pods of a group going to 3, all 5 keep theirs
    shrinking = m.children(dledger_spec(), OWNER, dledger_size=(3, 5))
    assert sum(i["metadata"]["name"].endswith("-external") for i in shrinking) == 5
    assert not [
        i for i in m.children(dledger_spec(None), OWNER) if "-external" in i["metadata"]["name"]
    ]


def test_dledger_addresses_go_by_peer_id_and_stale_doors_wait_for_the_membership() -> None:
    doors = [ExternalDoor(f"bg-peers-{i}-external", "NodePort", 31000 + i) for i in range(5)]
    pods = [
        PodInfo(name="bg-peers-0", broker_id=1, ip="10.244.1.5", host_ip="10.201.0.11"),
        None,  # no pod yet
        PodInfo(name="bg-peers-2", broker_id=0, ip="10.244.1.6", host_ip="10.201.0.13"),
    ]
    # by dLegerSelfId, whatever brokerId each pod has now (brokerIds follow the leader)
    assert external_peer_addresses(dledger_spec(), pods, doors) == {
        "n0": "10.201.0.11:31000",
        "n2": "10.201.0.13:31002",
    }
    assert external_peer_addresses(dledger_spec(None), pods, doors) == {}
    # 5 peers going to 3: peers 3 and 4 keep their Services until the membership says 3
    assert stale_doors(dledger_spec(), doors, peers=5) == []
    assert stale_doors(dledger_spec(), doors, peers=3) == [
        "bg-peers-3-external",
        "bg-peers-4-external",
    ]
    assert stale_doors(dledger_spec(None), doors, peers=3) == [d.name for d in doors]
