"""Status computation, read-policy choice, wiring and rolling decisions: pure, no cluster."""

from __future__ import annotations

from brokergroup_operator.policy import (
    choose_read_broker,
    config_patch,
    desired_config,
    subscription_group_updates,
)
from brokergroup_operator.rolling import StsInfo, plan_roll
from brokergroup_operator.spec import parse_spec
from brokergroup_operator.status import (
    BrokerReport,
    Observation,
    PodInfo,
    compute_status,
    status_patch,
)
from brokergroup_operator.wiring import master_target, rewire_plan

T0 = "2030-01-01T00:00:00Z"
T1 = "2030-01-01T00:00:05Z"
MASTER_HA = "bg-master-0.bg-master.ns.svc.cluster.local:10912"


def group(**overrides):
    base = {"image": "habroker:test", "slaves": 2, "replicationMode": "SYNC"}
    base.update(overrides)
    return parse_spec("bg", "ns", base)


def pod(broker_id, ip, ready=True, revision="r1", deleting=False):
    name = "bg-master-0" if broker_id == 0 else f"bg-slave-{broker_id - 1}"
    return PodInfo(
        name=name,
        broker_id=broker_id,
        uid=name,
        ip=ip,
        ready=ready,
        revision=revision,
        deleting=deleting,
    )


def master_status(max_offset, slaves):
    return {
        "brokerId": 0,
        "role": "SYNC_MASTER",
        "maxOffset": max_offset,
        "confirmOffset": max_offset,
        "readPolicy": {"slaveReadEnable": False, "accessMessageInMemoryMaxRatio": 40},
        "master": {
            "push2SlaveMaxOffset": max(s[1] for s in slaves) if slaves else 0,
            "connectionCount": len(slaves),
            "inSyncSlaves": sum(1 for s in slaves if s[2]),
            "slaves": [
                {
                    "address": f"{ip}:5{i}000",
                    "ackOffset": ack,
                    "lagBytes": max_offset - ack,
                    "lastReportAgeMs": 100,
                    "inSync": in_sync,
                    "connectedSeconds": 3.0,
                }
                for i, (ip, ack, in_sync) in enumerate(slaves)
            ],
        },
    }


def slave_status(broker_id, max_offset, connected=True, master=MASTER_HA):
    return {
        "brokerId": broker_id,
        "role": "SLAVE",
        "maxOffset": max_offset,
        "readPolicy": {"slaveReadEnable": False, "accessMessageInMemoryMaxRatio": 40},
        "slave": {"masterAddress": master, "connected": connected, "maxOffset": max_offset},
    }


def healthy(max_offset=1000, acks=(1000, 1000), in_sync=(True, True)):
    ips = ["10.0.0.11", "10.0.0.12"]
    master = BrokerReport(
        pod(0, "10.0.0.10"),
        master_status(max_offset, list(zip(ips, acks, in_sync, strict=True))),
    )
    slaves = {
        i + 1: BrokerReport(pod(i + 1, ips[i]), slave_status(i + 1, acks[i]))
        for i in range(len(acks))
    }
    return Observation(master=master, slaves=slaves)


def conditions(status):
    return {c["type"]: c for c in status["conditions"]}


def test_healthy_group():
    status, events = compute_status(group(), 3, healthy(), None, T0)
    assert status["observedGeneration"] == 3
    assert status["phase"] == "Running"
    assert status["inSyncSlaves"] == "2/2"
    assert status["maxLagBytes"] == 0
    assert status["master"] == {
        "pod": "bg-master-0",
        "reachable": True,
        "address": "10.0.0.10:10911",
        "maxOffset": 1000,
        "confirmOffset": 1000,
    }
    assert status["slaves"][0] == {
        "brokerId": 1,
        "pod": "bg-slave-0",
        "address": "10.0.0.11:10911",
        "ackOffset": 1000,
        "lagBytes": 0,
        "connected": True,
        "inSync": True,
    }
    cond = conditions(status)
    assert cond["Ready"]["status"] == "True"
    assert cond["Replicating"]["status"] == "True"
    assert cond["InSync"]["status"] == "True"
    assert cond["SpecValid"]["status"] == "True"
    assert events == []  # nothing to report on the first status


