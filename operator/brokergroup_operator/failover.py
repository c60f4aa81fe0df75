"""The failover controller of one group: watch the master, promote an in-sync slave when it is
lost, move mastership on request (switchover), and keep every broker's role at the assignment.

The order of a failover is what makes it safe (docs/failover.md):

1. the new epoch is recorded in ``.status`` before any broker hears of it, so a restarted
   operator never reuses an epoch;
2. every reachable broker is fenced at the new epoch: the old master (if it answers) stops
   taking writes, and slaves stop accepting bytes from a master of an older epoch, so from here
   on no SYNC write can be acknowledged by the old master through them;
3. only then are the slaves' offsets read and compared (they can no longer grow), and the
   in-sync slave with the highest offset wins;
4. it is promoted at the new epoch, the other slaves follow it, and an old master that cannot be
   reached is deleted (it comes back as a slave, truncates what it never shared, and follows).

No kopf here: the kopf daemon in :mod:`handlers` drives :meth:`FailoverController.tick`, and the
integration tests drive it against real broker processes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from .brokerapi import BrokerAPI, BrokerAPIError
from .election import Assignment, Candidate, elect, promote, with_in_sync
from .spec import GroupSpec
from .status import Event

Logger = logging.Logger | logging.LoggerAdapter[Any]
JSON = dict[str, Any]

#: how long a switchover waits for its target to hold everything the fenced master has
SWITCHOVER_CATCH_UP_SECONDS = 10.0
AWAITING_ROLE = "awaiting role"


@dataclass(frozen=True)
class MasterAddresses:
    """Where slaves reach a master: HA stream, HTTP API, client (remoting) port."""

    ha: str
    http: str
    client: str


class Members(Protocol):
    """How the controller reaches the pods of a group (Kubernetes or local processes)."""

    def http(self, pod: str) -> str | None:
        """``host:httpListenPort`` of the pod's broker, None when it has no address."""

    def master_addresses(self, pod: str) -> MasterAddresses | None:
        """What slaves are told when ``pod`` is their master."""

    def present(self, pod: str) -> bool:
        """The pod exists and is not being deleted."""

    def uid(self, pod: str) -> str | None:
        """The pod's identity (a new one after a delete), None if unknown."""


@dataclass
class Probe:
    pod: str
    status: JSON | None = None
    error: str | None = None


