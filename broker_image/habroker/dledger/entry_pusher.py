"""DLedgerEntryPusher: the leader's EntryDispatchers, the follower's EntryHandler and the
QuorumAckChecker (seed 001).

Leader side: one EntryDispatcher per follower.  After every change of term it COMPAREs from
its ledger end backwards to the last entry both logs share, TRUNCATEs the follower's divergent
tail there, then APPENDs in index order (pipelined, batched: a Java follower accepts batches
whatever the leader's ``enableBatchPush``) and, when idle, sends COMMIT once a second.  Each
answer moves the follower's water mark; the QuorumAckChecker takes the median water mark of the
current term as the committed index and completes the producers waiting on it.

Follower side: the EntryHandler holds APPENDs by index (``writeRequestMap``) and writes them
strictly in order; COMMIT / COMPARE / TRUNCATE go through one queue and are served first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from habroker.dledger.entry import INDEX_UNIT_SIZE, DLedgerEntry, entries_raw, same_entry
from habroker.dledger.entry import decode as decode_entry
from habroker.dledger.member_state import MemberState
from habroker.dledger.protocol import (
    RAW_KEY,
    Body,
    DLedgerRequestCode,
    DLedgerResponseCode,
    PushType,
    RawEntries,
    code_of,
    push_entries,
    push_request,
    push_span,
    raw_push_header,
    term_of,
)
from habroker.dledger.rpc_service import DLedgerRpcService

log = logging.getLogger(__name__)

RC = DLedgerResponseCode


class DLedgerStore(Protocol):
    """What the pusher needs of DLedgerMmapFileStore."""

    @property
    def ledger_begin_index(self) -> int: ...
    @property
    def ledger_end_index(self) -> int: ...
    @property
    def ledger_end_term(self) -> int: ...
    @property
    def committed_index(self) -> int: ...
    @property
    def flushed_index(self) -> int: ...
    def get(self, index: int) -> DLedgerEntry | None: ...
    def raw_entries(self, first: int, max_count: int, max_bytes: int) -> list[memoryview]: ...
    def raw_push_body(self, first: int, max_count: int, max_bytes: int) -> tuple[int, bytes]: ...
    def append_batch_as_follower(
        self, entries: Sequence[DLedgerEntry], leader_term: int, leader_id: str
    ) -> None: ...
    def append_raw_as_follower(
        self, data: bytes, first: int, count: int, leader_term: int, leader_id: str
    ) -> None: ...
    def truncate(self, entry: DLedgerEntry, leader_term: int, leader_id: str) -> int: ...
    def update_committed_index(self, term: int, index: int) -> None: ...


@dataclass(frozen=True)
class PusherConfig:
    max_wait_ack_ms: int = 2500  # DLedgerConfig.maxWaitAckTimeMs
    max_push_timeout_ms: int = 1000  # maxPushTimeOutMs: resend the first unanswered push
    max_pending_pushes: int = 1000
    max_batch_entries: int = 64
    max_batch_bytes: int = 1 << 20
    sync_flush: bool = False  # SYNC_FLUSH: a peer acknowledges only what it has flushed
    #: APPENDs to habroker peers as the data files' bytes (PUSH_RAW), not DLedger's JSON
    raw_push: bool = True


#: the longest a loop waiting for work sleeps (one timer for all of them: an
#: ``asyncio.timeout`` around each wait cost more than the work it waited for)
TICK_S = 0.05
#: a push not answered in this time is answered TIMEOUT (below the leader's 3 s RPC timeout)
PUSH_WAIT_MS = 2500


def _now_ms() -> float:
    return time.monotonic() * 1000


@dataclass
class PendingAppend:
    future: asyncio.Future[Body]
    deadline: float
    pos: int


@dataclass(frozen=True)
class PushPayload:
    """The entries of an APPEND from ``first``: for a PUSH_RAW their ``raw`` bytes, else one
    decoded ``entry`` or a ``batch`` (their JSON, built straight from the data files).  Built
    once per (term, first index, form) and sent to every follower that needs those entries."""

    count: int
    total_size: int
    entry: DLedgerEntry | None = None
    batch: msgspec.Raw | None = None
    raw: bytes | None = None

    @classmethod
    def of(cls, raw: list[memoryview]) -> PushPayload:
        """From the entries' bytes as they lie in the data files."""
        total = sum(len(entry) for entry in raw)
        if len(raw) == 1:
            return cls(1, total, entry=decode_entry(raw[0]))
        return cls(len(raw), total, batch=entries_raw(raw))