def test_lagging_slave_and_events():
    first, _ = compute_status(group(), 1, healthy(), None, T0)
    obs = healthy(max_offset=5000, acks=(5000, 1000), in_sync=(True, False))
    second, events = compute_status(group(), 1, obs, first, T1)
    assert second["phase"] == "Degraded"
    assert second["inSyncSlaves"] == "1/2"
    assert second["maxLagBytes"] == 4000
    assert second["slaves"][1]["lagBytes"] == 4000
    cond = conditions(second)
    assert cond["InSync"]["status"] == "False"
    assert cond["InSync"]["reason"] == "SlavesOutOfSync"
    assert "brokerId 2" in cond["InSync"]["message"]
    assert cond["InSync"]["lastTransitionTime"] == T1
    assert cond["Ready"]["lastTransitionTime"] == T0  # unchanged condition keeps its time
    assert [(e.type, e.reason) for e in events] == [("Warning", "SlaveOutOfSync")]
    third, events = compute_status(
        group(), 1, healthy(max_offset=5000, acks=(5000, 5000)), second, T1
    )
    assert [(e.type, e.reason) for e in events] == [("Normal", "SlaveCaughtUp")]
    assert third["phase"] == "Running"


def test_stopped_slave():
    first, _ = compute_status(group(), 1, healthy(), None, T0)
    obs = healthy()
    # the master no longer lists slave 2 and the slave does not answer
    obs.master.status["master"]["slaves"].pop(1)  # type: ignore[index]
    obs.slaves[2] = BrokerReport(pod(2, "10.0.0.12", ready=False), error="connection refused")
    second, events = compute_status(group(), 1, obs, first, T1)
    slave = second["slaves"][1]
    assert slave["connected"] is False and slave["inSync"] is False
    cond = conditions(second)
    assert cond["Replicating"]["status"] == "True"  # one slave still replicates
    assert cond["Replicating"]["reason"] == "SlavesDisconnected"
    assert cond["InSync"]["status"] == "False"
    assert ("Warning", "SlaveDisconnected") in [(e.type, e.reason) for e in events]


def test_master_unreachable_keeps_last_offset():
    first, _ = compute_status(group(), 1, healthy(), None, T0)
    obs = healthy()
    obs.master = BrokerReport(pod(0, "10.0.0.10", ready=False), error="timeout")
    second, events = compute_status(group(), 1, obs, first, T1)
    assert second["phase"] == "Unavailable"
    assert second["master"]["maxOffset"] == 1000
    assert second["master"]["reachable"] is False
    cond = conditions(second)
    assert cond["Ready"]["reason"] == "MasterUnreachable" and "timeout" in cond["Ready"]["message"]
    # slaves' own reports are used while the master is away
    assert second["slaves"][0]["connected"] is True
    assert ("Warning", "MasterUnreachable") in [(e.type, e.reason) for e in events]


def test_nothing_running_yet():
    obs = Observation(master=BrokerReport(None, error="pod does not exist"), slaves={})
    status, _ = compute_status(group(), 1, obs, None, T0)
    assert status["phase"] == "Pending"
    assert [s["pod"] for s in status["slaves"]] == ["bg-slave-0", "bg-slave-1"]
    assert conditions(status)["Ready"]["status"] == "False"


def test_master_changed_event():
    first, _ = compute_status(group(), 1, healthy(), None, T0)
    obs = healthy()
    obs.master = BrokerReport(pod(0, "10.0.0.99"), obs.master.status)
    _, events = compute_status(group(), 1, obs, first, T1)
    assert ("Normal", "MasterChanged") in [(e.type, e.reason) for e in events]


def test_no_slaves_async():
    g = group(replicationMode="ASYNC", slaves=0)
    obs = Observation(master=BrokerReport(pod(0, "10.0.0.10"), master_status(10, [])), slaves={})
    status, _ = compute_status(g, 1, obs, None, T0)
    assert status["phase"] == "Running"
    assert status["inSyncSlaves"] == "0/0"
    assert conditions(status)["InSync"]["reason"] == "NoSlaves"


def test_sync_master_without_in_sync_slave_is_not_ready():
    obs = healthy(acks=(0, 0), in_sync=(False, False), max_offset=10**9)
    status, _ = compute_status(group(), 1, obs, None, T0)
    assert conditions(status)["Ready"]["reason"] == "NoInSyncSlave"