class FailoverController:
    """One group's controller; its memory (when the master was last seen) lives here."""

    def __init__(
        self,
        *,
        brokers: BrokerAPI,
        spec: GroupSpec,
        members: Members,
        persist: Callable[[Assignment], Awaitable[None]],
        delete_pod: Callable[[str], Awaitable[bool]] | None,
        logger: Logger,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.brokers = brokers
        self.spec = spec
        self.members = members
        self.persist = persist
        self.delete_pod = delete_pod
        self.logger = logger
        self.clock = clock
        self.master_seen_at: float | None = None
        self.master_seen = False  # answered at least once since this controller started
        self.master_uid: str | None = None  # the master pod serving at the last tick
        self.events: list[Event] = []
        self.condition: JSON = {
            "type": "Failover",
            "status": "True",
            "reason": "MasterServing",
            "message": "",
        }
        self.failovers = 0
        self._announced: set[str] = set()

    # -- helpers -----------------------------------------------------------------------------
    def _event(self, type_: str, reason: str, message: str) -> None:
        (self.logger.warning if type_ == "Warning" else self.logger.info)("%s: %s", reason, message)
        self.events.append(Event(type_, reason, message))

    def _set_condition(self, ok: bool, reason: str, message: str) -> None:
        self.condition = {
            "type": "Failover",
            "status": "True" if ok else "False",
            "reason": reason,
            "message": message,
        }

    async def _probe(self, pod: str) -> Probe:
        address = self.members.http(pod)
        if address is None or not self.members.present(pod):
            return Probe(pod, error="pod has no address" if address is None else "pod is gone")
        try:
            return Probe(pod, status=await self.brokers.status(address))
        except BrokerAPIError as exc:
            return Probe(pod, error=str(exc))

    async def probe_all(self, assignment: Assignment) -> dict[str, Probe]:
        pods = list(assignment.broker_ids)
        results = await asyncio.gather(*(self._probe(p) for p in pods))
        return dict(zip(pods, results, strict=True))

    def role_body(self, assignment: Assignment, pod: str) -> JSON | None:
        """The ``PUT /v1/admin/role`` body that puts ``pod`` where the assignment says."""
        broker_id = assignment.broker_id(pod)
        if broker_id is None:
            return None
        if pod == assignment.master:
            return {"role": self.spec.master_role, "epoch": assignment.epoch, "brokerId": 0}
        master = self.members.master_addresses(assignment.master)
        if master is None:
            return None
        return {
            "role": "SLAVE",
            "epoch": assignment.epoch,
            "brokerId": broker_id,
            "haMasterAddress": master.ha,
            "masterHttpAddress": master.http,
            "masterAddress": master.client,
        }

    @staticmethod
    def matches(status: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
        """The broker already is what ``body`` asks (no call needed)."""
        if status.get("role") != body["role"] or status.get("brokerId") != body["brokerId"]:
            return False
        if status.get("epoch") != body["epoch"]:
            return False
        if body["role"] == "SLAVE":
            return bool((status.get("slave") or {}).get("masterAddress") == body["haMasterAddress"])
        last = (status.get("epochEntries") or [{}])[-1]
        return bool(not status.get("fenced") and last.get("epoch") == body["epoch"])

    async def _assign(self, assignment: Assignment, pod: str, why: str) -> bool:
        body = self.role_body(assignment, pod)
        address = self.members.http(pod)
        if body is None or address is None:
            return False
        try:
            await self.brokers.set_role(address, body)
        except BrokerAPIError as exc:
            self.logger.warning("role for %s (%s) failed: %s", pod, why, exc)
            return False
        role = "master" if body["role"] != "SLAVE" else f"slave of {assignment.master}"
        self.logger.info("%s is %s at epoch %d (%s)", pod, role, assignment.epoch, why)
        return True

    # -- the tick ----------------------------------------------------------------------------
    async def tick(self, assignment: Assignment) -> Assignment:
        """Probe the group once; reconcile roles, or fail over if the master is lost long
        enough. Returns the (possibly new) assignment, already persisted when it changed."""
        now = self.clock()
        probes = await self.probe_all(assignment)
        master = probes[assignment.master]
        if self.master_seen_at is None:
            self.master_seen_at = now  # a (re)started operator gives the master a full grace
        lost_data = self._master_lost_data(assignment, probes)
        uid = self.members.uid(assignment.master)
        if lost_data is None and self.master_seen:
            # a deleted (or evicted) master pod is going away for sure: no grace period, even
            # if its replacement came up between two ticks
            if not self.members.present(assignment.master):
                lost_data = "its pod is being deleted"
            elif uid is not None and self.master_uid not in (None, uid):
                lost_data = "its pod was deleted and replaced"
        if master.status is not None and lost_data is None:
            self.master_seen_at = now
            self.master_seen = True
            self.master_uid = uid
            in_sync = frozenset(
                int(i) for i in (master.status.get("master") or {}).get("inSyncSet") or []
            )
            # a master that restarted (fenced, awaiting its role) reports nobody in sync yet:
            # keep the last known set until it serves again
            if not master.status.get("fenced") and in_sync != assignment.in_sync:
                assignment = with_in_sync(assignment, in_sync)
                await self.persist(assignment)
            await self._reconcile(assignment, probes)
            if self.condition["reason"] != "MasterServing":
                self._set_condition(True, "MasterServing", f"{assignment.master} is master")
            return assignment
        lost_for = now - self.master_seen_at
        why = lost_data or master.error or "unreachable"
        if lost_data is None and lost_for < self.spec.failover_master_lost_seconds:
            if assignment.master not in self._announced:
                self._announced.add(assignment.master)
                self._event("Warning", "MasterUnreachable", f"{assignment.master}: {why}")
            self._set_condition(
                False,
                "MasterLost",
                f"{assignment.master} lost for {lost_for:.1f}s ({why}); failover after "
                f"{self.spec.failover_master_lost_seconds}s",
            )
            await self._reconcile(assignment, probes, skip_master=True)
            return assignment
        return await self.fail_over(assignment, probes, why)

    def _master_lost_data(self, assignment: Assignment, probes: Mapping[str, Probe]) -> str | None:
        """A master that came back (awaiting its role) with less log than a slave lost data:
        it must not serve (the slave holds messages it lacks); the slave is promoted instead."""
        status = probes[assignment.master].status
        if status is None or not status.get("fenced"):
            return None
        own = int(status.get("maxOffset") or 0)
        ahead = [
            (p, int(s.status.get("maxOffset") or 0))
            for p, s in probes.items()
            if p != assignment.master
            and s.status is not None
            and int(s.status.get("maxOffset") or 0) > own
        ]
        if not ahead:
            return None
        pod, offset = max(ahead, key=lambda x: x[1])
        return (
            f"restarted with maxOffset {own}, behind {pod} at {offset}: "
            "it lost data and must not serve"
        )

    async def _reconcile(
        self, assignment: Assignment, probes: Mapping[str, Probe], skip_master: bool = False
    ) -> None:
        """Tell every reachable broker that differs from the assignment what it is.

        The master first: slaves of a new epoch wait until their master has it.
        """
        order = [assignment.master, *assignment.slaves]
        for pod in order:
            if skip_master and pod == assignment.master:
                continue
            probe = probes.get(pod)
            body = self.role_body(assignment, pod)
            if probe is None or probe.status is None or body is None:
                continue
            if self.matches(probe.status, body):
                continue
            reason = probe.status.get("fenceReason") or "differs from the assignment"
            if await self._assign(assignment, pod, str(reason)):
                self._event(
                    "Normal",
                    "RoleAssigned",
                    f"{pod}: {body['role']} brokerId={body['brokerId']} epoch={body['epoch']}",
                )

    # -- failover ----------------------------------------------------------------------------
    async def fail_over(
        self, assignment: Assignment, probes: Mapping[str, Probe], why: str
    ) -> Assignment:
        old = assignment.master
        eligible = [
            p
            for p in assignment.slaves
            if probes[p].status is not None and assignment.broker_ids[p] in assignment.in_sync
        ]
        if not eligible:
            # nothing to promote: no epoch is spent, nobody is fenced, the group waits
            reachable = [p for p in assignment.slaves if probes[p].status is not None]
            reason = (
                f"no reachable slave was in the master's in-sync set "
                f"{sorted(assignment.in_sync)} (reachable: {', '.join(reachable) or 'none'})"
            )
            return self._no_promotion(assignment, old, why, reason)
        # 1. the new epoch is durable before anyone hears of it
        fenced_at = replace(assignment, epoch=assignment.epoch + 1)
        await self.persist(fenced_at)
        # 2. fence everyone who answers: no slave takes bytes from the old epoch any more
        offsets: dict[str, int] = {}
        for pod in assignment.broker_ids:
            address = self.members.http(pod)
            if address is None or probes[pod].status is None:
                continue
            try:
                answer = await self.brokers.fence(address, fenced_at.epoch)
            except BrokerAPIError as exc:
                self.logger.warning("fencing %s failed: %s", pod, exc)
                continue
            offsets[pod] = int(answer.get("maxOffset", -1))
        # 3. elect among the fenced slaves that were in sync
        candidates = [
            Candidate(
                pod,
                assignment.broker_ids[pod],
                offset,
                assignment.broker_ids[pod] in assignment.in_sync,
            )
            for pod, offset in offsets.items()
            if pod != old and offset >= 0
        ]
        election = elect(candidates, self.spec.failover_preferred_master)
        if election.winner is None:
            return self._no_promotion(fenced_at, old, why, election.reason)
        winner = election.winner.pod
        new = replace(promote(assignment, winner), epoch=fenced_at.epoch)
        self._event(
            "Warning",
            "FailoverStarted",
            f"master {old} lost ({why}); promoting {winner} at epoch {new.epoch}: "
            f"{election.reason}",
        )
        await self.persist(new)
        # 4. promote, re-point the others, deal with the old master
        if not await self._assign(new, winner, "failover"):
            self._set_condition(False, "PromotionFailed", f"{winner} did not take the role")
            return new
        for pod in new.slaves:
            if pod != old and probes[pod].status is not None:
                await self._assign(new, pod, "failover")
        if old in offsets:
            await self._assign(new, old, "failover: old master demoted")
        elif (
            self.delete_pod is not None and self.members.present(old) and await self.delete_pod(old)
        ):
            self._event(
                "Normal",
                "OldMasterDeleted",
                f"{old} could not be fenced; its pod was deleted and returns as a slave",
            )
        self.failovers += 1
        self.master_seen_at = self.clock()
        self.master_uid = self.members.uid(winner)
        self._announced.discard(old)
        self._event(
            "Normal",
            "MasterPromoted",
            f"{winner} is master (brokerId 0) at epoch {new.epoch}; {old} becomes brokerId "
            f"{new.broker_ids[old]}",
        )
        self._set_condition(True, "Promoted", f"{winner} promoted at epoch {new.epoch}")
        return new

    def _no_promotion(self, assignment: Assignment, old: str, why: str, reason: str) -> Assignment:
        message = f"master {old} lost ({why}); no promotion: {reason}"
        if self.condition.get("reason") != "NoEligibleSlave":
            self._event("Warning", "NoEligibleSlave", message)
        self._set_condition(False, "NoEligibleSlave", message)
        return assignment

    # -- switchover --------------------------------------------------------------------------
    async def switchover(self, assignment: Assignment, target: str) -> Assignment:
        """Move mastership to ``target`` (an in-sync slave) with no acknowledged write lost:
        fence the master, wait for the target to hold its whole log, promote, re-point."""
        old = assignment.master
        if target == old:
            return assignment
        if target not in assignment.broker_ids:
            self._event("Warning", "SwitchoverRefused", f"{target} is not a member of the group")
            return assignment
        if assignment.broker_ids[target] not in assignment.in_sync:
            self._event(
                "Warning",
                "SwitchoverRefused",
                f"{target} is not in the master's in-sync set {sorted(assignment.in_sync)}",
            )
            return assignment
        master_http = self.members.http(old)
        target_http = self.members.http(target)
        if master_http is None or target_http is None:
            self._event("Warning", "SwitchoverRefused", f"{old} or {target} has no address")
            return assignment
        fenced_at = replace(assignment, epoch=assignment.epoch + 1)
        await self.persist(fenced_at)
        started = self.clock()
        try:
            answer = await self.brokers.fence(master_http, fenced_at.epoch)
            end = int(answer["maxOffset"])
            while True:
                status = await self.brokers.status(target_http)
                if int(status.get("maxOffset") or 0) >= end:
                    break
                if self.clock() - started > SWITCHOVER_CATCH_UP_SECONDS:
                    raise BrokerAPIError(
                        f"{target} did not reach offset {end} within "
                        f"{SWITCHOVER_CATCH_UP_SECONDS:.0f}s"
                    )
                await asyncio.sleep(0.02)
        except (BrokerAPIError, KeyError, ValueError) as exc:
            # the old master stays master at the new epoch (a role call lifts the fence)
            await self._assign(fenced_at, old, "switchover aborted")
            self._event("Warning", "SwitchoverFailed", f"to {target}: {exc}")
            return fenced_at
        new = replace(promote(assignment, target), epoch=fenced_at.epoch)
        await self.persist(new)
        await self._assign(new, target, "switchover")
        pause = self.clock() - started
        for pod in new.slaves:
            await self._assign(new, pod, "switchover")
        self.master_seen_at = self.clock()
        self.master_uid = self.members.uid(target)
        self._event(
            "Normal",
            "SwitchoverDone",
            f"{target} is master at epoch {new.epoch} (writes paused {pause:.2f}s); "
            f"{old} is brokerId {new.broker_ids[old]}",
        )
        return new
