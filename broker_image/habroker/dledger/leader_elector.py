"""DLedgerLeaderElector: heartbeats, votes and leadership transfer, as DLedger runs them.

The rules are DLedger 0.3.1.2's, so habroker peers and Java peers elect together:

* a follower that hears no heartbeat for ``maxHeartBeatLeak * heartBeatTimeIntervalMs``
  becomes a candidate; a candidate asks for votes after a random 300-1000 ms wait;
* a vote is granted only to a member whose log is at least as up to date (ledger end term,
  then ledger end index) and only once per term (the vote is persisted first);
* a request with a newer term makes the receiver a candidate that moves to that term at once
  (answer TERM_NOT_READY: the sender asks again);
* a leader that cannot reach a quorum with heartbeats for the same leak window steps down.

Leadership transfer: the leader asks the transferee to take over; the transferee becomes a
candidate of the next term at once and wins because it is up to date.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from habroker.dledger.member_state import MemberState, Role
from habroker.dledger.protocol import (
    Body,
    DLedgerRequestCode,
    DLedgerResponseCode,
    VoteResult,
    answer,
    base,
    code_of,
    term_of,
)
from habroker.dledger.rpc_service import DLedgerRpcService

log = logging.getLogger(__name__)

RoleListener = Callable[[int, Role], None]
LedgerEnd = Callable[[], tuple[int, int]]  # (ledgerEndIndex, ledgerEndTerm)


@dataclass(frozen=True)
class ElectionTimings:
    """DLedgerConfig's defaults; RocketMQ does not expose them, habroker does (dLeger* keys)."""

    heartbeat_interval_ms: int = 2000
    max_heartbeat_leak: int = 3
    min_vote_interval_ms: int = 300
    max_vote_interval_ms: int = 1000
    min_take_leadership_vote_interval_ms: int = 30
    max_take_leadership_vote_interval_ms: int = 100


MIN_CHECK_MS = 10  # DLedger's StateMaintainer pace: never poll faster than it
MAX_CHECK_MS = 500  # the longest sleep of the election loop, whatever its deadline


def _now_ms() -> float:
    return time.monotonic() * 1000


