"""A DLEDGER group on the cluster (examples/dledger.yaml: three peers that elect their leader),
under load from a client pod: four producers, one message at a time, no retries.

* the group comes up with a leader, the client Service on it (role label), `kubectl get bg`
  showing LEADER and TERM, and a LeaderElected Event;
* delete the leader pod: on SIGTERM it hands leadership to a caught-up follower (or, when it
  cannot, the other two elect a new leader after their heartbeat timeout); the test prints
  the seconds without an accepted write and asserts that every acknowledged message is on
  the new leader, that `kubectl get bg` names the new leader and term, and that the deleted
  pod comes back as a caught-up follower;
* the restart annotation rolls followers first and transfers leadership off the leader;
* spec.replicas 3 → 5 → 3 under load: the membership changes one peer at a time and nothing
  acknowledged is lost;
* spec.externalAccess NodePort: the real Java client outside the pod network, given one
  follower's node address, is routed to the leader by node IPs and node ports.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.tests.kube import outside_pod_network
from e2e.tests.test_failover import Load, outage
from e2e.userpath import Cluster, condition, eventually, example

pytestmark = pytest.mark.timeout(900)
EXAMPLE = "dledger.yaml"
PEERS = 3


@dataclass
class Group:
    c: Cluster
    ns: str
    name: str
    client: str

    def status(self) -> dict[str, Any]:
        return self.c.status(self.ns, self.name)

    @property
    def dledger(self) -> dict[str, Any]:
        return dict(self.status().get("dledger") or {})

    @property
    def leader(self) -> str | None:
        leader = self.dledger.get("leader")
        return str(leader) if leader else None

    def serving(self, peers_wanted: int = PEERS) -> bool:
        """A leader serves and every peer is live and caught up (and no membership change is
        under way)."""
        st = self.status()
        d = st.get("dledger") or {}
        peers = d.get("peers") or []
        return (
            condition(st, "Ready") == "True"
            and len(peers) == peers_wanted
            and d.get("members", peers_wanted) == peers_wanted
            and not d.get("membership")
            and all(p.get("live") and p.get("inSync") for p in peers)
        )

    def pod(self, name: str) -> dict[str, Any] | None:
        return self.c.pod(self.ns, name)


def quorum_serving(c: Cluster, ns: str, name: str) -> bool:
    return Group(c, ns, name, "").serving()


@pytest.fixture(scope="module")
def group(cluster: Cluster, broker_image: str, operator_image: str) -> Iterator[Group]:
    """Like Cluster.example_group, waiting for a serving quorum instead of in-sync slaves."""
    c = cluster
    ns = f"e2e-bgdledger-{os.urandom(3).hex()}"
    c.kubectl("create", "namespace", ns)
    obj = example(EXAMPLE, broker_image)
    obj["spec"]["storage"]["size"] = "64Mi"
    obj["spec"]["externalAccess"] = {"type": "NodePort"}  # test_external_access_by_node_port
    name = obj["metadata"]["name"]
    try:
        c.install_operator("bgdledger", ns, operator_image, "--set", "watch.mode=namespaced")
        c.apply(ns, obj)
        eventually(lambda: quorum_serving(c, ns, name), 300, "a serving DLedger quorum")
        yield Group(c, ns, name, c.client_pod(ns, broker_image))
    finally:
        if os.environ.get("E2E_KEEP_NAMESPACES") != "1":
            c.kubectl("-n", ns, "delete", "bg", "--all", "--timeout=120s", check=False)
            c.helm("uninstall", "bgdledger", "--namespace", ns, "--wait", check=False)
            c.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def events(g: Group, reason: str) -> list[dict[str, Any]]:
    """The group's Events of that reason, oldest first."""
    items = g.c.json("-n", g.ns, "get", "events", "--field-selector", f"reason={reason}")
    found = [e for e in items.get("items") or [] if e["involvedObject"]["name"] == g.name]
    return sorted(found, key=when)


def when(event: dict[str, Any]) -> str:
    return str(
        event.get("eventTime")
        or event.get("firstTimestamp")
        or event["metadata"]["creationTimestamp"]
    )


