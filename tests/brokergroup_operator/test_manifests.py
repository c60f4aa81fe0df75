"""Manifest builders and spec checks: pure, no cluster."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml
from brokergroup_operator import manifests as m
from brokergroup_operator.spec import SpecError, broker_config_warnings, parse_spec
from habroker.config import BrokerConfig, read_properties

OWNER = {"name": "bg", "uid": "1234"}
ROOT = Path(__file__).resolve().parents[2]


def spec(**overrides):
    base = {"image": "habroker:test", "slaves": 2}
    base.update(overrides)
    return parse_spec("bg", "ns", base)


def by_kind(items):
    return {(i["kind"], i["metadata"]["name"]): i for i in items}


def test_children_names_and_ownership():
    items = by_kind(m.children(spec(), OWNER))
    assert set(items) == {
        ("ConfigMap", "bg-config"),
        ("Service", "bg-master"),
        ("Service", "bg-slave"),
        ("Service", "bg"),
        ("Service", "bg-namesrv"),
        ("StatefulSet", "bg-master"),
        ("StatefulSet", "bg-slave"),
        ("PodDisruptionBudget", "bg"),
    }
    for item in items.values():
        (ref,) = item["metadata"]["ownerReferences"]
        assert ref == {
            "apiVersion": "brokergroup.io/v1alpha1",
            "kind": "BrokerGroup",
            "name": "bg",
            "uid": "1234",
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert item["metadata"]["namespace"] == "ns"
        assert item["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "brokergroup-operator"


def test_broker_conf_is_valid_for_habroker(tmp_path):
    group = spec(brokerConfig={"haMaxGapNotInSync": "1048576"}, replicationMode="SYNC")
    conf = m.config_map(group, OWNER)["data"]["broker.conf"]
    path = tmp_path / "broker.conf"
    path.write_text(conf)
    props = read_properties(path)
    assert props["bindAddress"] == "0.0.0.0"
    assert props["brokerName"] == "bg"
    assert props["storePathRootDir"] == "/data/store"
    # the master's and a slave's full configuration as the pod would load it
    master = BrokerConfig.load(
        path, environ={"HABROKER_brokerId": "0", "HABROKER_brokerRole": "SYNC_MASTER"}
    )
    assert master.haMaxGapNotInSync == 1048576 and master.brokerRole.value == "SYNC_MASTER"
    env = {f"HABROKER_{k}": v for k, v in m.slave_env_properties(group, 2).items()}
    slave = BrokerConfig.load(path, environ=env)
    assert slave.brokerId == 2
    assert slave.haMasterAddress == "bg-master-0.bg-master.ns.svc.cluster.local:10912"
    # metadata is copied from the master's HTTP API, not RocketMQ's client port
    assert slave.masterHttpAddress == "bg-master-0.bg-master.ns.svc.cluster.local:10913"
    assert (slave.listenPort, slave.haListenPort, slave.httpListenPort) == (10911, 10912, 10913)


def test_master_statefulset():
    sts = m.statefulset(spec(replicationMode="SYNC"), OWNER, m.MASTER)
    assert sts["spec"]["replicas"] == 1
    assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert sts["spec"]["serviceName"] == "bg-master"
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["HABROKER_brokerId"] == "0"
    assert env["HABROKER_brokerRole"] == "SYNC_MASTER"
    assert env["HABROKER_brokerIP1"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert container["command"] == ["habroker", "serve", "--config", "/etc/habroker/broker.conf"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "client": 10911,
        "ha": 10912,
        "http": 10913,
    }
    # probes speak HTTP, so they go to the HTTP port, never RocketMQ's client port
    for probe, path in (
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ):
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}, probe
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    assert sts["spec"]["selector"]["matchLabels"] == {
        "brokergroup.io/group": "bg",
        "app.kubernetes.io/component": "master",
    }


def test_slave_statefulset_derives_broker_id_from_ordinal():
    sts = m.statefulset(spec(slaves=3), OWNER, m.SLAVE)
    assert sts["spec"]["replicas"] == 3
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HABROKER_brokerRole"] == "SLAVE"
    assert env["HABROKER_haMasterAddress"] == "bg-master-0.bg-master.ns.svc.cluster.local:10912"
    assert "HABROKER_brokerId" not in env
    script = container["command"][-1]
    assert "${HOSTNAME##*-} + 1" in script and "exec habroker serve" in script


def test_slave_command_computes_ids_in_a_real_shell():
    import subprocess

    sts = m.statefulset(spec(), OWNER, m.SLAVE)
    script = sts["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    probe = script.replace(
        "exec habroker serve --config /etc/habroker/broker.conf", 'echo "$HABROKER_brokerId"'
    )
    for ordinal in (0, 1, 11):
        out = subprocess.run(
            ["/bin/sh", "-c", probe],
            env={"HOSTNAME": f"bg-slave-{ordinal}"},
            capture_output=True,
            text=True,
        )
        assert out.stdout.strip() == str(ordinal + 1)


def test_ephemeral_storage_uses_empty_dir():
    sts = m.statefulset(spec(storage={"ephemeral": True}), OWNER, m.SLAVE)
    assert "volumeClaimTemplates" not in sts["spec"]
    assert {"name": "store", "emptyDir": {}} in sts["spec"]["template"]["spec"]["volumes"]


def test_storage_class_and_retention():
    group = spec(
        storage={
            "size": "5Gi",
            "storageClassName": "fast",
            "retentionPolicy": {"whenScaled": "Delete"},
        }
    )
    sts = m.statefulset(group, OWNER, m.SLAVE)
    claim = sts["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim["storageClassName"] == "fast"
    assert claim["resources"]["requests"]["storage"] == "5Gi"
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] == "Delete"


def test_headless_services_publish_not_ready():
    svc = m.headless_service(spec(), OWNER, m.MASTER)
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    client = m.client_service(spec(), OWNER)
    assert client["spec"]["selector"]["app.kubernetes.io/component"] == "master"
    assert client["spec"]["ports"] == [
        {"name": "client", "port": 10911, "targetPort": "client"},
        {"name": "http", "port": 10913, "targetPort": "http"},
    ]
    for component in (m.MASTER, m.SLAVE):
        ports = m.headless_service(spec(), OWNER, component)["spec"]["ports"]
        assert {p["name"]: (p["port"], p["targetPort"]) for p in ports} == {
            "client": (10911, "client"),
            "ha": (10912, "ha"),
            "http": (10913, "http"),
        }


def test_config_hash_ignores_runtime_read_policy():
    base = m.config_hash(spec())
    assert (
        m.config_hash(
            spec(readPolicy={"slaveReadEnable": True, "accessMessageInMemoryMaxRatio": 10})
        )
        == base
    )
    assert m.config_hash(spec(brokerConfig={"fileReservedTime": "1"})) != base
    assert m.config_hash(spec(flushDiskType="SYNC_FLUSH")) != base


def test_restart_needing_changes_change_the_pod_template():
    def template(group, component):
        return m.statefulset(group, OWNER, component)["spec"]["template"]

    assert template(spec(), m.MASTER) != template(spec(image="habroker:other"), m.MASTER)
    assert template(spec(), m.MASTER) != template(spec(replicationMode="SYNC"), m.MASTER)
    assert template(spec(), m.SLAVE) == template(spec(replicationMode="SYNC"), m.SLAVE)
    assert template(spec(), m.SLAVE) == template(
        spec(readPolicy={"slaveReadEnable": True}), m.SLAVE
    )


def test_resources_are_passed_through():
    group = spec(resources={"limits": {"memory": "512Mi"}, "requests": {"cpu": "100m"}})
    (container,) = m.statefulset(group, OWNER, m.MASTER)["spec"]["template"]["spec"]["containers"]
    assert container["resources"] == {"limits": {"memory": "512Mi"}, "requests": {"cpu": "100m"}}


def test_custom_ports():
    group = spec(ports={"client": 20911, "ha": 20912, "http": 20913})
    assert m.master_ha_address(group) == "bg-master-0.bg-master.ns.svc.cluster.local:20912"
    conf = m.render_broker_conf(group)
    assert "listenPort=20911" in conf and "haListenPort=20912" in conf
    assert "httpListenPort=20913" in conf
    slave = m.slave_env_properties(group, 1)
    assert slave["masterHttpAddress"] == "bg-master-0.bg-master.ns.svc.cluster.local:20913"
    (container,) = m.statefulset(group, OWNER, m.MASTER)["spec"]["template"]["spec"]["containers"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "client": 20911,
        "ha": 20912,
        "http": 20913,
    }


def test_http_port_defaults_to_10913_beside_custom_ports():
    group = spec(ports={"client": 20911})
    assert (group.client_port, group.ha_port, group.http_port) == (20911, 10912, 10913)


def test_broker_id_of_pod():
    assert m.broker_id_of_pod("bg-master-0", "bg") == 0
    assert m.broker_id_of_pod("bg-slave-0", "bg") == 1
    assert m.broker_id_of_pod("bg-slave-10", "bg") == 11
    assert m.broker_id_of_pod("bg-slave-x", "bg") is None
    assert m.broker_id_of_pod("other-slave-0", "bg") is None


@pytest.mark.parametrize(
    ("overrides", "field", "reason"),
    [
        ({"brokerConfig": {"haMaxGapNotInSnyc": "1"}}, "spec.brokerConfig", "InvalidBrokerConfig"),
        (
            {"brokerConfig": {"haMaxGapNotInSync": "lots"}},
            "spec.brokerConfig",
            "InvalidBrokerConfig",
        ),
        ({"brokerConfig": {"brokerId": "3"}}, "spec.brokerConfig", "InvalidBrokerConfig"),
        ({"replicationMode": "SYNC", "slaves": 0}, "spec.slaves", "InvalidSpec"),
        (
            {"readPolicy": {"whichBrokerWhenConsumeSlowly": 5}},
            "spec.readPolicy.whichBrokerWhenConsumeSlowly",
            "InvalidSpec",
        ),
        (
            {"readPolicy": {"whichBrokerWhenConsumeSlowly": "best"}},
            "spec.readPolicy.whichBrokerWhenConsumeSlowly",
            "InvalidSpec",
        ),
        ({"ports": {"client": 1, "ha": 1}}, "spec.ports", "InvalidSpec"),
        ({"ports": {"client": 10913}}, "spec.ports", "InvalidSpec"),
        ({"ports": {"ha": 2, "http": 2}}, "spec.ports", "InvalidSpec"),
        ({"brokerConfig": {"httpListenPort": "1"}}, "spec.brokerConfig", "InvalidBrokerConfig"),
        ({"image": ""}, "spec.image", "InvalidSpec"),
    ],
)
def test_spec_errors_name_the_field(overrides, field, reason):
    with pytest.raises(SpecError) as info:
        spec(**overrides)
    assert info.value.field == field
    assert info.value.reason == reason
    assert field in str(info.value)


def test_unknown_key_error_suggests_the_right_name():
    with pytest.raises(SpecError, match="did you mean haMaxGapNotInSync"):
        spec(brokerConfig={"haMaxGapNotInSnyc": "1"})


def test_unknown_key_is_refused_even_if_rocketmq_like():
    with pytest.raises(SpecError) as info:
        spec(brokerConfig={"sendMessageThreadPoolNum": "8"})
    assert info.value.reason == "InvalidBrokerConfig"
    assert "did you mean sendMessageThreadPoolNums" in str(info.value)
    assert "neither RocketMQ" in str(info.value)


def test_rocketmq_keys_habroker_lacks_are_accepted_and_warned(tmp_path):
    group = spec(brokerConfig={"sendMessageThreadPoolNums": "16", "brokerIP2": "10.1.1.1"})
    (warning,) = broker_config_warnings(group)
    assert "not implemented" in warning and "brokerIP2, sendMessageThreadPoolNums" in warning
    # they reach broker.conf, and the broker reads them back as given
    path = tmp_path / "broker.conf"
    path.write_text(m.config_map(group, OWNER)["data"]["broker.conf"])
    assert read_properties(path)["sendMessageThreadPoolNums"] == "16"
    assert broker_config_warnings(spec(brokerConfig={"fileReservedTime": "1"})) == []
    # a bad value for such a key is still refused
    with pytest.raises(SpecError, match="bad value for sendMessageThreadPoolNums"):
        spec(brokerConfig={"sendMessageThreadPoolNums": "many"})


def test_broker_conf_values_are_escaped(tmp_path):
    tricky = "/data/index\\a b # not a comment"
    group = spec(brokerConfig={"storePathIndex": tricky, "deleteWhen": " 04"})
    path = tmp_path / "broker.conf"
    path.write_text(m.config_map(group, OWNER)["data"]["broker.conf"])
    props = read_properties(path)
    assert props["storePathIndex"] == tricky
    assert props["deleteWhen"] == " 04"


def test_read_policy_parsing():
    assert spec().read_policy.auto
    fixed = spec(readPolicy={"whichBrokerWhenConsumeSlowly": "2"}).read_policy
    assert fixed.which_broker_when_consume_slowly == 2 and not fixed.auto


def test_example_objects_parse():
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "BrokerGroup":
                parse_spec(doc["metadata"]["name"], "default", doc["spec"])


def test_crd_is_structural_enough():
    crd = yaml.safe_load((ROOT / "crds" / "brokergroup.io_brokergroups.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.slaves",
            "statusReplicasPath": ".status.slaveReplicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    assert crd["spec"]["names"]["shortNames"] == ["bg"]
    columns = {c["name"] for c in version["additionalPrinterColumns"]}
    assert {"Ready", "Mode", "In-Sync", "Master-Offset", "Max-Lag", "Age"} <= columns
    props = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    for key in (
        "image",
        "replicationMode",
        "flushDiskType",
        "slaves",
        "storage",
        "resources",
        "readPolicy",
        "brokerConfig",
        "ports",
    ):
        assert props[key].get("description"), key
    # the reserved keys refused by CEL are exactly the ones the operator sets
    from brokergroup_operator.spec import RESERVED_KEYS

    rules = props["brokerConfig"]["x-kubernetes-validations"][0]["rule"]
    for key in RESERVED_KEYS:
        assert f"'{key}'" in rules


def test_network_policy_only_when_enabled():
    assert "NetworkPolicy" not in {i["kind"] for i in m.children(spec(), OWNER)}
    items = by_kind(m.children(spec(), OWNER, network_policies=True))
    policy = items[("NetworkPolicy", "bg-brokers")]
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "1234"
    body = policy["spec"]
    assert body["podSelector"] == {"matchLabels": {"brokergroup.io/group": "bg"}}
    assert body["policyTypes"] == ["Ingress"]
    client, ha = body["ingress"]
    # the client and HTTP ports from anywhere; the HA port only from this group's pods
    assert client == {
        "ports": [{"protocol": "TCP", "port": "client"}, {"protocol": "TCP", "port": "http"}]
    }
    assert ha == {
        "from": [{"podSelector": {"matchLabels": {"brokergroup.io/group": "bg"}}}],
        "ports": [{"protocol": "TCP", "port": "ha"}],
    }
    # the ports are named on the container, whatever their numbers
    sts = items[("StatefulSet", "bg-slave")]
    names = {p["name"] for p in sts["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert names == {"client", "ha", "http"}


@pytest.mark.parametrize(
    ("raw", "expected"), [("", False), ("true", True), ("1", True), ("false", False)]
)
def test_network_policy_setting(raw, expected):
    from brokergroup_operator.settings import Settings

    assert Settings.from_env({"BROKERGROUP_NETWORK_POLICY": raw}).network_policy is expected


def test_network_policy_setting_refuses_garbage():
    from brokergroup_operator.settings import Settings

    with pytest.raises(ValueError, match="BROKERGROUP_NETWORK_POLICY"):
        Settings.from_env({"BROKERGROUP_NETWORK_POLICY": "maybe"})


def test_namesrv_service_spans_every_broker_of_the_group():
    svc = by_kind(m.children(spec(), OWNER))[("Service", "bg-namesrv")]
    assert svc["spec"]["selector"] == m.selector_labels("bg")
    (port,) = svc["spec"]["ports"]
    assert port == {"name": "namesrv", "port": 9876, "targetPort": "client"}
    master_labels = m.statefulset(spec(), OWNER, m.MASTER)["spec"]["template"]["metadata"]["labels"]
    slave_labels = m.statefulset(spec(), OWNER, m.SLAVE)["spec"]["template"]["metadata"]["labels"]
    for labels in (master_labels, slave_labels):
        assert svc["spec"]["selector"].items() <= labels.items()


def test_every_field_is_described_for_kubectl_explain():
    crd = yaml.safe_load((ROOT / "crds" / "brokergroup.io_brokergroups.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    root = version["schema"]["openAPIV3Schema"]
    missing: list[str] = []

    def walk(node: dict, path: str) -> None:
        if path and not node.get("description"):
            missing.append(path)
        for key, child in (node.get("properties") or {}).items():
            walk(child, f"{path}.{key}" if path else key)
        if isinstance(node.get("items"), dict) and node["items"].get("properties"):
            walk({**node["items"], "description": "-"}, f"{path}[]")
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and extra.get("properties"):
            walk({**extra, "description": "-"}, f"{path}{{}}")

    for section in ("spec", "status"):
        walk(root["properties"][section], section)
    assert not missing, "fields without a description: " + ", ".join(missing)


# -- spec.template: labels, annotations, scheduling ---------------------------------------
def pod_of(group, component):
    return m.statefulset(group, OWNER, component)["spec"]["template"]


def test_default_affinity_spreads_all_brokers_of_the_group_softly():
    for component in (m.MASTER, m.SLAVE):
        affinity = pod_of(spec(), component)["spec"]["affinity"]
        (term,) = affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert term["weight"] == 100
        # the whole group (not the component): with failover any pod may be master
        assert term["podAffinityTerm"] == {
            "labelSelector": {"matchLabels": {"brokergroup.io/group": "bg"}},
            "topologyKey": "kubernetes.io/hostname",
        }
        assert "requiredDuringSchedulingIgnoredDuringExecution" not in affinity["podAntiAffinity"]


TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "mq", "effect": "NoSchedule"}
NODE_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}
            ]
        }
    }
}


def test_template_pod_level_applies_to_every_broker_and_roles_override_it():
    group = spec(
        template={
            "pod": {
                "metadata": {"labels": {"team": "mq"}, "annotations": {"a": "pod"}},
                "tolerations": [TOLERATION],
                "nodeSelector": {"zone": "a"},
                "priorityClassName": "brokers",
                "serviceAccountName": "broker-sa",
                "imagePullSecrets": [{"name": "regcred"}],
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "zone",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"brokergroup.io/group": "bg"}},
                    }
                ],
            },
            "master": {
                "metadata": {"labels": {"tier": "master"}, "annotations": {"a": "master"}},
                "nodeSelector": {"zone": "b"},
                "affinity": NODE_AFFINITY,
            },
        }
    )
    master, slave = pod_of(group, m.MASTER), pod_of(group, m.SLAVE)
    for pod in (master, slave):
        assert pod["metadata"]["labels"]["team"] == "mq"
        assert pod["spec"]["tolerations"] == [TOLERATION]
        assert pod["spec"]["priorityClassName"] == "brokers"
        assert pod["spec"]["serviceAccountName"] == "broker-sa"
        assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
        assert pod["spec"]["topologySpreadConstraints"][0]["topologyKey"] == "zone"
        # the operator's labels and hash survive
        assert pod["metadata"]["labels"]["brokergroup.io/group"] == "bg"
        assert "brokergroup.io/config-hash" in pod["metadata"]["annotations"]
    assert master["metadata"]["labels"]["tier"] == "master"
    assert "tier" not in slave["metadata"]["labels"]
    assert master["metadata"]["annotations"]["a"] == "master"
    assert slave["metadata"]["annotations"]["a"] == "pod"
    assert master["spec"]["nodeSelector"] == {"zone": "b"}
    assert slave["spec"]["nodeSelector"] == {"zone": "a"}
    # a user affinity replaces the default anti-affinity, only where it is given
    assert master["spec"]["affinity"] == NODE_AFFINITY
    assert "podAntiAffinity" in slave["spec"]["affinity"]


def test_template_security_contexts_merge_over_the_operators():
    group = spec(
        template={
            "pod": {
                "securityContext": {"runAsUser": 20000, "fsGroup": 20000},
                "container": {"securityContext": {"readOnlyRootFilesystem": True}},
            },
            "slave": {"container": {"securityContext": {"runAsUser": 30000}}},
        }
    )
    master, slave = pod_of(group, m.MASTER)["spec"], pod_of(group, m.SLAVE)["spec"]
    assert master["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 20000,
        "fsGroup": 20000,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert master["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    assert slave["containers"][0]["securityContext"]["runAsUser"] == 30000
    assert slave["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_template_changes_change_the_pod_template_and_so_roll():
    base = pod_of(spec(), m.SLAVE)
    assert pod_of(spec(template={"slave": {"nodeSelector": {"a": "b"}}}), m.SLAVE) != base
    assert pod_of(spec(template={"slave": {"nodeSelector": {"a": "b"}}}), m.MASTER) == pod_of(
        spec(), m.MASTER
    )
    assert pod_of(spec(template={"pod": {"metadata": {"labels": {"x": "y"}}}}), m.SLAVE) != base


@pytest.mark.parametrize(
    ("template", "field"),
    [
        (
            {"pod": {"metadata": {"labels": {"brokergroup.io/group": "other"}}}},
            "spec.template.pod.metadata.labels",
        ),
        (
            {"slave": {"metadata": {"labels": {"app.kubernetes.io/component": "master"}}}},
            "spec.template.slave.metadata.labels",
        ),
        (
            {"master": {"metadata": {"labels": {"brokergroup.io/role": "slave"}}}},
            "spec.template.master.metadata.labels",
        ),
        (
            {"pod": {"metadata": {"annotations": {"brokergroup.io/restart": "x"}}}},
            "spec.template.pod.metadata.annotations",
        ),
        ({"pod": {"metadata": {"labels": ["a"]}}}, "spec.template.pod.metadata.labels"),
        ({"master": "yes"}, "spec.template.master"),
    ],
)
def test_template_may_not_take_the_operators_labels(template, field):
    with pytest.raises(SpecError) as info:
        spec(template=template)
    assert info.value.field == field
    assert field in str(info.value)


def test_crd_template_refuses_the_reserved_labels_and_annotations():
    crd = yaml.safe_load((ROOT / "crds" / "brokergroup.io_brokergroups.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    template = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["template"]
    for role in ("pod", "master", "slave"):
        level = template["properties"][role]["properties"]
        meta = level["metadata"]["properties"]
        labels_rule = meta["labels"]["x-kubernetes-validations"][0]["rule"]
        annotations_rule = meta["annotations"]["x-kubernetes-validations"][0]["rule"]
        assert all(f"'{k}'" in labels_rule for k in m.RESERVED_POD_LABELS)
        assert all(f"'{k}'" in annotations_rule for k in m.RESERVED_POD_ANNOTATIONS)
        from brokergroup_operator.spec import POD_FIELDS

        assert set(POD_FIELDS) <= set(level)


def test_restart_value_rolls_both_statefulsets():
    from dataclasses import replace

    base = spec()
    for component in (m.MASTER, m.SLAVE):
        before = pod_of(base, component)
        assert m.RESTART_ANNOTATION not in before["metadata"]["annotations"]
        first = pod_of(replace(base, restart="1"), component)
        assert first["metadata"]["annotations"][m.RESTART_ANNOTATION] == "1"
        assert first != before
        assert pod_of(replace(base, restart="2"), component) != first
        assert pod_of(replace(base, restart="1"), component) == first


def test_admin_token_secret_is_applied_first_and_mounted_by_every_broker():
    """With an admin token the group's Secret comes before anything that mounts it, broker.conf
    names the mounted file, and the token is in the Secret only (not in broker.conf, the pod
    template or an environment variable)."""
    token = "t0k3n-" + "a" * 40
    for group in (spec(), parse_spec("bg", "ns", {"image": "x", "replicationMode": "DLEDGER"})):
        items = m.children(group, OWNER, admin_token=token)
        assert items[0]["kind"] == "Secret" and items[0]["metadata"]["name"] == "bg-admin-token"
        assert base64.b64decode(items[0]["data"]["token"]).decode() == token
        conf = next(i for i in items if i["kind"] == "ConfigMap")["data"]["broker.conf"]
        assert "adminTokenFile=/etc/habroker-admin/token" in conf
        for sts in (i for i in items if i["kind"] == "StatefulSet"):
            pod = sts["spec"]["template"]["spec"]
            volume = next(v for v in pod["volumes"] if v["name"] == "admin-token")
            assert volume["secret"]["secretName"] == "bg-admin-token"
            mounts = pod["containers"][0]["volumeMounts"]
            assert {
                "name": "admin-token",
                "mountPath": "/etc/habroker-admin",
                "readOnly": True,
            } in mounts
        assert token not in json.dumps([i for i in items if i["kind"] != "Secret"])
        plain = m.children(group, OWNER)
        assert "Secret" not in {i["kind"] for i in plain}
        assert "adminTokenFile" not in json.dumps(plain)


def test_admin_tokens_differ_per_group_and_are_stable():
    from brokergroup_operator.admin_token import group_token

    key = b"k" * 32
    a = group_token(key, "ns", "bg", "uid-1")
    assert a == group_token(key, "ns", "bg", "uid-1")
    assert len({a, group_token(key, "ns", "bg", "uid-2"), group_token(key, "ns2", "bg", "uid-1"),
                group_token(b"x" * 32, "ns", "bg", "uid-1")}) == 4  # fmt: skip


def test_ha_secret_is_its_own_secret_mounted_by_every_classic_broker():
    """spec.security.haAuth (default on): the group's HA secret in Secret NAME-ha-secret, applied
    before the pods that mount it, mounted read-only at /etc/habroker-ha and named by
    broker.conf; the secret is in that Secret only (not the admin token's, nor any other
    child)."""
    token, secret = "t0k3n-" + "a" * 40, "h4-" + "b" * 40
    group = spec()
    assert group.ha_auth is True
    items = m.children(group, OWNER, admin_token=token, ha_secret=secret)
    kinds = [(i["kind"], i["metadata"]["name"]) for i in items]
    assert kinds[:2] == [("Secret", "bg-admin-token"), ("Secret", "bg-ha-secret")]
    ha, admin = items[1], items[0]
    assert {k: base64.b64decode(v).decode() for k, v in ha["data"].items()} == {"secret": secret}
    assert ha["metadata"]["ownerReferences"][0]["uid"] == "1234"
    assert list(admin["data"]) == ["token"]
    conf = next(i for i in items if i["kind"] == "ConfigMap")["data"]["broker.conf"]
    assert "haAuthSecretFile=/etc/habroker-ha/secret" in conf.splitlines()
    stses = [i for i in items if i["kind"] == "StatefulSet"]
    assert len(stses) == 2
    for sts in stses:
        pod = sts["spec"]["template"]["spec"]
        volume = next(v for v in pod["volumes"] if v["name"] == "ha-secret")
        assert volume["secret"] == {"secretName": "bg-ha-secret", "defaultMode": 0o440}
        assert {
            "name": "ha-secret",
            "mountPath": "/etc/habroker-ha",
            "readOnly": True,
        } in pod["containers"][0]["volumeMounts"]
    assert secret not in json.dumps([i for i in items if i is not ha])
    # without a secret (haAuth off, or no operator key): the classic protocol, nothing mounted
    plain = m.children(group, OWNER, admin_token=token)
    assert ("Secret", "bg-ha-secret") not in {(i["kind"], i["metadata"]["name"]) for i in plain}
    assert "haAuthSecretFile" not in json.dumps(plain)
    assert "ha-secret" not in json.dumps(plain)


def test_dledger_groups_get_no_ha_secret():
    """A DLEDGER group has no HA port: no Secret, no mount, no key, even if one is passed."""
    group = parse_spec("bg", "ns", {"image": "x", "replicationMode": "DLEDGER"})
    items = m.children(group, OWNER, admin_token="t" * 20, ha_secret="s" * 40)
    assert "ha-secret" not in json.dumps(items)
    assert "haAuthSecretFile" not in json.dumps(items)


def test_spec_security_ha_auth_and_its_reserved_key():
    assert spec().ha_auth is True
    assert spec(security={}).ha_auth is True
    assert spec(security={"haAuth": False}).ha_auth is False
    with pytest.raises(SpecError, match="haAuthSecretFile"):
        spec(brokerConfig={"haAuthSecretFile": "/tmp/x"})


def test_ha_secret_differs_from_the_admin_token_and_is_stable():
    from brokergroup_operator.admin_token import group_ha_secret, group_token

    key = b"k" * 32
    a = group_ha_secret(key, "ns", "bg", "uid-1")
    assert a == group_ha_secret(key, "ns", "bg", "uid-1")
    assert a != group_token(key, "ns", "bg", "uid-1")
    assert len(a) == 64
    others = {
        group_ha_secret(key, "ns", "bg", "uid-2"),
        group_ha_secret(key, "ns2", "bg", "uid-1"),
        group_ha_secret(b"x" * 32, "ns", "bg", "uid-1"),
    }
    assert a not in others and len(others) == 3


def test_ha_auth_is_decided_when_the_statefulsets_are_created():
    """A new group follows spec.security.haAuth; an existing one keeps what its StatefulSets
    were created with (switching needs every broker restarted at once, which a roll is not;
    groups from before the handshake keep the classic protocol)."""
    from brokergroup_operator.handlers import ha_auth_of
    from brokergroup_operator.rolling import StsInfo

    on, off = spec(), spec(security={"haAuth": False})
    assert ha_auth_of(on, []) is True
    assert ha_auth_of(off, []) is False
    with_secret = [StsInfo("bg-master", ha_auth=True), StsInfo("bg-slave", ha_auth=True)]
    without = [StsInfo("bg-master"), StsInfo("bg-slave")]
    assert ha_auth_of(on, without) is False
    assert ha_auth_of(off, with_secret) is True
    assert ha_auth_of(on, with_secret) is True


def test_the_statefulset_index_sees_the_ha_secret_mount():
    from brokergroup_operator.handlers import broker_statefulsets

    def index(sts):
        meta = sts["metadata"]
        (info,) = broker_statefulsets(
            name=meta["name"],
            namespace="ns",
            labels=meta["labels"],
            meta=meta,
            spec=sts["spec"],
            status={},
        ).values()
        return info

    group = spec()
    with_secret = m.statefulset(group, OWNER, m.MASTER, admin=True, ha_auth=True)
    assert index(with_secret).ha_auth is True
    assert index(m.statefulset(group, OWNER, m.MASTER, admin=True)).ha_auth is False