def test_spec_error_and_rollout_phase():
    status, _ = compute_status(
        group(),
        1,
        Observation(
            master=healthy().master,
            slaves=healthy().slaves,
            spec_error=("InvalidBrokerConfig", "bad"),
        ),
        None,
        T0,
    )
    assert status["phase"] == "Invalid"
    assert conditions(status)["SpecValid"]["reason"] == "InvalidBrokerConfig"
    obs = healthy()
    obs.rollout = {"pending": ["bg-slave-1"], "message": "restarting"}
    status, _ = compute_status(group(), 1, obs, None, T0)
    assert status["phase"] == "Updating"
    assert status["rollout"]["pending"] == ["bg-slave-1"]


def test_status_patch_only_on_change():
    status, _ = compute_status(group(), 1, healthy(), None, T0)
    again, _ = compute_status(group(), 1, healthy(), status, T1)
    assert status_patch(status, again) == {}
    moved, _ = compute_status(group(), 1, healthy(max_offset=2000, acks=(2000, 2000)), status, T1)
    patch = status_patch(status, moved)
    assert set(patch) == {"master", "slaves"}
    obs = healthy()
    obs.rollout = {"pending": ["x"], "message": "m"}
    rolling, _ = compute_status(group(), 1, obs, None, T0)
    assert status_patch(rolling, status)["rollout"] is None


def test_duplicate_master_entries_take_the_latest_report():
    obs = healthy()
    entries = obs.master.status["master"]["slaves"]  # type: ignore[index]
    entries.append(
        {"address": "10.0.0.11:60000", "ackOffset": 10, "lastReportAgeMs": 9000, "inSync": False}
    )
    status, _ = compute_status(group(), 1, obs, None, T0)
    assert status["slaves"][0]["ackOffset"] == 1000


def test_slaves_sharing_an_ip_are_told_apart_by_their_ha_address_or_broker_id():
    """Two slaves behind one IP (host networking, a proxy): the host alone cannot tell them apart."""
    shared = "10.0.0.50"
    master = BrokerReport(
        pod(0, "10.0.0.10"), master_status(1000, [(shared, 400, False), (shared, 1000, True)])
    )
    rows = master.status["master"]["slaves"]  # type: ignore[index]
    s1 = slave_status(1, 400)
    s1["slave"]["localAddress"] = rows[0]["address"]  # slave 1 names its own HA connection
    rows[1]["brokerId"] = 2  # slave 2 is known to the master by its announced id
    obs = Observation(
        master=master,
        slaves={
            1: BrokerReport(pod(1, shared), s1),
            2: BrokerReport(pod(2, shared), slave_status(2, 1000)),
        },
    )
    status, _ = compute_status(group(), 1, obs, None, T0)
    by_id = {s["brokerId"]: s for s in status["slaves"]}
    assert (by_id[1]["ackOffset"], by_id[1]["inSync"]) == (400, False)
    assert (by_id[2]["ackOffset"], by_id[2]["inSync"]) == (1000, True)


# -- policy --------------------------------------------------------------------------------
def entries(*lags, in_sync=None):
    in_sync = in_sync or [True] * len(lags)
    return [
        {"brokerId": i + 1, "lagBytes": lag, "connected": True, "inSync": ok}
        for i, (lag, ok) in enumerate(zip(lags, in_sync, strict=True))
    ]


def test_auto_picks_most_caught_up_in_sync_slave():
    policy = group().read_policy
    assert choose_read_broker(policy, entries(500, 10, 0), None)[0] == 3
    assert (
        choose_read_broker(policy, entries(500, 10, 0, in_sync=[True, True, False]), None)[0] == 2
    )
    assert choose_read_broker(policy, entries(5, 5), None)[0] == 1  # tie: lowest brokerId


def test_auto_hysteresis_and_following():
    policy = group().read_policy
    # current choice within the hysteresis of the best: kept
    assert choose_read_broker(policy, entries(100, 0), 1, hysteresis_bytes=1000)[0] == 1
    # far behind: switch
    assert choose_read_broker(policy, entries(10_000, 0), 1, hysteresis_bytes=1000)[0] == 2
    # current fell out of sync: switch
    assert choose_read_broker(policy, entries(0, 0, in_sync=[False, True]), 1)[0] == 2


def test_auto_without_in_sync_slave_uses_master():
    policy = group().read_policy
    which, why = choose_read_broker(policy, entries(1, 1, in_sync=[False, False]), 2)
    assert which == 0 and "master" in why


def test_fixed_policy():
    policy = group(readPolicy={"whichBrokerWhenConsumeSlowly": 2}).read_policy
    assert choose_read_broker(policy, entries(0, 10**9, in_sync=[True, False]), 1)[0] == 2