def labelled_leader(g: Group) -> list[str]:
    pods = g.c.json(
        "-n", g.ns, "get", "pods", "-l", f"brokergroup.io/group={g.name},brokergroup.io/role=master"
    )
    return [p["metadata"]["name"] for p in pods.get("items") or []]


def test_the_quorum_has_a_leader_the_client_service_follows(group: Group) -> None:
    g = group
    d = g.dledger
    assert d["leader"] in {f"{g.name}-peers-{i}" for i in range(PEERS)}
    assert int(d["term"]) >= 1
    assert [p["id"] for p in d["peers"]] == [f"n{i}" for i in range(PEERS)]
    eventually(lambda: labelled_leader(g) == [d["leader"]], 30, "the leader labelled")
    endpoints = g.c.json("-n", g.ns, "get", "endpoints", g.name)
    ips = [a["ip"] for s in endpoints.get("subsets") or [] for a in s.get("addresses") or []]
    leader_pod = g.pod(d["leader"])
    assert leader_pod is not None and ips == [leader_pod["status"]["podIP"]], ips
    table = g.c.kubectl("-n", g.ns, "get", "bg", g.name)
    header, row = table.splitlines()[:2]
    assert "LEADER" in header and "TERM" in header and d["leader"] in row, table
    assert events(g, "LeaderElected"), "no LeaderElected Event"


def test_external_access_by_node_port(group: Group) -> None:
    """Every peer has a NodePort Service; the operator tells the peers each one's node address
    by dLegerSelfId, and a peer's external listener names the leader it knows as brokerId 0.
    The real Java client in the control plane's namespace (it reaches nodes, not pods) uses a
    follower's node address as namesrvAddr and sends and reads back through the routes."""
    import tempfile
    from pathlib import Path

    from e2e.javaclient import V4, round_trip
    from tests.interop.rocketmq_java import NetNS, loads_fastjson, run_mqadmin

    outside = outside_pod_network()
    g = group

    def external() -> dict[str, str]:
        st = g.status()
        if not g.serving() or not st["master"].get("externalAddress"):
            return {}
        want = {"0": st["master"]["externalAddress"]}
        for slave in st.get("slaves") or []:
            if not slave.get("externalAddress"):
                return {}
            want[str(slave["brokerId"])] = slave["externalAddress"]
        return want

    def all_external() -> dict[str, str] | None:
        found = external()
        return found if len(found) == PEERS else None

    want = eventually(all_external, 240, "external addresses")
    peers = {p["id"]: p["externalAddress"] for p in g.dledger["peers"]}
    print("external addresses:", want, "by peer:", peers)
    assert sorted(peers.values()) == sorted(want.values()), (peers, want)
    assert all(a.startswith("10.201.0.") for a in want.values()), want  # node IPs, not pod IPs
    follower = next(a for k, a in want.items() if k != "0")
    with tempfile.TemporaryDirectory(prefix="bg-outside-") as scratch:
        ns = NetNS(Path(scratch), name=Path(outside).name)  # the cluster's: not opened
        run_mqadmin(ns, V4, "updateTopic", "-n", want["0"], "-c", "DefaultCluster",
                    "-t", "outside-quorum", "-r", "4", "-w", "4")  # fmt: skip
        for via in want.values():  # every peer's external listener, followers included
            route = loads_fastjson(
                run_mqadmin(ns, V4, "topicRoute", "-n", via, "-t", "outside-quorum")
            )
            assert route["brokerDatas"][0]["brokerAddrs"] == want, (via, route)
        java = round_trip(ns, follower, "outside-quorum", "outside-quorum-readers", 200)
        print("Java client from outside, via a follower:", java)
        assert java["sent"]["sendOk"] == 200, java
        assert java["unique"] == 200 and java["duplicates"] == 0, java