class WaterMarks:
    """peerWaterMarksByTerm: the highest index each peer holds, per term of the leader."""

    def __init__(self, state: MemberState) -> None:
        self.state = state
        self.term = -1
        self.marks: dict[str, int] = {}

    def _check(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.marks = {peer: -1 for peer in self.state.peers}

    def membership_changed(self) -> None:
        """Marks for the new list: a new peer has none yet, a removed one no longer counts."""
        self.marks = {peer: self.marks.get(peer, -1) for peer in self.state.peers}

    def update(self, term: int, peer: str, index: int) -> bool:
        if term != self.state.term:
            return False
        self._check(term)
        if peer not in self.marks:
            return False  # a peer the membership no longer has
        if self.marks.get(peer, -1) < index:
            self.marks[peer] = index
            return True
        return False

    def get(self, term: int, peer: str) -> int:
        self._check(term)
        return self.marks.get(peer, -1)

    def quorum_index(self, term: int) -> int:
        self._check(term)
        ranked = sorted(self.marks.values(), reverse=True)
        return ranked[len(ranked) // 2]


class DLedgerEntryPusher:
    def __init__(
        self,
        state: MemberState,
        store: DLedgerStore,
        rpc: DLedgerRpcService,
        config: PusherConfig,
        on_committed: Callable[[int], None],
        flush: Callable[[], Any] | None = None,
    ) -> None:
        self.state = state
        self.store = store
        self.rpc = rpc
        self.config = config
        self.on_committed = on_committed
        self.flush = flush
        self.water_marks = WaterMarks(state)
        self.pending: dict[int, PendingAppend] = {}
        self.pending_term = -1
        self.dispatchers = {peer: EntryDispatcher(self, peer) for peer in state.others}
        self.handler = EntryHandler(self)
        self._ack_wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._dispatch_tasks: dict[str, asyncio.Task[None]] = {}
        self.last_quorum_index = -1
        self._payloads: dict[tuple[int, int, bool], PushPayload] = {}
        self._push_scheduled = False
        self._commit_scheduled = False
        self._stopped = False  # no pushes or dispatch from callbacks left behind by stop()

    def start(self) -> None:
        self._stopped = False
        for dispatcher in self.dispatchers.values():
            self._start_dispatcher(dispatcher)
        self._tasks.append(asyncio.create_task(self.handler.run(), name="entry-handler"))
        self._tasks.append(asyncio.create_task(self._quorum_ack_checker(), name="quorum-ack"))
        self._tasks.append(asyncio.create_task(self._ticker(), name="dledger-tick"))

    async def _ticker(self) -> None:
        """Wakes the waiting loops every :data:`TICK_S` (dispatchers only while they append:
        COMPARE retries keep their own pace) and answers pushes that waited too long."""
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self.handler.expire(_now_ms() - PUSH_WAIT_MS)
            except Exception:
                log.exception("dledger %s: expiring pushes", self.state.self_id)
            self.handler.wake.set()
            self._ack_wake.set()
            for dispatcher in self.dispatchers.values():
                if dispatcher.type == PushType.APPEND:
                    dispatcher.wake.set()

    def _start_dispatcher(self, dispatcher: EntryDispatcher) -> None:
        self._dispatch_tasks[dispatcher.peer] = asyncio.create_task(
            dispatcher.run(), name=f"dispatcher-{dispatcher.peer}"
        )

    def membership_changed(self) -> None:
        """One dispatcher per peer of the new list: a new peer's starts with COMPARE (from an
        empty log it is then sent everything); a removed peer's stops."""
        self.water_marks.membership_changed()
        wanted = set(self.state.others) if self.state.is_member else set()
        for peer in [p for p in self.dispatchers if p not in wanted]:
            del self.dispatchers[peer]
            task = self._dispatch_tasks.pop(peer, None)
            if task is not None:
                task.cancel()
        for peer in self.state.others:
            if peer in wanted and peer not in self.dispatchers:
                self.dispatchers[peer] = EntryDispatcher(self, peer)
                if self._tasks:  # started
                    self._start_dispatcher(self.dispatchers[peer])
        self.wake_ack_checker()

    async def stop(self) -> None:
        self._stopped = True
        tasks = [*self._tasks, *self._dispatch_tasks.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        self._dispatch_tasks.clear()
        self.fail_pending(RC.TERM_CHANGED)
        self.handler.expire(float("inf"))  # no handler and no ticker any more: answer them

    def push_payload(self, term: int, first: int, raw: bool = False) -> PushPayload | None:
        """The APPEND payload from ``first`` (None: nothing there yet).  A leader's entries
        never change within its term, so followers at the same index share one payload (the
        base64 and JSON are the most expensive part of a push)."""
        key = (term, first, raw)
        payload = self._payloads.get(key)
        if payload is not None:
            return payload
        cfg = self.config
        if raw:
            count, body = self.store.raw_push_body(
                first, cfg.max_batch_entries, cfg.max_batch_bytes
            )
            if not count:
                return None
            size = len(body) - count * INDEX_UNIT_SIZE
            payload = self._payloads[key] = PushPayload(count, size, raw=body)
        else:
            entries = self.store.raw_entries(first, cfg.max_batch_entries, cfg.max_batch_bytes)
            if not entries:
                return None
            payload = self._payloads[key] = PushPayload.of(entries)
        # the oldest go (followers in step share the newest; one far behind builds its own):
        # at most 16 payloads of up to max_batch_bytes each are held
        while len(self._payloads) > 16:
            del self._payloads[next(iter(self._payloads))]
        return payload

    def wake_dispatchers(self, inline: bool = False) -> None:
        """New entries: the appending dispatchers push them in one callback after this loop
        pass (every produce of the pass in one push); the others are woken.  ``inline``: an
        appending dispatcher with no push in flight pushes at once instead (one producer
        alone gains a loop pass of latency; under load the pushes still coalesce)."""
        later = False
        for dispatcher in self.dispatchers.values():
            if dispatcher.type != PushType.APPEND:
                dispatcher.wake.set()
            elif not dispatcher.inflight and inline:
                dispatcher.push_now()
            else:
                later = True
        if later and not self._push_scheduled:
            self._push_scheduled = True
            asyncio.get_running_loop().call_soon(self._push_appends)

    def _push_appends(self) -> None:
        self._push_scheduled = False
        if self._stopped:
            return
        for dispatcher in self.dispatchers.values():
            dispatcher.push_now()

    def wake_ack_checker(self) -> None:
        self._ack_wake.set()

    # -- leader: producers waiting for a quorum -----------------------------------------------
    def wait_ack(self, entry: DLedgerEntry) -> asyncio.Future[Body]:
        """A future completed when ``entry`` is committed (or its wait fails)."""
        return self.wait_ack_at(entry.term, entry.index, entry.pos)

    def wait_ack_at(self, term: int, index: int, pos: int) -> asyncio.Future[Body]:
        """:meth:`wait_ack` for the entry at ``index`` (``pos``) of ``term``."""
        if self.pending_term != term:
            self.fail_pending(RC.TERM_CHANGED)
            self.pending_term = term
        if not self.config.sync_flush:
            self.water_marks.update(term, self.state.self_id, index)
        fut: asyncio.Future[Body] = asyncio.get_running_loop().create_future()
        self.pending[index] = PendingAppend(fut, _now_ms() + self.config.max_wait_ack_ms, pos)
        # no other producer waits for a quorum: no produce of this pass to share a push with,
        # so the followers get it now rather than after the loop pass
        self.wake_dispatchers(inline=len(self.pending) == 1 and not self._stopped)
        if not self.dispatchers or self.config.sync_flush:
            self.wake_ack_checker()  # otherwise the followers' answers run the check
        return fut

    def pending_full(self) -> bool:
        return len(self.pending) > 10000  # DLedgerConfig.maxPendingRequestsNum

    def fail_pending(self, code: DLedgerResponseCode) -> None:
        for index, item in self.pending.items():
            if not item.future.done():
                item.future.set_result(
                    {
                        "code": int(code),
                        "index": index,
                        "leaderId": self.state.leader_id,
                        "group": self.state.group,
                    }
                )
        self.pending.clear()

    def _complete_pending(self, upto: int) -> None:
        done = [i for i in self.pending if i <= upto]
        for index in sorted(done):
            item = self.pending.pop(index)
            if not item.future.done():
                item.future.set_result(
                    {
                        "code": int(RC.SUCCESS),
                        "index": index,
                        "pos": item.pos,
                        "term": self.state.term,
                        "leaderId": self.state.self_id,
                        "group": self.state.group,
                    }
                )

    def _expire_pending(self) -> None:
        now = _now_ms()
        for index in sorted(self.pending):
            item = self.pending[index]
            if item.deadline > now:
                break
            del self.pending[index]
            if not item.future.done():
                item.future.set_result(
                    {
                        "code": int(RC.WAIT_QUORUM_ACK_TIMEOUT),
                        "index": index,
                        "term": self.state.term,
                        "group": self.state.group,
                    }
                )

    def check_quorum(self) -> None:
        """QuorumAckChecker's pass: the median water mark of this term is committed, and the
        producers waiting up to it are answered.  Run by its loop on a wake-up or tick, and
        straight from a follower's answer (no loop pass between the answer and the commit)."""
        st = self.state
        if st.is_leader:
            term = st.term
            if self.pending_term != term and self.pending:
                self.fail_pending(RC.TERM_CHANGED)
            own = (
                self.store.flushed_index if self.config.sync_flush else self.store.ledger_end_index
            )
            self.water_marks.update(term, st.self_id, own)
            quorum = self.water_marks.quorum_index(term)
            if quorum > self.store.committed_index:
                self.store.update_committed_index(term, quorum)
                self._committed_soon()
            if self.pending:
                self._complete_pending(self.store.committed_index)
                self._expire_pending()
            self.last_quorum_index = quorum
        elif self.pending:
            self.fail_pending(RC.NOT_LEADER)

    async def _quorum_ack_checker(self) -> None:
        while True:
            try:
                self._ack_wake.clear()
                self.check_quorum()
                await self._ack_wake.wait()  # or the next tick
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("dledger %s: quorum ack checker", self.state.self_id)
                await asyncio.sleep(0.1)

    # -- follower -------------------------------------------------------------------------------
    def handle_push(self, request: Body) -> Body | Awaitable[Body]:
        return self.handler.handle_push(request)

    def follower_committed(self, term: int, commit_index: int) -> None:
        before = self.store.committed_index
        self.store.update_committed_index(term, commit_index)
        if self.store.committed_index != before:
            self._committed_soon()

    def _committed_soon(self) -> None:
        """``on_committed`` (the consume queues' dispatch) in a callback after this one: the
        answers the commit completes (a producer's, a push's) leave first, as RocketMQ's
        ReputMessageService indexes behind the acknowledgement."""
        if not self._commit_scheduled:
            self._commit_scheduled = True
            asyncio.get_running_loop().call_soon(self._run_committed)

    def _run_committed(self) -> None:
        self._commit_scheduled = False
        if self._stopped:
            return  # a restarted store dispatches what is committed when it starts
        try:
            self.on_committed(self.store.committed_index)
        except Exception:
            log.exception("dledger %s: dispatching committed entries", self.state.self_id)


class EntryDispatcher:
    """Pushes the leader's log to one follower (the type machine of seed 001)."""

    def __init__(self, pusher: DLedgerEntryPusher, peer: str) -> None:
        self.pusher = pusher
        self.peer = peer
        self.wake = asyncio.Event()
        self.type = PushType.COMPARE
        self.term = -1
        self.leader_id: str | None = None
        self.write_index = -1
        self.compare_index = -1
        self.inflight: dict[int, tuple[float, int]] = {}  # first index → (sent ms, count)
        self.last_commit_push = 0.0
        self.pushes = 0
        self.raw_push = pusher.config.raw_push

    @property
    def water_mark(self) -> int:
        return self.pusher.water_marks.get(self.term, self.peer)

    def _fresh(self) -> bool:
        st = self.pusher.state
        if not st.is_leader:
            return False
        if self.term != st.term or self.leader_id != st.leader_id:
            self.term = st.term
            self.leader_id = st.self_id
            self.raw_push = self.pusher.config.raw_push  # a peer may have been replaced
            self._change(-1, PushType.COMPARE)
        return True

    def _change(self, index: int, target: PushType) -> None:
        if target == PushType.APPEND:
            self.compare_index = -1
            self.pusher.water_marks.update(self.term, self.peer, index)
            self.pusher.wake_ack_checker()
            self.write_index = index + 1
            self.inflight.clear()
        elif target == PushType.COMPARE:
            self.compare_index = -1
            self.inflight.clear()
        else:
            self.compare_index = -1
        self.type = target

    def _request(self, push_type: PushType, entry: DLedgerEntry | None) -> Body:
        st = self.pusher.state
        return push_request(
            st.group,
            local_id=st.self_id,
            remote_id=self.peer,
            term=self.term,
            push_type=push_type,
            commit_index=self.pusher.store.committed_index,
            entry=entry,
        )

    def push_now(self) -> None:
        """Push what is new at once, from a callback (not the dispatcher's task): an APPEND
        dispatcher's part of :meth:`run`, and the same fallback to COMPARE on a failure."""
        if self.type != PushType.APPEND:
            return
        try:
            if self._fresh() and self.type == PushType.APPEND:
                self._append()
        except Exception as exc:
            self._failed(exc)
            self.wake.set()

    def _failed(self, exc: Exception) -> None:
        log.warning(
            "dledger %s → %s: push failed (%s); comparing again",
            self.pusher.state.self_id,
            self.peer,
            exc,
        )
        self._change(-1, PushType.COMPARE)

    async def run(self) -> None:
        while True:
            try:
                if self._fresh():
                    if self.type == PushType.APPEND:
                        self._append()
                    else:
                        await self._compare()
                self.wake.clear()
                if self.type == PushType.APPEND:
                    await self.wake.wait()  # an answer, a new entry or the next tick
                else:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.2):
                            await self.wake.wait()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._failed(exc)
                await asyncio.sleep(0.5)

    # -- APPEND ---------------------------------------------------------------------------------
    def _append(self) -> None:
        store = self.pusher.store
        cfg = self.pusher.config
        # the first unanswered push timed out: send from the water mark again
        first = self.water_mark + 1
        sent = self.inflight.get(first)
        if sent is not None and _now_ms() - sent[0] > cfg.max_push_timeout_ms:
            self.inflight.clear()
            self.write_index = first
        while self.write_index <= store.ledger_end_index:
            if len(self.inflight) >= cfg.max_pending_pushes:
                return
            index = self.write_index
            if index < store.ledger_begin_index:
                self._change(-1, PushType.COMPARE)
                return
            payload = self.pusher.push_payload(self.term, index, self.raw_push)
            if payload is None:
                return
            self._send_append(index, payload)
            self.write_index += payload.count
        if _now_ms() - self.last_commit_push > 1000:
            self.last_commit_push = _now_ms()
            self._spawn(self._request(PushType.COMMIT, None), None)

    def _send_append(self, first: int, payload: PushPayload) -> None:
        self.inflight[first] = (_now_ms(), payload.count)
        self.last_commit_push = _now_ms()
        self.pushes += 1
        if payload.raw is not None:
            st = self.pusher.state
            fields = raw_push_header(
                st.group,
                local_id=st.self_id,
                remote_id=self.peer,
                term=self.term,
                commit_index=self.pusher.store.committed_index,
                first=first,
                count=payload.count,
            )
            span = (first, payload.count)
            term = self.term
            if not self.pusher.rpc.raw_push_now(
                self.peer,
                fields,
                payload.raw,
                lambda reply: self._on_answer(reply, term, span, True),
            ):  # not connected yet: the RPC task connects
                call = self.pusher.rpc.call_raw_push(self.peer, fields, payload.raw)
                self._await(call, span, raw=True)
            return
        if payload.entry is not None:  # one entry travels as ``entry``, as a Java leader sends it
            request = self._request(PushType.APPEND, payload.entry)
        else:
            request = self._request(PushType.APPEND, None)
            # batchEntry and the getters Java writes beside it (PushEntryRequest)
            request.update(
                batchEntry=payload.batch,
                batch=True,
                count=payload.count,
                firstEntryIndex=first,
                lastEntryIndex=first + payload.count - 1,
                totalSize=payload.total_size,
            )
        self._spawn(request, (first, payload.count))

    def _spawn(self, request: Body, span: tuple[int, int] | None) -> None:
        self._await(self.pusher.rpc.call(self.peer, DLedgerRequestCode.PUSH, request), span)

    def _await(
        self, call: Coroutine[Any, Any, Body], span: tuple[int, int] | None, raw: bool = False
    ) -> None:
        term = self.term
        task = asyncio.ensure_future(call)
        task.add_done_callback(lambda t: self._answered(t, term, span, raw))

    def _answered(
        self, task: asyncio.Future[Body], term: int, span: tuple[int, int] | None, raw: bool
    ) -> None:
        if task.cancelled() or span is None:
            return
        self._on_answer(task.result(), term, span, raw)

    def _on_answer(self, reply: Body, term: int, span: tuple[int, int], raw: bool) -> None:
        if term != self.term or self.type != PushType.APPEND:
            return
        code = code_of(reply)
        first, count = span
        if code == RC.UNSUPPORTED and raw:
            if self.raw_push:  # the first of the pushes in flight to say so
                log.info(
                    "dledger %s → %s: no raw pushes there (a Java peer); pushing DLedger's JSON",
                    self.pusher.state.self_id,
                    self.peer,
                )
                self.raw_push = False
                self.inflight.clear()
                self.write_index = self.water_mark + 1
                self.wake.set()
        elif code == RC.SUCCESS:
            self.inflight.pop(first, None)
            if self.pusher.water_marks.update(term, self.peer, first + count - 1):
                try:
                    self.pusher.check_quorum()  # the producers waiting for it are answered now
                except Exception:
                    log.exception("dledger %s: quorum check", self.pusher.state.self_id)
                    self.pusher.wake_ack_checker()
            self.push_now()  # what came while the push was in flight, or held back by the limit
        elif code == RC.INCONSISTENT_STATE or (
            # REPEATED_PUSH of the first entry the follower lacks: it still holds an earlier
            # push of it that nobody waits for any more. A Java follower keeps a push that came
            # while it was not yet following (or ahead of its log) until that index is next,
            # answers it only after our RPC timeout, and refuses every resend as repeated.
            code == RC.REPEATED_PUSH and first == self.water_mark + 1
        ):
            log.info(
                "dledger %s → %s: APPEND %d refused (%s); comparing",
                self.pusher.state.self_id,
                self.peer,
                first,
                RC.name_of(code),
            )
            self._change(-1, PushType.COMPARE)  # a COMPARE also clears a follower's pushes
            self.wake.set()

    # -- COMPARE / TRUNCATE ---------------------------------------------------------------------
    async def _compare(self) -> None:
        store = self.pusher.store
        rpc = self.pusher.rpc
        while self._fresh() and self.type in (PushType.COMPARE, PushType.TRUNCATE):
            if self.compare_index == -1 and store.ledger_end_index == -1:
                # nothing to compare: an empty leader appends from index 0
                self._change(-1, PushType.APPEND)
                return
            if self.compare_index == -1 or not (
                store.ledger_begin_index <= self.compare_index <= store.ledger_end_index
            ):
                self.compare_index = store.ledger_end_index
            entry = store.get(self.compare_index)
            if entry is None:
                raise RuntimeError(f"compare index {self.compare_index} has no entry")
            term = self.term
            reply = await rpc.call(
                self.peer, DLedgerRequestCode.PUSH, self._request(PushType.COMPARE, entry)
            )
            if term != self.term or not self.pusher.state.is_leader:
                return
            code = code_of(reply)
            if code not in (RC.SUCCESS, RC.INCONSISTENT_STATE):
                if code != RC.NETWORK_ERROR:
                    log.info(
                        "dledger %s → %s: COMPARE %d answered %s",
                        self.pusher.state.self_id,
                        self.peer,
                        self.compare_index,
                        RC.name_of(code),
                    )
                return  # the follower is away or not following yet: try again later
            begin = int(reply.get("beginIndex", -1))
            end = int(reply.get("endIndex", -1))
            truncate_index = -1
            if code == RC.SUCCESS:
                if self.compare_index == end:
                    self._change(self.compare_index, PushType.APPEND)
                    log.info(
                        "dledger %s → %s: logs match at %d; appending",
                        self.pusher.state.self_id,
                        self.peer,
                        self.compare_index,
                    )
                    return
                truncate_index = self.compare_index
            elif (
                end < store.ledger_begin_index
                or begin > store.ledger_end_index
                or self.compare_index < begin
            ):
                truncate_index = store.ledger_begin_index
            elif self.compare_index > end:
                self.compare_index = end
            else:
                self.compare_index -= 1
            if self.compare_index < store.ledger_begin_index:
                truncate_index = store.ledger_begin_index
            if truncate_index != -1:
                await self._truncate(truncate_index)
                return

    async def _truncate(self, index: int) -> None:
        self._change(index, PushType.TRUNCATE)
        entry = self.pusher.store.get(index)
        if entry is None:
            raise RuntimeError(f"truncate index {index} has no entry")
        reply = await self.pusher.rpc.call(
            self.peer, DLedgerRequestCode.PUSH, self._request(PushType.TRUNCATE, entry)
        )
        if code_of(reply) != RC.SUCCESS:
            raise RuntimeError(f"TRUNCATE {index} answered {RC.name_of(code_of(reply))}")
        log.info(
            "dledger %s → %s: follower truncated to %d; appending",
            self.pusher.state.self_id,
            self.peer,
            index,
        )
        self._change(index, PushType.APPEND)


@dataclass
class _Waiting:
    request: Body
    future: asyncio.Future[Body]
    since: float = field(default_factory=_now_ms)
    entries: list[DLedgerEntry] = field(default_factory=list)  # an APPEND's, decoded once
    raw: RawEntries | None = None  # or a PUSH_RAW's bytes
    first: int = -1  # an APPEND's first and last index
    last: int = -1


class EntryHandler:
    """The follower's side of the pushes."""

    def __init__(self, pusher: DLedgerEntryPusher) -> None:
        self.pusher = pusher
        self.write_requests: dict[int, _Waiting] = {}
        self.control: deque[_Waiting] = deque()
        self.wake = asyncio.Event()
        self._in_control = False

    def _response(self, request: Body, code: int) -> Body:
        """PushEntryResponse as the Java follower builds it: the request's group and term, no
        ids; ``index`` (the first entry's) and ``count`` except for COMMIT (count 0)."""
        store = self.pusher.store
        out: Body = {"group": request.get("group"), "term": term_of(request), "code": int(code)}
        out["count"] = 0
        if request.get("type") != PushType.COMMIT:
            out["index"], out["count"] = push_span(request)
        out["beginIndex"] = store.ledger_begin_index
        out["endIndex"] = store.ledger_end_index
        return out

    def handle_push(self, request: Body) -> Body | Awaitable[Body]:
        """The answer at once for the APPEND that is next in the log (the common case: the
        handler's task is not woken for it), else a future the handler answers."""
        st = self.pusher.state
        if request.get("remoteId") != st.self_id:
            return self._response(request, RC.UNKNOWN_MEMBER)
        if request.get("group") != st.group:
            return self._response(request, RC.UNKNOWN_GROUP)
        fut: asyncio.Future[Body] = asyncio.get_running_loop().create_future()
        waiting = _Waiting(request, fut)
        kind = request.get("type")
        if kind == PushType.APPEND:
            waiting.raw = raw = request.get(RAW_KEY)
            if raw is not None:
                waiting.first, waiting.last = raw.first, raw.first + raw.count - 1
            else:
                waiting.entries = entries = push_entries(request)
                if not entries:
                    return self._response(request, RC.UNEXPECTED_ARGUMENT)
                waiting.first, waiting.last = entries[0].index, entries[-1].index
            if waiting.first in self.write_requests:
                return self._response(request, RC.REPEATED_PUSH)
            if self._next_in_log(waiting.first):
                return self._append_now(waiting)
            self.write_requests[waiting.first] = waiting
        elif kind == PushType.COMMIT:
            self.control.append(waiting)
        elif kind in (PushType.COMPARE, PushType.TRUNCATE):
            if not request.get("entry"):
                return self._response(request, RC.UNEXPECTED_ARGUMENT)
            self._drop_appends(RC.INCONSISTENT_STATE)
            self.control.append(waiting)
        else:
            return self._response(request, RC.UNEXPECTED_ARGUMENT)
        self.wake.set()
        return fut  # answered by the handler, or TIMEOUT by :meth:`expire`

    def _next_in_log(self, first: int) -> bool:
        """An APPEND may be written by the request itself: it is the log's next entry, nothing
        of the handler's is queued or half done, and no flush has to come before the answer."""
        return (
            first == self.pusher.store.ledger_end_index + 1
            and not self.control
            and not self._in_control
            and not self.pusher.config.sync_flush
            and self.pusher.state.is_follower
        )

    def _append_now(self, waiting: _Waiting) -> Body:
        if not self._append(waiting):
            return waiting.future.result()
        if self.write_requests:
            self.wake.set()  # pushes that came ahead of this one may follow it now
        request = waiting.request
        self.pusher.follower_committed(self.pusher.state.term, int(request.get("commitIndex", -1)))
        return self._response(request, RC.SUCCESS)

    def expire(self, before_ms: float) -> None:
        """Pushes waiting since before ``before_ms`` are answered TIMEOUT (a stuck handler
        must not hold the leader's RPCs until they fail on its side)."""
        for first, waiting in list(self.write_requests.items()):
            if waiting.since < before_ms:
                del self.write_requests[first]
                if not waiting.future.done():
                    waiting.future.set_result(self._response(waiting.request, RC.TIMEOUT))
        for waiting in self.control:
            if waiting.since < before_ms and not waiting.future.done():
                waiting.future.set_result(self._response(waiting.request, RC.TIMEOUT))

    def _drop_appends(self, code: int) -> None:
        for waiting in self.write_requests.values():
            if not waiting.future.done():
                waiting.future.set_result(self._response(waiting.request, code))
        self.write_requests.clear()

    def _check(self, request: Body) -> None:
        """appendAsFollower's preconditions: this term, this leader."""
        st = self.pusher.state
        if not st.is_follower:
            raise _Refused(RC.NOT_FOLLOWER)
        if term_of(request) != st.term:
            raise _Refused(RC.INCONSISTENT_TERM)
        if request.get("leaderId") != st.leader_id:
            raise _Refused(RC.INCONSISTENT_LEADER)

    async def run(self) -> None:
        while True:
            try:
                progressed = await self._work()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("dledger %s: entry handler", self.pusher.state.self_id)
                progressed = False
                await asyncio.sleep(0.1)
            if not progressed:
                self.wake.clear()
                await self.wake.wait()  # a push or the next tick

    async def _work(self) -> bool:
        st = self.pusher.state
        if not st.is_follower:
            while self.control:
                waiting = self.control.popleft()
                if not waiting.future.done():
                    waiting.future.set_result(self._response(waiting.request, RC.NOT_FOLLOWER))
            return False
        if self.control:
            waiting = self.control.popleft()
            self._in_control = True
            try:
                await self._control(waiting)
            finally:
                self._in_control = False
            return True
        store = self.pusher.store
        appended: list[_Waiting] = []
        while True:
            waiting_or_none = self.write_requests.pop(store.ledger_end_index + 1, None)
            if waiting_or_none is None:
                break
            if not self._append(waiting_or_none):
                break
            appended.append(waiting_or_none)
            if len(appended) >= 256:
                break
        if not appended:
            self._fast_forward()
            return False
        if self.pusher.config.sync_flush and self.pusher.flush is not None:
            await self.pusher.flush()
        last_commit = -1
        for waiting in appended:
            if not waiting.future.done():
                waiting.future.set_result(self._response(waiting.request, RC.SUCCESS))
            last_commit = max(last_commit, int(waiting.request.get("commitIndex", -1)))
        self.pusher.follower_committed(st.term, last_commit)
        return True

    def _append(self, waiting: _Waiting) -> bool:
        request = waiting.request
        try:
            self._check(request)
            leader = str(request.get("leaderId"))
            if waiting.raw is not None:
                raw = waiting.raw
                self.pusher.store.append_raw_as_follower(
                    raw.data, raw.first, raw.count, term_of(request), leader
                )
            else:
                self.pusher.store.append_batch_as_follower(
                    waiting.entries, term_of(request), leader
                )
            return True
        except _Refused as exc:
            waiting.future.set_result(self._response(request, exc.code))
        except Exception as exc:
            log.warning("dledger %s: APPEND refused: %s", self.pusher.state.self_id, exc)
            waiting.future.set_result(self._response(request, RC.INCONSISTENT_STATE))
        return False

    def _fast_forward(self) -> None:
        """checkAbnormalFuture: appends the log already has are answered; a stuck gap is
        reported as INCONSISTENT_STATE so the leader compares again."""
        store = self.pusher.store
        end = store.ledger_end_index
        now = _now_ms()
        for first, waiting in sorted(self.write_requests.items()):
            if waiting.last <= end:
                entries = waiting.raw.entries() if waiting.raw is not None else waiting.entries
                ok = all(same_entry(e, store.get(e.index)) for e in entries)
                waiting.future.set_result(
                    self._response(waiting.request, RC.SUCCESS if ok else RC.INCONSISTENT_STATE)
                )
                del self.write_requests[first]
            elif now - waiting.since > 1000:
                if not waiting.future.done():
                    waiting.future.set_result(
                        self._response(waiting.request, RC.INCONSISTENT_STATE)
                    )
                del self.write_requests[first]
                return

    async def _control(self, waiting: _Waiting) -> None:
        request = waiting.request
        store = self.pusher.store
        kind = request.get("type")
        code: int = RC.SUCCESS
        try:
            if kind == PushType.COMMIT:
                self._check(request)
                self.pusher.follower_committed(
                    term_of(request), int(request.get("commitIndex", -1))
                )
            elif kind == PushType.COMPARE:
                entry = push_entries(request)[0]
                if not same_entry(entry, store.get(entry.index)):
                    code = RC.INCONSISTENT_STATE
            else:  # TRUNCATE
                self._check(request)
                entry = push_entries(request)[0]
                index = store.truncate(entry, term_of(request), str(request.get("leaderId")))
                if index != entry.index:
                    code = RC.INCONSISTENT_STATE
                else:
                    log.info(
                        "dledger %s: truncated to %d at the leader's word",
                        self.pusher.state.self_id,
                        index,
                    )
                    if self.pusher.flush is not None:
                        await self.pusher.flush()
                    self.pusher.follower_committed(
                        term_of(request), int(request.get("commitIndex", -1))
                    )
        except _Refused as exc:
            code = exc.code
        except Exception as exc:
            log.warning("dledger %s: %s refused: %s", self.pusher.state.self_id, kind, exc)
            code = RC.INCONSISTENT_STATE
        if not waiting.future.done():
            waiting.future.set_result(self._response(request, code))


class _Refused(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(RC.name_of(code))
        self.code = code