def test_config_patch_and_group_updates():
    policy = group(
        readPolicy={"slaveReadEnable": True, "accessMessageInMemoryMaxRatio": 30}
    ).read_policy
    desired = desired_config(policy)
    have = {"readPolicy": {"slaveReadEnable": False, "accessMessageInMemoryMaxRatio": 30}}
    assert config_patch(desired, have) == {"slaveReadEnable": True}
    assert config_patch(desired, {"readPolicy": desired}) == {}
    assert config_patch(desired, None) == {}
    groups = {
        "g1": {
            "groupName": "g1",
            "brokerId": 0,
            "whichBrokerWhenConsumeSlowly": 1,
            "consumeEnable": True,
        },
        "g2": {"groupName": "g2", "whichBrokerWhenConsumeSlowly": 2},
    }
    assert subscription_group_updates(2, groups) == {
        "g1": {"brokerId": 0, "whichBrokerWhenConsumeSlowly": 2, "consumeEnable": True}
    }


# -- wiring --------------------------------------------------------------------------------
def test_rewire_only_slaves_pointing_elsewhere_or_stranded():
    g = group()
    target = master_target(g, "dns", "10.0.0.10", "cluster.local")
    assert target is not None and target.ha_address == MASTER_HA
    assert target.http_address == MASTER_HA.replace("10912", "10913")  # httpListenPort
    slaves = {
        1: BrokerReport(pod(1, "10.0.0.11"), slave_status(1, 0)),
        2: BrokerReport(pod(2, "10.0.0.12"), slave_status(2, 0, master="old:10912")),
        3: BrokerReport(pod(3, "10.0.0.13"), error="down"),
    }
    assert list(rewire_plan(target, slaves, master_moved=False)) == [2]
    slaves[1] = BrokerReport(pod(1, "10.0.0.11"), slave_status(1, 0, connected=False))
    assert list(rewire_plan(target, slaves, master_moved=True)) == [1, 2]
    body = rewire_plan(target, slaves, master_moved=False)[2]
    assert body == {"haMasterAddress": MASTER_HA, "masterHttpAddress": target.http_address}


def test_pod_ip_wiring_follows_the_master_pod():
    g = group()
    assert master_target(g, "pod-ip", None, "cluster.local") is None
    target = master_target(g, "pod-ip", "10.0.0.10", "cluster.local")
    assert target is not None and target.ha_address == "10.0.0.10:10912"
    assert target.http_address == "10.0.0.10:10913"
    slaves = {1: BrokerReport(pod(1, "10.0.0.11"), slave_status(1, 0, master=MASTER_HA))}
    assert (
        rewire_plan(target, slaves, master_moved=False)[1]["haMasterAddress"] == "10.0.0.10:10912"
    )


# -- rolling -------------------------------------------------------------------------------
MSTS = StsInfo("bg-master", generation=2, observed_generation=2, update_revision="r2", replicas=1)
SSTS = StsInfo("bg-slave", generation=2, observed_generation=2, update_revision="r2", replicas=2)
IN_SYNC = entries(0, 0)


def test_roll_slaves_first_highest_id_first():
    pods_m = [pod(0, "a", revision="r1")]
    pods_s = [pod(1, "b", revision="r1"), pod(2, "c", revision="r1")]
    decision = plan_roll(pods_m, pods_s, MSTS, SSTS, IN_SYNC, 2)
    assert decision.delete == "bg-slave-1"
    assert decision.pending == ["bg-slave-1", "bg-slave-0", "bg-master-0"]


def test_roll_waits_for_ready_pods():
    pods_m = [pod(0, "a", revision="r1")]
    pods_s = [pod(1, "b", revision="r1"), pod(2, "c", revision="r2", ready=False)]
    decision = plan_roll(pods_m, pods_s, MSTS, SSTS, IN_SYNC, 2)
    assert decision.delete is None and "bg-slave-1" in decision.message


def test_roll_master_only_while_a_slave_is_in_sync():
    pods_m = [pod(0, "a", revision="r1")]
    pods_s = [pod(1, "b", revision="r2"), pod(2, "c", revision="r2")]
    assert plan_roll(pods_m, pods_s, MSTS, SSTS, IN_SYNC, 2).delete == "bg-master-0"
    stuck = plan_roll(pods_m, pods_s, MSTS, SSTS, entries(0, 0, in_sync=[False, False]), 2)
    assert stuck.delete is None and "in sync" in stuck.message
    assert stuck.as_status() == {"pending": ["bg-master-0"], "message": stuck.message}