def test_delete_the_leader_pod_under_load(group: Group) -> None:
    g = group
    eventually(g.serving, 240, "the quorum serving")
    old, term = g.leader, int(g.dledger["term"])
    assert old is not None
    old_pod = g.pod(old)
    assert old_pod is not None
    old_uid = old_pod["metadata"]["uid"]
    topic = f"DLedgerDelete{os.urandom(2).hex()}"
    load = Load(g, topic)  # type: ignore[arg-type]  # has the fields Load reads (c, ns, name, client)
    time.sleep(15)
    event_at = time.time()
    g.c.kubectl("-n", g.ns, "delete", "pod", old, "--wait=false")

    def led_again() -> bool:
        """A leader serves that is not the deleted process: another peer (at a higher term),
        or the deleted pod's replacement if it came back before the others' heartbeat timeout
        and won its own term again (DLedger re-asks for votes in its persisted term after a
        restart, and the followers that voted for it in that term grant it again)."""
        leader = g.leader
        if leader is None or condition(g.status(), "Ready") != "True":
            return False
        if leader != old:
            return True
        obj = g.pod(leader)
        return obj is not None and obj["metadata"]["uid"] != old_uid

    eventually(led_again, 90, "a leader serving after the delete")
    result = load.result()
    new, new_term = g.leader, int(g.dledger["term"])
    if new != old:
        assert new_term > term, (term, new_term)
    else:
        assert new_term >= term, (term, new_term)
    acked = result["acked"]
    assert acked, f"nothing acknowledged: {result['notAcked']}"
    eventually(g.serving, 240, "every peer live and caught up again")
    assert g.leader is not None
    obj = g.pod(g.leader)
    assert obj and obj["status"].get("podIP")
    out = g.c.client(
        g.ns, g.client, "read", "--broker", f"{obj['status']['podIP']}:10913", "--topic", topic
    )
    stored = set(out["bodies"])
    missing = [b for b in acked if b not in stored]
    seconds = outage(result, event_at)
    table = g.c.kubectl("-n", g.ns, "get", "bg", g.name)
    print(
        f"\n[dledger:delete-leader] acknowledged={len(acked)} "
        f"not-acknowledged={result['notAcked']} missing={len(missing)} "
        f"seconds-without-an-accepted-write={seconds:.1f} old leader={old} term={term} "
        f"new leader={new} term={new_term}\n{table}",
        flush=True,
    )
    assert not missing, f"{len(missing)} acknowledged messages missing, e.g. {missing[:5]}"
    row = table.splitlines()[1]
    assert str(g.leader) in row and str(g.dledger["term"]) in row.split(), table
    eventually(lambda: labelled_leader(g) == [g.leader], 30, "the new leader labelled")
    elected = [e["message"] for e in events(g, "LeaderElected")]
    assert any(f"{new} (n{new.rsplit('-', 1)[1]}) is leader at term {new_term}" in m
               for m in elected), elected  # fmt: skip
    # the deleted pod is back, caught up (as a follower unless it was elected again since)
    peers = {p["pod"]: p for p in g.dledger["peers"]}
    assert peers[old]["inSync"], peers[old]
    if old != g.leader:
        assert peers[old]["role"] == "FOLLOWER", peers[old]


def test_restart_annotation_rolls_followers_first_and_transfers_leadership(group: Group) -> None:
    """`kubectl annotate bg … brokergroup.io/restart=…` under load: every peer is restarted (new
    pod UIDs), the followers first, and the leader only after leadership moved off it by a
    transfer (LeadershipTransferred); nothing acknowledged is lost."""
    g = group
    eventually(g.serving, 240, "the quorum serving")
    old_leader = g.leader
    uids = {}
    for i in range(PEERS):
        obj = g.pod(f"{g.name}-peers-{i}")
        assert obj is not None
        uids[obj["metadata"]["name"]] = obj["metadata"]["uid"]
    topic = f"DLedgerRoll{os.urandom(2).hex()}"
    load = Load(g, topic)  # type: ignore[arg-type]
    time.sleep(5)
    g.c.kubectl(
        "-n", g.ns, "annotate", "bg", g.name, f"brokergroup.io/restart={os.urandom(4).hex()}"
    )

    def restarted() -> bool:
        for name, uid in uids.items():
            obj = g.pod(name)
            if obj is None or obj["metadata"]["uid"] == uid:
                return False
        return g.serving() and not g.status().get("rollout")

    eventually(restarted, 600, "every peer restarted and the quorum serving")
    result = load.result()
    acked = result["acked"]
    assert acked, f"nothing acknowledged: {result['notAcked']}"
    assert g.leader is not None
    obj = g.pod(g.leader)
    assert obj and obj["status"].get("podIP")
    out = g.c.client(
        g.ns, g.client, "read", "--broker", f"{obj['status']['podIP']}:10913", "--topic", topic
    )
    stored = set(out["bodies"])
    missing = [b for b in acked if b not in stored]
    transferred = events(g, "LeadershipTransferred")
    rolled = events(g, "RollingRestart")
    transfers = [e["message"] for e in transferred]
    restarts = [e["message"] for e in rolled]
    print(
        f"\n[dledger:roll] acknowledged={len(acked)} not-acknowledged={result['notAcked']} "
        f"missing={len(missing)} longest-pause={max((s for _, s in result['gaps']), default=0):.1f}s "
        f"leader {old_leader} -> {g.leader}\n  transfers: {transfers}\n  restarts: {restarts}",
        flush=True,
    )
    assert not missing, f"{len(missing)} acknowledged messages missing, e.g. {missing[:5]}"
    assert transfers, "the leader was restarted without a leadership transfer"
    # followers first; the old leader last, after the transfer made it a follower
    assert len(restarts) == PEERS and restarts[-1] == f"restarting follower {old_leader}", restarts
    assert when(transferred[-1]) <= when(rolled[-1])