class DLedgerLeaderElector:
    def __init__(
        self,
        state: MemberState,
        rpc: DLedgerRpcService,
        ledger_end: LedgerEnd,
        timings: ElectionTimings | None = None,
        preferred_leader_ids: tuple[str, ...] = (),
    ) -> None:
        self.state = state
        self.rpc = rpc
        self.ledger_end = ledger_end
        self.timings = timings or ElectionTimings()
        self.preferred = preferred_leader_ids
        self.listeners: list[RoleListener] = []
        self.last_leader_heartbeat = -1.0
        self.last_send_heartbeat = -1.0
        self.last_succ_heartbeat = -1.0
        self.next_vote_at = -1.0
        self.need_increase_term = False
        self.last_parse_result = "WAIT_TO_REVOTE"
        self.elections = 0
        self._heartbeat_round = 0  # numbers the leader's heartbeat rounds
        self._live_round: dict[str, int] = {}  # per peer: the round its `live` flag came from
        self._take_leadership: tuple[int, asyncio.Future[Body]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"elector-{self.state.self_id}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                if self.state.is_leader:
                    await self._maintain_as_leader()
                elif self.state.is_follower:
                    self._maintain_as_follower()
                else:
                    await self._maintain_as_candidate()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("dledger %s: election loop error", self.state.self_id)
            self._wake.clear()
            try:
                async with asyncio.timeout(self._next_check_s()):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def _next_check_s(self) -> float:
        """Seconds until this role's next deadline: a heartbeat due (leader), the leader silent
        too long (follower), a vote due (candidate).  DLedger polls every 10 ms; sleeping to the
        deadline keeps that precision without 100 wake-ups a second on an idle peer.  Anything
        that moves a deadline earlier sets ``_wake``; :data:`MAX_CHECK_MS` bounds the sleep."""
        t, st, now = self.timings, self.state, _now_ms()
        if st.is_leader:
            due = self.last_send_heartbeat + t.heartbeat_interval_ms
        elif st.is_follower:
            due = self.last_leader_heartbeat + t.max_heartbeat_leak * t.heartbeat_interval_ms
        else:
            due = now if self.need_increase_term else self.next_vote_at
        # the checks are strict (``now - last > interval``): one more millisecond makes it due
        return min(max(due + 1 - now, MIN_CHECK_MS), MAX_CHECK_MS) / 1000

    # -- role changes --------------------------------------------------------------------------
    def _role_changed(self, term: int, role: Role) -> None:
        self._wake.set()  # the new role's deadline is not the old one's
        self._check_take_leadership(term, role)
        for listener in self.listeners:
            try:
                listener(term, role)
            except Exception:
                log.exception("dledger %s: role listener failed", self.state.self_id)

    def change_to_leader(self, term: int) -> None:
        if self.state.term != term:
            return
        self.state.change_to_leader(term)
        self.last_send_heartbeat = -1
        self.elections += 1
        log.info("dledger %s: LEADER of term %d", self.state.self_id, term)
        self._role_changed(term, Role.LEADER)
        self._wake.set()

    def change_to_candidate(self, term: int) -> None:
        if term < self.state.term:
            return
        was = self.state.role
        self.state.change_to_candidate(term)
        if was != Role.CANDIDATE:
            log.info("dledger %s: CANDIDATE (term %d, was %s)", self.state.self_id, term, was)
        self._role_changed(term, Role.CANDIDATE)

    def change_to_follower(self, term: int, leader_id: str) -> None:
        self.last_parse_result = "WAIT_TO_REVOTE"
        self.state.change_to_follower(term, leader_id)
        self.last_leader_heartbeat = _now_ms()
        log.info("dledger %s: FOLLOWER of %s in term %d", self.state.self_id, leader_id, term)
        self._role_changed(term, Role.FOLLOWER)

    # -- heartbeats ----------------------------------------------------------------------------
    async def handle_heartbeat(self, request: Body) -> Body:
        st = self.state
        leader_id = request.get("leaderId")
        term = term_of(request)
        if not st.is_peer(leader_id):
            return self._hb(DLedgerResponseCode.UNKNOWN_MEMBER, st.term)
        if leader_id == st.self_id:
            return self._hb(DLedgerResponseCode.UNEXPECTED_MEMBER, st.term)
        if term < st.term:
            return self._hb(DLedgerResponseCode.EXPIRED_TERM, st.term)
        if term == st.term:
            if st.leader_id is None:
                assert leader_id is not None
                self.change_to_follower(term, leader_id)
                return self._hb(DLedgerResponseCode.SUCCESS)
            if leader_id == st.leader_id:
                self.last_leader_heartbeat = _now_ms()
                return self._hb(DLedgerResponseCode.SUCCESS)
            return self._hb(DLedgerResponseCode.INCONSISTENT_LEADER)
        self.change_to_candidate(term)
        self.need_increase_term = True
        self._wake.set()
        return self._hb(DLedgerResponseCode.TERM_NOT_READY)

    def _hb(self, code: DLedgerResponseCode, term: int = -1) -> Body:
        """HeartBeatResponse as Java answers it: only code and term (no group, no ids)."""
        return {"code": int(code), "term": term}

    async def _send_heartbeats(self, term: int, leader_id: str) -> None:
        st = self.state
        t = self.timings
        requests = {
            peer: base(
                st.group, local_id=st.self_id, remote_id=peer, leader_id=leader_id, term=term
            )
            for peer in st.others
        }
        calls = {
            asyncio.ensure_future(self.rpc.call(peer, DLedgerRequestCode.HEART_BEAT, body)): peer
            for peer, body in requests.items()
        }
        self._heartbeat_round += 1
        round_no = self._heartbeat_round
        succ, not_ready, max_term, inconsistent = 1, 0, -1, False
        pending = set(calls)
        deadline = asyncio.get_running_loop().time() + t.heartbeat_interval_ms / 1000
        while pending:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            done, pending = await asyncio.wait(
                pending, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            for fut in done:
                peer = calls[fut]
                reply = fut.result()
                code = code_of(reply)
                self._note_live(peer, round_no, code)
                if code == DLedgerResponseCode.SUCCESS:
                    succ += 1
                elif code == DLedgerResponseCode.EXPIRED_TERM:
                    max_term = max(max_term, term_of(reply))
                elif code == DLedgerResponseCode.INCONSISTENT_LEADER:
                    inconsistent = True
                elif code == DLedgerResponseCode.TERM_NOT_READY:
                    not_ready += 1
            if st.is_quorum(succ) or st.is_quorum(succ + not_ready):
                break
        for fut in pending:  # not needed for this round, but they still say who is live: a
            # peer that never answers (SIGSTOPped, partitioned) is NETWORK_ERROR at the timeout
            fut.add_done_callback(functools.partial(self._late_heartbeat, calls[fut], round_no))
        if st.is_quorum(succ):
            self.last_succ_heartbeat = _now_ms()
            return
        if st.is_quorum(succ + not_ready):
            self.last_send_heartbeat = -1
        elif max_term > term:
            self.change_to_candidate(max_term)
        elif inconsistent:
            self.change_to_candidate(term)
        elif _now_ms() - self.last_succ_heartbeat > t.max_heartbeat_leak * t.heartbeat_interval_ms:
            log.warning(
                "dledger %s: no quorum answered heartbeats of term %d; stepping down",
                st.self_id,
                term,
            )
            self.change_to_candidate(term)

    def _late_heartbeat(self, peer: str, round_no: int, fut: asyncio.Future[Body]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        if self.state.is_peer(peer):
            self._note_live(peer, round_no, code_of(fut.result()))

    def _note_live(self, peer: str, round_no: int, code: int) -> None:
        """A heartbeat answer says whether ``peer`` is live, unless a later round's answer
        already said so (a round's late timeout must not undo the next round's success)."""
        if round_no >= self._live_round.get(peer, 0):
            self._live_round[peer] = round_no
            self.state.peers_live[peer] = code != DLedgerResponseCode.NETWORK_ERROR

    def membership_changed(self) -> None:
        """Heartbeats and votes use the new list from now on; a leader the change left out
        steps down (the operator transfers leadership away first, so this is a safety net)."""
        st = self.state
        if not st.is_member and st.is_leader:
            log.warning("dledger %s: removed from the membership while leading", st.self_id)
            self.change_to_candidate(st.term)
        self.last_send_heartbeat = -1
        self._wake.set()

    async def _maintain_as_leader(self) -> None:
        if not self.state.is_member:
            self.change_to_candidate(self.state.term)
            return
        if _now_ms() - self.last_send_heartbeat > self.timings.heartbeat_interval_ms:
            st = self.state
            if not st.is_leader:
                return
            self.last_send_heartbeat = _now_ms()
            if self.last_succ_heartbeat < 0:
                self.last_succ_heartbeat = _now_ms()
            assert st.leader_id is not None
            await self._send_heartbeats(st.term, st.leader_id)

    def _maintain_as_follower(self) -> None:
        t = self.timings
        if _now_ms() - self.last_leader_heartbeat > t.max_heartbeat_leak * t.heartbeat_interval_ms:
            log.warning(
                "dledger %s: no heartbeat from leader %s for %d ms",
                self.state.self_id,
                self.state.leader_id,
                t.max_heartbeat_leak * t.heartbeat_interval_ms,
            )
            self.change_to_candidate(self.state.term)

    # -- votes -----------------------------------------------------------------------------------
    async def handle_vote(self, request: Body, self_vote: bool = False) -> Body:
        st = self.state
        leader_id = request.get("leaderId")
        term = term_of(request)
        req_end_index = int(request.get("ledgerEndIndex", -1))
        req_end_term = int(request.get("ledgerEndTerm", -1))
        end_index, end_term = self.ledger_end()

        def vote(result: VoteResult, at_term: int | None = None) -> Body:
            return answer(
                request, term=st.term if at_term is None else at_term, voteResult=result.value
            )

        if not st.is_peer(leader_id):
            return vote(VoteResult.REJECT_UNKNOWN_LEADER)
        if not self_vote and leader_id == st.self_id:
            return vote(VoteResult.REJECT_UNEXPECTED_LEADER)
        if req_end_term < end_term:
            return vote(VoteResult.REJECT_EXPIRED_LEDGER_TERM)
        if req_end_term == end_term and req_end_index < end_index:
            return vote(VoteResult.REJECT_SMALL_LEDGER_END_INDEX)
        if term < st.term:
            return vote(VoteResult.REJECT_EXPIRED_VOTE_TERM)
        if term == st.term:
            if st.vote_for is not None and st.vote_for != leader_id:
                if st.leader_id is not None:
                    return vote(VoteResult.REJECT_ALREADY_HAS_LEADER)
                return vote(VoteResult.REJECT_ALREADY_VOTED)
        else:
            self.change_to_candidate(term)
            self.need_increase_term = True
            self._wake.set()
            return vote(VoteResult.REJECT_TERM_NOT_READY)
        if term < end_term:
            return vote(VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, end_term)
        if (
            not self_vote
            and self._is_taking_leadership()
            and req_end_term == end_term
            and end_index >= req_end_index
        ):
            return vote(VoteResult.REJECT_TAKING_LEADERSHIP)
        st.set_vote_for(leader_id)
        return vote(VoteResult.ACCEPT)

    def _is_taking_leadership(self) -> bool:
        st = self.state
        return st.term_to_take_leadership == st.term and st.self_id in self.preferred_or_transfer

    @property
    def preferred_or_transfer(self) -> tuple[str, ...]:
        if self._take_leadership is not None:
            return (*self.preferred, self.state.self_id)
        return self.preferred

    def _next_vote_at(self) -> float:
        t = self.timings
        if self._is_taking_leadership():
            lo, hi = t.min_take_leadership_vote_interval_ms, t.max_take_leadership_vote_interval_ms
        else:
            lo, hi = t.min_vote_interval_ms, t.max_vote_interval_ms
        return _now_ms() + lo + random.randrange(max(1, hi - lo))

    async def _maintain_as_candidate(self) -> None:
        st = self.state
        if not st.is_member:
            return  # removed (or not yet added): it follows a leader, it never runs
        if _now_ms() < self.next_vote_at and not self.need_increase_term:
            return
        if not st.is_candidate:
            return
        if self.last_parse_result == "WAIT_TO_VOTE_NEXT" or self.need_increase_term:
            term = st.next_term()
            self.last_parse_result = "WAIT_TO_REVOTE"
        else:
            term = st.term
        end_index, end_term = self.ledger_end()
        if self.need_increase_term:
            self.next_vote_at = self._next_vote_at()
            self.need_increase_term = False
            return
        votes: dict[asyncio.Future[Body], str] = {}
        for peer in st.peers:
            body = base(
                st.group, local_id=st.self_id, remote_id=peer, leader_id=st.self_id, term=term
            )
            body.update(ledgerEndIndex=end_index, ledgerEndTerm=end_term)
            if peer == st.self_id:
                fut: asyncio.Future[Body] = asyncio.ensure_future(self.handle_vote(body, True))
            else:
                fut = asyncio.ensure_future(self.rpc.call(peer, DLedgerRequestCode.VOTE, body))
            votes[fut] = peer
        known_max, valid, accepted, not_ready, bigger_ledger = term, 0, 0, 0, 0
        has_leader = False
        pending = set(votes)
        t = self.timings
        wait_s = (2000 + random.randrange(t.max_vote_interval_ms)) / 1000
        deadline = asyncio.get_running_loop().time() + wait_s
        while pending:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            done, pending = await asyncio.wait(
                pending, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            for fut in done:
                reply = fut.result()
                result = reply.get("voteResult", VoteResult.UNKNOWN.value)
                if result != VoteResult.UNKNOWN:
                    valid += 1
                if result == VoteResult.ACCEPT:
                    accepted += 1
                elif result == VoteResult.REJECT_ALREADY_HAS_LEADER:
                    has_leader = True
                elif result in (
                    VoteResult.REJECT_TERM_SMALL_THAN_LEDGER,
                    VoteResult.REJECT_EXPIRED_VOTE_TERM,
                ):
                    known_max = max(known_max, term_of(reply))
                elif result in (
                    VoteResult.REJECT_EXPIRED_LEDGER_TERM,
                    VoteResult.REJECT_SMALL_LEDGER_END_INDEX,
                ):
                    bigger_ledger += 1
                elif result == VoteResult.REJECT_TERM_NOT_READY:
                    not_ready += 1
            if has_leader or st.is_quorum(accepted) or st.is_quorum(accepted + not_ready):
                break
        for fut in pending:
            fut.add_done_callback(_consume)
        if known_max > term:
            result_name = "WAIT_TO_VOTE_NEXT"
            self.next_vote_at = self._next_vote_at()
            self.change_to_candidate(known_max)
        elif has_leader:
            result_name = "WAIT_TO_REVOTE"
            self.next_vote_at = (
                self._next_vote_at() + t.heartbeat_interval_ms * t.max_heartbeat_leak
            )
        elif not st.is_quorum(valid):
            result_name = "WAIT_TO_REVOTE"
            self.next_vote_at = self._next_vote_at()
        elif not st.is_quorum(valid - bigger_ledger):
            result_name = "WAIT_TO_REVOTE"
            self.next_vote_at = self._next_vote_at() + t.max_vote_interval_ms
        elif st.is_quorum(accepted):
            result_name = "PASSED"
        elif st.is_quorum(accepted + not_ready):
            result_name = "REVOTE_IMMEDIATELY"
        else:
            result_name = "WAIT_TO_VOTE_NEXT"
            self.next_vote_at = self._next_vote_at()
        self.last_parse_result = result_name
        log.info(
            "dledger %s: vote in term %d: %d accepted, %d not ready, %d bigger ledger, "
            "%d valid of %d; %s",
            st.self_id,
            term,
            accepted,
            not_ready,
            bigger_ledger,
            valid,
            len(st.peers),
            result_name,
        )
        if result_name == "PASSED" and st.is_candidate:
            self.change_to_leader(term)

    # -- leadership transfer ---------------------------------------------------------------------
    async def handle_leadership_transfer(self, request: Body) -> Body:
        """On the leader: ask the transferee to take over, and answer with its outcome."""
        st = self.state
        term = term_of(request)
        if st.term != term:
            return answer(request, DLedgerResponseCode.INCONSISTENT_TERM, term=st.term)
        if not st.is_leader:
            return answer(request, DLedgerResponseCode.NOT_LEADER, term=st.term)
        if st.transferee is not None:
            return answer(request, DLedgerResponseCode.LEADER_TRANSFERRING, term=st.term)
        transferee = str(request.get("transfereeId"))
        st.transferee = transferee
        take = base(
            st.group, local_id=st.self_id, remote_id=transferee, leader_id=st.self_id, term=term
        )
        take.update(
            takeLeadershipLedgerIndex=self.ledger_end()[0],
            transferId=st.self_id,
            transfereeId=transferee,
        )
        reply = await self.rpc.call(
            transferee, DLedgerRequestCode.LEADERSHIP_TRANSFER, take, timeout=10.0
        )
        if code_of(reply) != DLedgerResponseCode.SUCCESS or (
            st.term == term and st.transferee is not None
        ):
            st.transferee = None
        return reply

    async def handle_take_leadership(self, request: Body) -> Body:
        """On the transferee: become a candidate of the next term now and report the outcome."""
        st = self.state
        term = term_of(request)
        if st.term != term:
            return answer(request, DLedgerResponseCode.INCONSISTENT_TERM, term=st.term)
        target = term + 1
        st.term_to_take_leadership = target
        fut: asyncio.Future[Body] = asyncio.get_running_loop().create_future()
        self._take_leadership = (target, fut)
        self.change_to_candidate(target)
        self.need_increase_term = True
        self._wake.set()
        try:
            async with asyncio.timeout(8.0):
                return await fut
        except TimeoutError:
            return answer(request, DLedgerResponseCode.TAKE_LEADERSHIP_FAILED, term=st.term)
        finally:
            self._take_leadership = None

    def _check_take_leadership(self, term: int, role: Role) -> None:
        if self._take_leadership is None:
            return
        target, fut = self._take_leadership
        if fut.done():
            return
        # as Java's transferee answers: only code and term
        body: Body = {"code": int(DLedgerResponseCode.SUCCESS), "term": term}
        if term > target:
            body["code"] = int(DLedgerResponseCode.EXPIRED_TERM)
        elif term == target and role == Role.LEADER:
            pass
        elif term == target and role == Role.FOLLOWER:
            body["code"] = int(DLedgerResponseCode.TAKE_LEADERSHIP_FAILED)
        else:
            return
        fut.set_result(body)


def _consume(fut: asyncio.Future[Body]) -> None:
    if not fut.cancelled():
        fut.exception()