def test_roll_master_without_slaves_and_nothing_to_do():
    assert plan_roll([pod(0, "a", revision="r1")], [], MSTS, SSTS, [], 0).delete == "bg-master-0"
    done = plan_roll(
        [pod(0, "a", revision="r2")], [pod(1, "b", revision="r2")], MSTS, SSTS, IN_SYNC, 1
    )
    assert done.delete is None and done.as_status() is None


def test_roll_waits_for_statefulset_to_observe_spec():
    stale = StsInfo("bg-slave", generation=3, observed_generation=2, update_revision="r2")
    decision = plan_roll([pod(0, "a", revision="r1")], [], MSTS, stale, [], 0)
    assert decision.delete is None and "observe" in decision.message


def test_roll_a_failover_group_switches_mastership_instead_of_restarting_the_master():
    """With failover the master may live in the slave StatefulSet: each pod is compared with its
    own StatefulSet, and the outdated master is never deleted while it is master."""
    from dataclasses import replace

    # bg-slave-0 was promoted earlier (brokerId 0); bg-master-0 is brokerId 1 now
    master = replace(pod(1, "b", revision="r1"), broker_id=0)
    old_master_pod = replace(pod(0, "a", revision="r2"), broker_id=1)
    other = pod(2, "c", revision="r2")
    status = [
        {"brokerId": 1, "pod": "bg-master-0", "inSync": True},
        {"brokerId": 2, "pod": "bg-slave-1", "inSync": True},
    ]
    decision = plan_roll([master], [old_master_pod, other], MSTS, SSTS, status, 2, failover=True)
    assert decision.delete is None
    assert decision.switchover_to == "bg-master-0" and decision.pending == ["bg-slave-0"]
    # an up-to-date pod in the master StatefulSet is not "outdated" against the slave one's
    fresh = plan_roll(
        [replace(pod(1, "b", revision="r2"), broker_id=0)],
        [old_master_pod, other],
        MSTS,
        SSTS,
        status,
        2,
        failover=True,
    )
    assert fresh.pending == [] and fresh.switchover_to is None
    # once the switchover happened the old master is a slave and is restarted like one
    after = plan_roll(
        [replace(old_master_pod, broker_id=0)],
        [replace(master, broker_id=1), other],
        MSTS,
        SSTS,
        status,
        2,
        failover=True,
    )
    assert after.delete == "bg-slave-0"


# -- the pods' own view: kubelet reasons, transitions between polls, caught-up ----------------
def test_container_facts_name_the_kubelet_reason() -> None:
    from brokergroup_operator.status import container_facts

    pulling = {
        "containerStatuses": [
            {
                "name": "broker",
                "restartCount": 0,
                "state": {
                    "waiting": {"reason": "ImagePullBackOff", "message": 'pull "x:1" failed'}
                },
            }
        ]
    }
    assert container_facts(pulling, "broker") == (
        'ImagePullBackOff: pull "x:1" failed',
        0,
        None,
    )
    oom = {
        "containerStatuses": [
            {
                "name": "broker",
                "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
            }
        ]
    }
    assert container_facts(oom, "broker") == (
        "CrashLoopBackOff (last exit: OOMKilled)",
        3,
        "OOMKilled",
    )
    crashed = {
        "containerStatuses": [
            {
                "name": "broker",
                "restartCount": 1,
                "state": {"running": {}},
                "lastState": {"terminated": {"reason": "Error", "exitCode": 1}},
            }
        ]
    }
    assert container_facts(crashed, "broker") == (None, 1, "Error (exit 1)")
    pending = {
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available",
            }
        ]
    }
    assert container_facts(pending, "broker") == (
        "Unschedulable: 0/3 nodes are available",
        0,
        None,
    )
    # a container that is merely starting is no problem
    starting = {"containerStatuses": [{"name": "broker", "state": {"waiting": {"reason": "ContainerCreating"}}}]}  # fmt: skip
    assert container_facts(starting, "broker") == (None, 0, None)