def test_resize_three_to_five_to_three_under_load(group: Group) -> None:
    """`spec.replicas` 3 → 5, then back to 3, each under load: the operator changes the
    membership one peer at a time (MembershipChanged Events n3, n4 joining, then leaving), the
    new peers catch up, the removed pods go, every acknowledged message is on the leader, and
    no pod outside the change restarts (the membership is not in the pod template)."""
    g = group
    eventually(g.serving, 240, "the quorum serving")
    uids = {}
    for i in range(PEERS):
        obj = g.pod(f"{g.name}-peers-{i}")
        assert obj is not None
        uids[obj["metadata"]["name"]] = obj["metadata"]["uid"]
    before = len(events(g, "MembershipChanged"))
    report = []
    for size in (5, 3):
        topic = f"DLedgerResize{size}{os.urandom(2).hex()}"
        load = Load(g, topic)  # type: ignore[arg-type]
        time.sleep(5)
        started = time.monotonic()
        g.c.kubectl(
            "-n", g.ns, "patch", "bg", g.name, "--type=merge", "-p", f'{{"spec":{{"replicas":{size}}}}}'
        )  # fmt: skip
        eventually(lambda: g.serving(size), 420, f"{size} peers serving")  # noqa: B023
        took = time.monotonic() - started
        result = load.result()
        acked = result["acked"]
        assert acked, f"nothing acknowledged: {result['notAcked']}"
        leader = g.leader
        assert leader is not None
        obj = g.pod(leader)
        assert obj and obj["status"].get("podIP")
        out = g.c.client(
            g.ns, g.client, "read", "--broker", f"{obj['status']['podIP']}:10913", "--topic", topic
        )
        stored = set(out["bodies"])
        missing = [b for b in acked if b not in stored]
        pause = max((s for _, s in result["gaps"]), default=0.0)
        report.append(
            f"to {size}: {took:.0f}s, acknowledged={len(acked)} "
            f"not-acknowledged={result['notAcked']} missing={len(missing)} "
            f"longest-pause={pause:.1f}s"
        )
        assert not missing, f"{len(missing)} acknowledged messages missing, e.g. {missing[:5]}"
        assert [p["id"] for p in g.dledger["peers"]] == [f"n{i}" for i in range(size)]
    changed = [e["message"] for e in events(g, "MembershipChanged")][before:]
    table = g.c.kubectl("-n", g.ns, "get", "bg", g.name)
    print("\n[dledger:resize] " + "; ".join(report) + f"\n  {changed}\n{table}", flush=True)
    assert len(changed) == 4, changed
    assert [m.split(":")[0] for m in changed] == ["n3 joins", "n4 joins", "n4 leaves", "n3 leaves"]
    eventually(lambda: g.pod(f"{g.name}-peers-3") is None, 120, "bg-peers-3 removed")
    for name, uid in uids.items():  # nobody else restarted
        obj = g.pod(name)
        assert obj is not None and obj["metadata"]["uid"] == uid, name
