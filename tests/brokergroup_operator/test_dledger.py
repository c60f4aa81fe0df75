"""replicationMode DLEDGER: spec checks, manifests, status derivation, leader following and
the rolling order. Pure, no cluster."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from brokergroup_operator import manifests as m
from brokergroup_operator.dledger import (
    IN_SYNC_MAX_LAG_ENTRIES,
    compute_dledger_status,
    find_leader,
    leader_event,
    recorded_leader,
    role_labels,
)
from brokergroup_operator.rolling import StsInfo, plan_dledger_roll
from brokergroup_operator.spec import SpecError, check_children, parse_spec
from brokergroup_operator.status import BrokerReport, PodInfo, status_patch
from habroker.config import BrokerConfig, read_properties

OWNER = {"name": "bg", "uid": "1234"}
ROOT = Path(__file__).resolve().parents[2]
T0 = "2030-01-01T00:00:00Z"
T1 = "2030-01-01T00:00:05Z"


def spec(**overrides):
    base = {"image": "habroker:test", "replicationMode": "DLEDGER", "replicas": 3}
    base.update(overrides)
    return parse_spec("bg", "ns", base)


def by_kind(items):
    return {(i["kind"], i["metadata"]["name"]): i for i in items}


# -- spec --------------------------------------------------------------------------------
def test_defaults():
    group = parse_spec("bg", "ns", {"image": "x", "replicationMode": "DLEDGER"})
    assert group.dledger and group.replicas == 3 and group.dledger_port == 40911
    assert not parse_spec("bg", "ns", {"image": "x"}).dledger


@pytest.mark.parametrize("replicas", [3, 5])
def test_three_or_five_peers(replicas):
    assert spec(replicas=replicas).replicas == replicas


BAD = [
    ({"replicas": 1}, "spec.replicas", "3 or 5"),
    ({"replicas": 4}, "spec.replicas", "3 or 5"),
    ({"replicas": 7}, "spec.replicas", "3 or 5"),
    ({"failover": {"enabled": True}}, "spec.failover.enabled", "elect their leader"),
    (
        {"readPolicy": {"whichBrokerWhenConsumeSlowly": 1}},
        "spec.readPolicy.whichBrokerWhenConsumeSlowly",
        "must be auto",
    ),
    ({"ports": {"dledger": 10911}}, "spec.ports", "must all differ"),
    ({"brokerConfig": {"dLegerPeers": "n0-x:1"}}, "spec.brokerConfig", "dLegerPeers"),
    ({"brokerConfig": {"dLegerSelfId": "n9"}}, "spec.brokerConfig", "dLegerSelfId"),
    ({"brokerConfig": {"enableDLegerCommitLog": "false"}}, "spec.brokerConfig", "enableDLeger"),
]


@pytest.mark.parametrize(("overrides", "field", "text"), BAD, ids=[b[1] + str(b[0]) for b in BAD])
def test_bad_dledger_specs_name_the_field(overrides, field, text):
    with pytest.raises(SpecError) as err:
        spec(**overrides)
    assert err.value.field == field
    assert text in str(err.value)


def test_classic_groups_ignore_replicas_and_may_reuse_the_dledger_port():
    group = parse_spec("bg", "ns", {"image": "x", "replicas": 4, "ports": {"client": 40911}})
    assert not group.dledger


def test_mode_switches_are_refused_against_the_existing_statefulsets():
    classic = parse_spec("bg", "ns", {"image": "x", "slaves": 2})
    check_children(classic, ["bg-master", "bg-slave"])
    check_children(spec(), ["bg-peers"])
    check_children(spec(replicas=5), ["bg-peers"])  # a resize: the membership change
    check_children(spec(), [])  # a new group
    with pytest.raises(SpecError, match="cannot change to DLEDGER") as err:
        check_children(spec(), ["bg-master", "bg-slave"])
    assert err.value.field == "spec.replicationMode"
    with pytest.raises(SpecError, match="cannot change from DLEDGER to ASYNC"):
        check_children(classic, ["bg-peers"])


def test_the_membership_is_read_from_the_annotation_not_the_replicas():
    """A peers StatefulSet scaled by hand is drift (repaired), not a resize of the group: the
    membership the operator decided is its annotation (or, for a StatefulSet from before
    membership change, the peers its pod template names)."""
    from brokergroup_operator.dledger import members_of

    sts = m.statefulset(spec(replicas=5), OWNER, m.PEER, dledger_size=(4, 3))
    sts["spec"]["replicas"] = 2
    assert members_of(sts["metadata"], sts["spec"]) == 4
    fresh = m.statefulset(spec(), OWNER, m.PEER)
    assert members_of(fresh["metadata"], fresh["spec"]) == 3 == fresh["spec"]["replicas"]
    old = {
        "template": {
            "spec": {
                "containers": [
                    {
                        "env": [
                            {
                                "name": "HABROKER_dLegerPeers",
                                "value": "n0-a:1;n1-b:1;n2-c:1;n3-d:1;n4-e:1",
                            }
                        ]
                    }
                ]
            }
        }
    }
    assert members_of({}, old) == 5
    classic = parse_spec("bg", "ns", {"image": "x"})
    slave = m.statefulset(classic, OWNER, m.SLAVE)
    assert members_of(slave["metadata"], slave["spec"]) is None


# -- manifests ---------------------------------------------------------------------------
def test_children_of_a_dledger_group():
    items = by_kind(m.children(spec(), OWNER, network_policies=True))
    assert set(items) == {
        ("ConfigMap", "bg-config"),
        ("Service", "bg-peers"),
        ("Service", "bg"),
        ("Service", "bg-namesrv"),
        ("NetworkPolicy", "bg-brokers"),
        ("StatefulSet", "bg-peers"),
        ("PodDisruptionBudget", "bg"),
    }
    headless = items[("Service", "bg-peers")]["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    assert {p["name"]: p["port"] for p in headless["ports"]} == {
        "client": 10911,
        "http": 10913,
        "dledger": 40911,
    }
    # producers reach the leader: the pod the operator labels role=master
    assert items[("Service", "bg")]["spec"]["selector"] == {
        "brokergroup.io/group": "bg",
        "brokergroup.io/role": "master",
    }
    policy = items[("NetworkPolicy", "bg-brokers")]["spec"]["ingress"]
    inside = next(rule for rule in policy if "from" in rule)
    assert {"protocol": "TCP", "port": "dledger"} in inside["ports"]


def test_peers_statefulset():
    sts = m.statefulset(spec(replicas=5), OWNER, m.PEER)
    assert sts["metadata"]["name"] == "bg-peers"
    assert sts["spec"]["serviceName"] == "bg-peers"
    assert sts["spec"]["replicas"] == 5
    assert sts["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert sts["spec"]["selector"]["matchLabels"] == {
        "brokergroup.io/group": "bg",
        "app.kubernetes.io/component": "peer",
    }
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] == "Retain"
    pod = sts["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    # the membership is in broker.conf, not the template: changing it restarts nobody
    assert "HABROKER_dLegerPeers" not in env
    assert "HABROKER_dLegerSelfId" not in env and env["HABROKER_brokerRole"] == "SLAVE"
    assert sts["metadata"]["annotations"]["brokergroup.io/dledger-members"] == "5"
    grown = m.statefulset(spec(replicas=5), OWNER, m.PEER, dledger_size=(4, 3))
    assert grown["spec"]["replicas"] == 3
    assert grown["spec"]["template"] == sts["spec"]["template"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["dledger"] == 40911
    # the same security context as the classic pods: non-root, no privileges
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # anti-affinity between the peers by default (a node's loss costs one vote)
    (term,) = pod["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["podAffinityTerm"] == {
        "labelSelector": {"matchLabels": {"brokergroup.io/group": "bg"}},
        "topologyKey": "kubernetes.io/hostname",
    }


def test_peers_string_names_every_peer_by_stable_dns():
    assert m.dledger_peers(spec(), "cluster.local") == ";".join(
        f"n{i}-bg-peers-{i}.bg-peers.ns.svc.cluster.local:40911" for i in range(3)
    )
    custom = spec(replicas=5, ports={"dledger": 30000})
    peers = m.dledger_peers(custom, "example.org").split(";")
    assert len(peers) == 5
    assert peers[4] == "n4-bg-peers-4.bg-peers.ns.svc.example.org:30000"


def test_peer_command_derives_self_id_and_broker_id_in_a_real_shell():
    sts = m.statefulset(spec(), OWNER, m.PEER)
    script = sts["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    probe = script.replace(
        "exec habroker serve --config /etc/habroker/broker.conf",
        'echo "$HABROKER_dLegerSelfId $HABROKER_brokerId"',
    )
    for ordinal in (0, 2, 4):
        out = subprocess.run(
            ["/bin/sh", "-c", probe],
            env={"HOSTNAME": f"bg-peers-{ordinal}"},
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.split() == [f"n{ordinal}", str(ordinal + 1)]


def test_broker_conf_of_a_peer_loads_in_habroker(tmp_path):
    group = spec()
    path = tmp_path / "broker.conf"
    path.write_text(m.config_map(group, OWNER)["data"]["broker.conf"])
    props = read_properties(path)
    assert props["enableDLegerCommitLog"] == "true"
    assert props["dLegerGroup"] == "bg"
    env = {f"HABROKER_{k}": v for k, v in m.peer_env_properties(group, 1).items()}
    config = BrokerConfig.load(path, environ=env)
    assert config.brokerId == 2
    known = {**config.to_properties(), **config.unimplemented}
    assert known["dLegerSelfId"] == "n1"
    assert known["dLegerPeers"].split(";")[1] == (
        "n1-bg-peers-1.bg-peers.ns.svc.cluster.local:40911"
    )


def test_pods_of_the_peers_are_brokers_of_the_group():
    assert m.broker_id_of_pod("bg-peers-0", "bg") == 1
    assert m.broker_id_of_pod("bg-peers-4", "bg") == 5
    assert m.broker_id_of_pod("bg-peers-x", "bg") is None
    assert m.group_pods(spec()) == ["bg-peers-0", "bg-peers-1", "bg-peers-2"]


def test_template_pod_level_reaches_the_peers():
    group = spec(
        template={
            "pod": {"metadata": {"labels": {"team": "mq"}}, "priorityClassName": "high"},
            "slave": {"metadata": {"labels": {"ignored": "yes"}}},
        }
    )
    pod = m.statefulset(group, OWNER, m.PEER)["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "mq"
    assert "ignored" not in pod["metadata"]["labels"]
    assert pod["spec"]["priorityClassName"] == "high"


def test_example_is_a_valid_dledger_group():
    (doc,) = [d for d in yaml.safe_load_all((ROOT / "examples" / "dledger.yaml").read_text()) if d]
    group = parse_spec(doc["metadata"]["name"], "default", doc["spec"])
    assert group.dledger and group.replicas == 3


# -- status ------------------------------------------------------------------------------
def pod(ordinal, ready=True, revision="r1", deleting=False, role=None):
    name = f"bg-peers-{ordinal}"
    return PodInfo(
        name=name,
        broker_id=ordinal + 1,
        uid=name,
        ip=f"10.0.0.{10 + ordinal}",
        ready=ready,
        revision=revision,
        deleting=deleting,
        role=role,
    )


def view(ordinal, role, term, end, committed=None, peers=None, leader="n0", members=3):
    return {
        "brokerId": 0 if role == "LEADER" else ordinal + 1,
        "maxOffset": end * 100,
        "dledger": {
            "group": "bg",
            "selfId": f"n{ordinal}",
            "role": role,
            "term": term,
            "leaderId": leader,
            "leaderAddr": f"bg-peers-{leader[1:]}:40911",
            "ledgerBeginIndex": 0,
            "ledgerEndIndex": end,
            "ledgerEndTerm": term,
            "committedIndex": end if committed is None else committed,
            "elections": term,
            # every peer lists its membership; only the leader knows the others' marks
            "peers": peers or [{"id": f"n{i}", "matchIndex": -1} for i in range(members)],
        },
    }


def leader_peers(lags, leader=0, dead=()):
    return [
        {
            "id": f"n{i}",
            "addr": f"bg-peers-{i}:40911",
            "matchIndex": 100 - lag,
            "lagEntries": lag,
            "self": i == leader,
            "live": i not in dead,
        }
        for i, lag in enumerate(lags)
    ]


def quorum(lags=(0, 0, 0), leader=0, term=3, dead=()):
    reports = []
    for i, lag in enumerate(lags):
        if i in dead:
            reports.append(BrokerReport(pod(i), error="connection refused"))
        elif i == leader:
            reports.append(
                BrokerReport(
                    pod(i),
                    view(i, "LEADER", term, 100, peers=leader_peers(lags, leader, dead),
                         leader=f"n{leader}"),
                )
            )  # fmt: skip
        else:
            reports.append(
                BrokerReport(
                    pod(i),
                    view(i, "FOLLOWER", term, 100 - lag, leader=f"n{leader}", members=len(lags)),
                )
            )
    return reports


def conds(status):
    return {c["type"]: c for c in status["conditions"]}


def test_healthy_quorum():
    status, events = compute_dledger_status(spec(), 1, quorum(leader=1), None, T0)
    d = status["dledger"]
    assert d["leader"] == "bg-peers-1" and d["leaderId"] == "n1" and d["term"] == 3
    assert d["committedIndex"] == 100 and d["ledgerEndIndex"] == 100
    assert [p["id"] for p in d["peers"]] == ["n0", "n1", "n2"]
    assert all(p["inSync"] and p["live"] and p["lagEntries"] == 0 for p in d["peers"])
    assert d["peers"][1]["role"] == "LEADER" and d["peers"][0]["role"] == "FOLLOWER"
    assert status["phase"] == "Running"
    assert status["master"]["pod"] == "bg-peers-1"
    assert status["master"]["address"] == "10.0.0.11:10911"
    assert [s["pod"] for s in status["slaves"]] == ["bg-peers-0", "bg-peers-2"]
    assert status["inSyncSlaves"] == "2/2"
    c = conds(status)
    assert c["Ready"]["status"] == "True" and c["Ready"]["reason"] == "LeaderServing"
    assert c["Replicating"]["reason"] == "AllPeersLive"
    assert c["InSync"]["reason"] == "AllPeersCaughtUp"
    assert events == []  # nothing on the very first status
    assert status_patch(status, status) == {}


def test_lag_comes_from_the_leader_and_a_dead_peer_degrades_the_group():
    lags = (0, 5, IN_SYNC_MAX_LAG_ENTRIES + 1)
    status, _ = compute_dledger_status(spec(), 1, quorum(lags), None, T0)
    peers = {p["id"]: p for p in status["dledger"]["peers"]}
    assert peers["n1"]["lagEntries"] == 5 and peers["n1"]["inSync"]
    assert peers["n1"]["matchIndex"] == 95 and peers["n1"]["ledgerEndIndex"] == 95
    assert not peers["n2"]["inSync"]
    assert status["phase"] == "Degraded"
    assert conds(status)["InSync"]["reason"] == "PeersBehind"
    assert "bg-peers-2" in conds(status)["InSync"]["message"]

    previous = status
    status, events = compute_dledger_status(spec(), 1, quorum(dead=(2,)), previous, T1)
    peers = {p["id"]: p for p in status["dledger"]["peers"]}
    assert peers["n2"]["live"] is False and peers["n2"]["reachable"] is False
    c = conds(status)
    assert c["Ready"]["status"] == "True"
    assert c["Replicating"]["status"] == "True" and c["Replicating"]["reason"] == "QuorumLive"
    assert "bg-peers-2" in c["Replicating"]["message"]
    assert status["phase"] == "Degraded"
    assert events == []  # n1 stayed caught up, n2 is still behind
    status, events = compute_dledger_status(spec(), 1, quorum(), status, T1)
    assert [(e.reason, e.message) for e in events] == [
        ("PeerCaughtUp", "bg-peers-2 (n2) caught up")
    ]
    status, events = compute_dledger_status(spec(), 1, quorum(lags=(0, 2000, 0)), status, T1)
    assert [e.reason for e in events] == ["PeerBehind"]


def test_quorum_lost_and_no_leader():
    status, _ = compute_dledger_status(spec(), 1, quorum(dead=(1, 2)), None, T0)
    assert conds(status)["Replicating"]["reason"] == "QuorumLost"
    healthy, _ = compute_dledger_status(spec(), 1, quorum(), None, T0)
    electing = [BrokerReport(pod(i), view(i, "CANDIDATE", 4, 100, leader="")) for i in range(2)] + [
        BrokerReport(pod(2), error="timeout")
    ]
    status, events = compute_dledger_status(spec(), 1, electing, healthy, T1)
    assert "leader" not in status["dledger"] and status["dledger"]["term"] == 4
    c = conds(status)
    assert c["Ready"]["status"] == "False" and c["Ready"]["reason"] == "NoLeader"
    assert "2/3 peers answer" in c["Ready"]["message"]
    assert status["phase"] == "Unavailable"
    assert "LeaderLost" in [e.reason for e in events]
    # committedIndex stays visible while nobody leads
    assert status["dledger"]["committedIndex"] == 100


def test_a_stale_leader_loses_to_the_higher_term():
    reports = quorum(leader=0, term=3)
    reports[2] = BrokerReport(pod(2), view(2, "LEADER", 4, 100, leader="n2"))
    leader = find_leader(spec(), reports)
    assert leader is not None and (leader.pod, leader.id, leader.term) == ("bg-peers-2", "n2", 4)


def test_a_deleted_leader_pod_does_not_lead():
    reports = quorum(leader=0)
    reports[0] = BrokerReport(pod(0, deleting=True), reports[0].status)
    assert find_leader(spec(), reports) is None


def test_leader_elected_each_time_the_leader_or_term_changes():
    leader = find_leader(spec(), quorum(leader=1, term=3))
    event = leader_event(None, leader)
    assert event is not None and event.reason == "LeaderElected"
    assert event.message == "bg-peers-1 (n1) is leader at term 3"
    assert leader_event(("bg-peers-1", 3), leader) is None
    again = leader_event(("bg-peers-1", 2), leader)
    assert again is not None and "(was bg-peers-1 at term 2)" in again.message
    moved = leader_event(("bg-peers-0", 3), find_leader(spec(), quorum(leader=2, term=4)))
    assert moved is not None and moved.message.startswith("bg-peers-2 (n2) is leader at term 4")
    assert leader_event(("bg-peers-0", 3), None) is None
    status, _ = compute_dledger_status(spec(), 1, quorum(leader=2, term=4), None, T0)
    assert recorded_leader(status) == ("bg-peers-2", 4)
    assert recorded_leader({}) is None


def test_the_leader_gets_the_master_label_and_only_changes_are_made():
    leader = find_leader(spec(), quorum(leader=1))
    pods = {"bg-peers-0": "master", "bg-peers-1": "slave", "bg-peers-2": None}
    assert role_labels(spec(), leader, pods) == {
        "bg-peers-0": "slave",
        "bg-peers-1": "master",
        "bg-peers-2": "slave",
    }
    done = {"bg-peers-0": "slave", "bg-peers-1": "master", "bg-peers-2": "slave"}
    assert role_labels(spec(), leader, done) == {}
    assert role_labels(spec(), None, pods) == {}  # during an election nothing moves


# -- rolling -----------------------------------------------------------------------------
STS = StsInfo(name="bg-peers", generation=2, observed_generation=2, update_revision="r2")


def dledger_of(reports):
    return compute_dledger_status(spec(), 1, reports, None, T0)[0]["dledger"]


def test_roll_followers_first_highest_ordinal_first():
    pods = [pod(i, revision="r1") for i in range(3)]
    d = dledger_of(quorum(leader=1))
    decision = plan_dledger_roll(pods, STS, d)
    assert decision.delete == "bg-peers-2"
    assert decision.pending == ["bg-peers-2", "bg-peers-0", "bg-peers-1"]
    pods[2] = pod(2, revision="r2")
    decision = plan_dledger_roll(pods, STS, d)
    assert decision.delete == "bg-peers-0" and decision.transfer_to is None


def test_roll_transfers_leadership_before_the_leader_restarts():
    pods = [pod(0, revision="r2"), pod(1, revision="r1"), pod(2, revision="r2")]
    decision = plan_dledger_roll(pods, STS, dledger_of(quorum(lags=(0, 0, 3), leader=1)))
    assert decision.delete is None
    # the up-to-date follower with the least lag
    assert (decision.transfer_to, decision.transferee) == ("bg-peers-0", "n0")
    assert decision.pending == ["bg-peers-1"]
    assert "transferring leadership to bg-peers-0" in decision.message
    # once transferred, the old leader is a follower and is restarted
    decision = plan_dledger_roll(pods, STS, dledger_of(quorum(leader=0, term=4)))
    assert decision.delete == "bg-peers-1"


def test_roll_waits_for_ready_pods_caught_up_peers_and_a_leader():
    d = dledger_of(quorum(leader=0))
    busy = [pod(0), pod(1, ready=False), pod(2)]
    assert "waiting for bg-peers-1 to be Ready" in plan_dledger_roll(busy, STS, d).message
    lagging = dledger_of(quorum(lags=(0, 0, IN_SYNC_MAX_LAG_ENTRIES + 1)))
    decision = plan_dledger_roll([pod(i) for i in range(3)], STS, lagging)
    assert decision.delete is None and "bg-peers-2 to catch up" in decision.message
    no_leader = dledger_of([BrokerReport(pod(i), error="x") for i in range(3)])
    decision = plan_dledger_roll([pod(i) for i in range(3)], STS, no_leader)
    assert decision.delete is None and "elect a leader" in decision.message
    # no up-to-date follower to hand leadership to: the leader waits
    decision = plan_dledger_roll(
        [pod(0, revision="r1"), pod(1, revision="r2"), pod(2, revision="r2")],
        STS,
        dledger_of(quorum(lags=(0, 0, IN_SYNC_MAX_LAG_ENTRIES + 1), leader=0)),
    )
    assert decision.transfer_to is None and decision.delete is None


def test_roll_nothing_to_do_and_unobserved_spec():
    assert plan_dledger_roll([pod(i, revision="r2") for i in range(3)], STS, {}).pending == []
    unobserved = StsInfo(name="bg-peers", generation=3, observed_generation=2)
    assert "observe its spec" in plan_dledger_roll([pod(0)], unobserved, {}).message
    assert plan_dledger_roll([pod(0)], None, {}).pending == []


# -- the sweep's I/O, against stand-in brokers -------------------------------------------
class FakeBrokers:
    """The broker calls a DLEDGER sweep makes, answered from a table (address -> status)."""

    def __init__(self, statuses):
        self.statuses = statuses
        self.calls = []

    async def status(self, address):
        from brokergroup_operator.brokerapi import BrokerAPIError

        if address not in self.statuses:
            raise BrokerAPIError("connection refused")
        return self.statuses[address]

    async def patch_config(self, address, body):
        self.calls.append(("config", address))

    async def subscription_groups(self, address):
        self.calls.append(("groups", address))
        return {}

    async def put_subscription_group(self, address, group, body):
        self.calls.append(("group", address, group))

    async def leadership_transfer(self, address, transferee_id, seconds=15.0):
        self.calls.append(("transfer", address, transferee_id))
        return {}


async def run_sweep(reports, pods, sts=STS):
    import logging

    from brokergroup_operator.settings import Settings
    from brokergroup_operator.sweep import GroupState, sweep

    statuses = {f"{r.pod.ip}:10913": r.status for r in reports if r.status is not None}
    brokers = FakeBrokers(statuses)
    deleted = []

    async def delete_pod(name):
        deleted.append(name)
        return True

    result = await sweep(
        brokers=brokers,
        settings=Settings(),
        group=spec(),
        pods=pods,
        statefulsets={"bg-peers": sts},
        previous={},
        state=GroupState(),
        generation=1,
        delete_pod=delete_pod,
        logger=logging.getLogger("test"),
        now=T0,
    )
    return result, brokers.calls, deleted


async def test_sweep_reports_the_quorum_and_restarts_an_outdated_follower():
    reports = quorum(leader=1)
    pods = [pod(0, revision="r2"), pod(1, revision="r1"), pod(2, revision="r1")]
    result, calls, deleted = await run_sweep(reports, pods)
    assert result.status["dledger"]["leader"] == "bg-peers-1"
    assert result.status["rollout"]["pending"] == ["bg-peers-2", "bg-peers-1"]
    assert result.status["phase"] == "Updating"
    assert deleted == ["bg-peers-2"]
    assert [e.reason for e in result.events] == ["RollingRestart"]
    # the read policy's subscription groups are read from the leader
    assert ("groups", "10.0.0.11:10913") in calls
    assert not [c for c in calls if c[0] == "transfer"]


async def test_sweep_transfers_leadership_away_from_an_outdated_leader():
    reports = quorum(leader=1)
    pods = [pod(0, revision="r2"), pod(1, revision="r1"), pod(2, revision="r2")]
    result, calls, deleted = await run_sweep(reports, pods)
    assert ("transfer", "10.0.0.11:10913", "n0") in calls
    assert deleted == []  # the old leader is restarted at a later sweep, as a follower
    (event,) = [e for e in result.events if e.reason == "LeadershipTransferred"]
    assert event.message == "bg-peers-0 (n0) leads; bg-peers-1 is restarted next as a follower"