def test_a_master_that_cannot_run_is_reported_with_the_kubelet_reason() -> None:
    from dataclasses import replace

    spec = group()
    stuck = replace(pod(0, None, ready=False), problem="ImagePullBackOff: pull failed")
    obs = Observation(
        master=BrokerReport(pod=stuck, error="pod has no IP yet"),
        slaves={1: BrokerReport(pod=None), 2: BrokerReport(pod=None)},
    )
    status, _ = compute_status(spec, 1, obs, {}, T0)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "ImagePullBackOff"
    assert "pull failed" in ready["message"]
    assert status["master"]["problem"] == "ImagePullBackOff: pull failed"


def test_in_sync_means_caught_up_within_the_threshold() -> None:
    spec = group(replicationMode="ASYNC", slaves=2, inSyncMaxLagBytes=1000)
    reports = {
        1: BrokerReport(pod=pod(1, "10.0.0.2"), status=slave_status(1, 99_500)),
        2: BrokerReport(pod=pod(2, "10.0.0.3"), status=slave_status(2, 50_000)),
    }
    # the master counts both in sync (within haMaxGapNotInSync); one is 50 KB behind
    master = BrokerReport(
        pod=pod(0, "10.0.0.1"),
        status=master_status(100_000, [("10.0.0.2", 99_500, True), ("10.0.0.3", 50_000, True)]),
    )
    status, _ = compute_status(spec, 1, Observation(master, reports), {}, T0)
    assert [s["inSync"] for s in status["slaves"]] == [True, False]
    assert status["inSyncSlaves"] == "1/2"
    # it catches up: in sync, and the Event says so
    master = BrokerReport(
        pod=pod(0, "10.0.0.1"),
        status=master_status(100_000, [("10.0.0.2", 99_500, True), ("10.0.0.3", 99_900, True)]),
    )
    later, events = compute_status(spec, 1, Observation(master, reports), status, T1)
    assert later["inSyncSlaves"] == "2/2"
    assert [e.reason for e in events] == ["SlaveCaughtUp"]


def test_a_master_outage_between_polls_moves_ready_s_transition_time() -> None:
    spec = group(replicationMode="ASYNC", slaves=0)
    master = BrokerReport(pod=pod(0, "10.0.0.1"), status=master_status(10, []))
    first, _ = compute_status(spec, 1, Observation(master, {}), {}, T0)
    steady, _ = compute_status(spec, 1, Observation(master, {}), first, T1)
    ready = next(c for c in steady["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == T0
    blip = "master bg-master-0 was not Ready for 2.0 s"
    after, _ = compute_status(spec, 1, Observation(master, {}, master_blip=blip), steady, T1)
    ready = next(c for c in after["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["lastTransitionTime"] == T1
    assert ready["reason"] == "MasterRecovered" and blip in ready["message"]


def test_pod_transitions_are_events() -> None:
    from dataclasses import replace

    from brokergroup_operator.status import pod_transitions

    up = pod(0, "10.0.0.1")
    down = replace(up, ready=False)
    assert [e.reason for e in pod_transitions(up, down, "master", None)] == ["BrokerNotReady"]
    (back,) = pod_transitions(down, up, "master", 2.04)
    assert back.reason == "BrokerReady" and "after 2.0 s" in back.message
    (gone,) = pod_transitions(up, None, "slave", None)
    assert gone.reason == "BrokerNotReady" and "deleted" in gone.message
    # recreated by its StatefulSet: first sight of the new pod, Ready after the outage
    (again,) = pod_transitions(None, up, "master", 5.0)
    assert again.reason == "BrokerReady"
    restarted = replace(up, restarts=1, last_exit="OOMKilled")
    (event,) = pod_transitions(up, restarted, "slave", None)
    assert event.reason == "BrokerRestarted" and "OOMKilled" in event.message
    failing = replace(down, problem="CrashLoopBackOff (last exit: OOMKilled)")
    assert [e.reason for e in pod_transitions(down, failing, "slave", 1.0)] == ["BrokerPodFailing"]
    assert pod_transitions(up, up, "master", None) == []


def test_slave_replicas_counts_slave_pods_that_exist():
    """The scale subresource's status replicas: a missing or terminating pod does not count."""
    status, _ = compute_status(group(), 1, healthy(), None, T0)
    assert status["slaveReplicas"] == 2
    obs = healthy()
    obs.slaves = {
        1: BrokerReport(pod(1, "10.0.0.11", deleting=True), error="gone"),
        2: BrokerReport(None),
    }
    status, _ = compute_status(group(), 1, obs, None, T0)
    assert status["slaveReplicas"] == 0
