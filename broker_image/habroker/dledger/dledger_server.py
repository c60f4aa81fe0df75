"""DLedgerServer: one peer of a DLedger group — store, member state, elector, pusher, RPCs.

The broker talks to this class only: :meth:`append` on the leader (a future completed when a
quorum holds the entry), :attr:`listeners` for role changes, ``on_committed`` for the commit
index that consumers may see, :meth:`transfer_leadership` for rolling updates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from habroker.dledger.entry import DLedgerEntry
from habroker.dledger.entry_pusher import DLedgerEntryPusher, PusherConfig
from habroker.dledger.leader_elector import DLedgerLeaderElector, ElectionTimings
from habroker.dledger.member_state import MemberState, Role, parse_peers
from habroker.dledger.mmap_file_store import DLedgerMmapFileStore, EntryEncoder
from habroker.dledger.protocol import (
    Body,
    DLedgerRequestCode,
    DLedgerResponseCode,
    answer,
    base,
    code_of,
    decode_push,
)
from habroker.dledger.rpc_service import DLedgerRpcService, Handler

log = logging.getLogger(__name__)

RC = DLedgerResponseCode
AppendHook = Callable[[DLedgerEntry, bytearray], None]


class NotLeader(Exception):
    """An append on a peer that is not (or no longer) the leader."""

    def __init__(self, code: int, leader_id: str | None) -> None:
        super().__init__(f"{RC.name_of(code)} (leader: {leader_id or 'unknown'})")
        self.code = code
        self.leader_id = leader_id


@dataclass
class DLedgerSettings:
    group: str
    self_id: str
    peers: str
    store_root: Path
    bind_host: str = "127.0.0.1"
    data_file_size: int = 1 << 30
    timings: ElectionTimings = field(default_factory=ElectionTimings)
    pusher: PusherConfig = field(default_factory=PusherConfig)
    preferred_leader_ids: tuple[str, ...] = ()
    flush_interval_ms: int = 500
    # DLedgerConfig.maxLeadershipTransferWaitIndex: a transferee at most this far behind
    max_transfer_wait_index: int = 1000
    preferred_check_interval_ms: int = 1000  # how often a leader looks for a preferred peer


class DLedgerServer:
    def __init__(
        self,
        settings: DLedgerSettings,
        on_committed: Callable[[int], None] = lambda _index: None,
    ) -> None:
        self.settings = settings
        peers = parse_peers(settings.peers, settings.self_id)
        self.store = DLedgerMmapFileStore(
            settings.store_root, settings.self_id, data_file_size=settings.data_file_size
        )
        self.state = MemberState(
            settings.group,
            settings.self_id,
            peers,
            settings.store_root / f"dledger-{settings.self_id}",
        )
        self.store.current_term = lambda: self.state.term
        # the address book (every peer ever named), shared: a membership change updates it
        self.rpc = DLedgerRpcService(self.state.addresses, settings.self_id)
        self.elector = DLedgerLeaderElector(
            self.state,
            self.rpc,
            lambda: (self.store.ledger_end_index, self.store.ledger_end_term),
            settings.timings,
            settings.preferred_leader_ids,
        )
        self._on_committed = on_committed
        self.pusher = DLedgerEntryPusher(
            self.state,
            self.store,
            self.rpc,
            settings.pusher,
            self._committed,
            self.flush,
        )
        self._flush_lock = asyncio.Lock()
        self._flush_queued = False
        self._background: set[asyncio.Future[None]] = set()
        self._flush_task: asyncio.Task[None] | None = None
        self._preferred_task: asyncio.Task[None] | None = None
        self._preferred_warned: set[str] = set()
        self._running = False

    @property
    def listeners(self) -> list[Callable[[int, Role], None]]:
        return self.elector.listeners

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        self.store.recover()
        log.info(
            "dledger %s of %s: ledger [%d, %d] end term %d, committed %d, term %d, peers %s",
            self.state.self_id,
            self.state.group,
            self.store.ledger_begin_index,
            self.store.ledger_end_index,
            self.store.ledger_end_term,
            self.store.committed_index,
            self.state.term,
            self.state.peers,
        )
        rpc = self.rpc
        rpc.register(DLedgerRequestCode.HEART_BEAT, self._checked(self.elector.handle_heartbeat))
        rpc.register(DLedgerRequestCode.VOTE, self._checked(self.elector.handle_vote))
        rpc.register(DLedgerRequestCode.PUSH, self._checked(self.pusher.handle_push), decode_push)
        rpc.register_raw_push(self._checked(self.pusher.handle_push))
        rpc.register(DLedgerRequestCode.LEADERSHIP_TRANSFER, self._checked(self._transfer))
        rpc.register(DLedgerRequestCode.METADATA, self._metadata)
        for code in (DLedgerRequestCode.APPEND, DLedgerRequestCode.GET, DLedgerRequestCode.PULL):
            rpc.register(code, self._unsupported)
        await rpc.start(self.settings.bind_host)
        self._running = True
        self.pusher.start()
        self.elector.start()
        self._flush_task = asyncio.create_task(self._flush_loop(), name="dledger-flush")
        if self.settings.preferred_leader_ids:
            self._preferred_task = asyncio.create_task(
                self._preferred_leader_loop(), name="dledger-preferred-leader"
            )

    async def stop(self) -> None:
        if not self._running:
            return
        self._running = False
        if self._preferred_task is not None:
            self._preferred_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._preferred_task
        await self.elector.stop()
        await self.pusher.stop()
        if self._flush_task is not None:
            self._flush_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flush_task
        await self.rpc.stop()
        await self.flush()
        self.store.persist_checkpoint()
        self.store.close()

    # -- requests --------------------------------------------------------------------------------
    def _checked(self, handler: Handler) -> Handler:
        """DLedgerServer's guard: the request is for this group and this member."""

        def run(request: Body) -> Body | Awaitable[Body]:
            st = self.state
            if request.get("group") != st.group:
                return answer(request, RC.UNKNOWN_GROUP, term=st.term)
            if request.get("remoteId") != st.self_id:
                return answer(request, RC.UNKNOWN_MEMBER, term=st.term)
            return handler(request)

        return run

    async def _metadata(self, request: Body) -> Body:
        st = self.state
        out = base(st.group, local_id=st.self_id, leader_id=st.leader_id, term=st.term)
        out["peers"] = dict(st.peers)
        return out

    async def _unsupported(self, request: Body) -> Body:
        # a broker's entries are RocketMQ messages: raw client appends would corrupt its log
        return answer(request, RC.UNSUPPORTED, term=self.state.term)

    async def _transfer(self, request: Body) -> Body:
        st = self.state
        if request.get("transferId") == st.self_id:
            transferee = request.get("transfereeId")
            if not st.is_peer(transferee) or transferee == st.self_id:
                return answer(request, RC.UNKNOWN_MEMBER, term=st.term)
            behind = self.store.ledger_end_index - self.pusher.water_marks.get(
                st.term, str(transferee)
            )
            if behind >= self.settings.max_transfer_wait_index:
                return answer(request, RC.FALL_BEHIND_TOO_MUCH, term=st.term)
            return await self.elector.handle_leadership_transfer(request)
        if request.get("transfereeId") == st.self_id:
            if request.get("transferId") != st.leader_id:
                return answer(request, RC.INCONSISTENT_LEADER, term=st.term)
            # catch up to the index the leader had when it asked, then run for leader
            target = int(request.get("takeLeadershipLedgerIndex", -1))
            for _ in range(100):
                if self.store.ledger_end_index >= target:
                    break
                await asyncio.sleep(0.01)
            else:
                # still behind: a candidate with a shorter log cannot win, and with a term above
                # the leader's it would refuse the leader's pushes and never catch up (a Java
                # leader keeps leading as long as a majority answers its heartbeats).  Stay a
                # follower; the leader asks again (a Java leader every second).
                log.info(
                    "dledger %s: not taking leadership from %s: ledger end %d < %d",
                    st.self_id,
                    request.get("transferId"),
                    self.store.ledger_end_index,
                    target,
                )
                return {"code": int(RC.TAKE_LEADERSHIP_FAILED), "term": st.term}
            return await self.elector.handle_take_leadership(request)
        return answer(request, RC.UNEXPECTED_ARGUMENT, term=st.term)

    async def transfer_leadership(self, transferee: str) -> Body:
        """The admin call of a rolling update: hand leadership to ``transferee``."""
        st = self.state
        request = base(
            st.group,
            local_id=st.self_id,
            remote_id=st.self_id,
            leader_id=st.leader_id,
            term=st.term,
        )
        request.update(transferId=st.self_id, transfereeId=transferee)
        reply = self._checked(self._transfer)(request)
        return reply if isinstance(reply, dict) else await reply

    def preferred_transferee(self) -> tuple[str, int] | None:
        """On a leader that is not itself preferred: the preferred peer to hand leadership to
        (:meth:`_closest` of them), with how far behind it is; else None.

        DLedgerServer.checkPreferredLeader's rule, so a group of habroker and Java peers ends
        with the same leader whichever of them leads first.
        """
        st = self.state
        preferred = self.settings.preferred_leader_ids
        if not st.is_leader or not preferred or st.self_id in preferred:
            return None
        candidates = []
        for peer in preferred:
            if st.is_peer(peer):
                candidates.append(peer)
            elif peer not in self._preferred_warned:
                self._preferred_warned.add(peer)
                log.warning("dledger %s: preferred leader %s is not a peer", st.self_id, peer)
        return self._closest(candidates)

    def shutdown_transferee(self) -> tuple[str, int] | None:
        """On a leader about to stop: :meth:`_closest` of the other peers, or None."""
        st = self.state
        if not st.is_leader:
            return None
        return self._closest([peer for peer in st.peers if peer != st.self_id])

    def _closest(self, candidates: list[str]) -> tuple[str, int] | None:
        """The live candidate least behind the leader's log (the first named wins ties), with
        how far behind it is, if fewer than ``max_transfer_wait_index`` entries (it can take
        over at once); None then, or while a transfer is under way."""
        st = self.state
        if st.transferee is not None:
            return None
        best: tuple[str, int] | None = None
        for peer in candidates:
            if not st.peers_live.get(peer):
                continue  # not answering heartbeats
            behind = self.store.ledger_end_index - self.pusher.water_marks.get(st.term, peer)
            if best is None or behind < best[1]:
                best = (peer, behind)
        if best is None or best[1] >= self.settings.max_transfer_wait_index:
            return None
        return best

    async def _preferred_leader_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.preferred_check_interval_ms / 1000)
            try:
                choice = self.preferred_transferee()
                if choice is None:
                    continue
                peer, behind = choice
                log.info(
                    "dledger %s: handing leadership of term %d to preferred leader %s "
                    "(%d entries behind)",
                    self.state.self_id,
                    self.state.term,
                    peer,
                    behind,
                )
                reply = await self.transfer_leadership(peer)
                log.info(
                    "dledger %s: leadership transfer to %s: %s (term %s)",
                    self.state.self_id,
                    peer,
                    RC.name_of(code_of(reply)),
                    reply.get("term"),
                )
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("dledger %s: preferred leader check failed", self.state.self_id)

    def set_peers(self, text: str) -> dict[str, str]:
        """A membership change (habroker's; docs/dledger.md): the new ``dLegerPeers`` list,
        which differs from the current one by at most one peer, persisted, then used for
        votes, heartbeats, pushes and the quorum.  Returns the membership now in force."""
        peers = parse_peers(text, None)
        st = self.state
        if peers == st.peers:
            return dict(st.peers)
        added = [p for p in peers if p not in st.peers]
        removed = [p for p in st.peers if p not in peers]
        if len(added) + len(removed) > 1:
            raise ValueError(
                f"dLegerPeers {';'.join(peers)}: one peer at a time (from "
                f"{';'.join(st.peers)}, that adds {added or 'none'} and removes "
                f"{removed or 'none'})"
            )
        moved = [p for p in peers if p in st.peers and peers[p] != st.peers[p]]
        if moved:
            raise ValueError(f"dLegerPeers: {', '.join(moved)} cannot change address")
        st.set_peers(peers)
        log.info(
            "dledger %s: membership %s (%s %s)%s",
            st.self_id,
            ";".join(peers),
            "added" if added else "removed",
            (added or removed)[0],
            "" if st.is_member else "; this peer is no longer a member",
        )
        self.pusher.membership_changed()
        self.elector.membership_changed()
        return dict(st.peers)

    # -- writes ------------------------------------------------------------------------------------
    def append(
        self, body: bytes, hook: AppendHook | None = None
    ) -> tuple[DLedgerEntry, asyncio.Future[Body]]:
        """Append as leader; the future completes when a quorum has the entry (code 200) or
        with WAIT_QUORUM_ACK_TIMEOUT / TERM_CHANGED / NOT_LEADER."""
        entries, ack = self.append_batch([body], hook)
        return entries[0], ack

    def _writable_state(self) -> MemberState:
        """The state, if this peer may append now: the leader, not handing over, with room."""
        st = self.state
        if not st.is_leader:
            raise NotLeader(RC.NOT_LEADER, st.leader_id)
        if st.transferee is not None:
            raise NotLeader(RC.LEADER_TRANSFERRING, st.transferee)
        if self.pusher.pending_full():
            raise NotLeader(RC.LEADER_PENDING_FULL, st.self_id)
        return st

    def append_batch(
        self, bodies: Sequence[bytes], hook: AppendHook | None = None
    ) -> tuple[list[DLedgerEntry], asyncio.Future[Body]]:
        """Append several entries at once; one future, for the last (commits are in order,
        so a quorum for the last is a quorum for all)."""
        st = self._writable_state()
        entries = self.store.append_batch_as_leader(bodies, st.term, hook)
        if self.settings.pusher.sync_flush:  # the leader's own copy counts once flushed
            self._flush_soon()
        return entries, self.pusher.wait_ack(entries[-1])

    def append_encoded(
        self, sizes: Sequence[int], encode: EntryEncoder, parts_per_entry: int
    ) -> tuple[int, list[int], asyncio.Future[Body]]:
        """:meth:`append_batch` without an object per entry: entries of ``sizes`` bytes that
        ``encode`` lays out (see :meth:`DLedgerMmapFileStore.append_encoded_as_leader`).
        Returns (first index, positions, the future of the last entry's quorum)."""
        st = self._writable_state()
        term = st.term
        first, positions = self.store.append_encoded_as_leader(term, sizes, encode, parts_per_entry)
        if self.settings.pusher.sync_flush:
            self._flush_soon()
        last = first + len(positions) - 1
        return first, positions, self.pusher.wait_ack_at(term, last, positions[-1])

    def _flush_soon(self) -> None:
        if self._flush_lock.locked() and self._flush_queued:
            return  # a flush after the running one is already on its way
        self._flush_queued = True

        async def run() -> None:
            try:
                async with self._flush_lock:
                    self._flush_queued = False
                    await self.store.flush_async()
                self.pusher.wake_ack_checker()
            except OSError as exc:
                log.error("dledger %s: flush failed: %s", self.state.self_id, exc)

        task = asyncio.ensure_future(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def flush(self) -> None:
        """Flush the data and index files (one flush at a time; callers share it)."""
        async with self._flush_lock:
            await self.store.flush_async()
        if self.settings.pusher.sync_flush:
            self.pusher.wake_ack_checker()

    async def delete_expired(
        self, expired_before_ms: float, limit_pos: int, at_most: int | None = None
    ) -> int:
        """Retention (:meth:`DLedgerMmapFileStore.delete_expired`), never during a flush."""
        async with self._flush_lock:
            return self.store.delete_expired(expired_before_ms, limit_pos, at_most)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.flush_interval_ms / 1000)
            try:
                await self.flush()
                self.store.persist_checkpoint()
            except OSError as exc:
                log.error("dledger %s: flush failed: %s", self.state.self_id, exc)
            except Exception:  # a bug must not end periodic flushing silently
                log.exception("dledger %s: flush failed", self.state.self_id)

    def _committed(self, index: int) -> None:
        self._on_committed(index)

    # -- status ------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        st = self.state
        store = self.store
        peers = []
        for peer, addr in st.peers.items():
            if st.is_leader:
                mark = (
                    store.ledger_end_index
                    if peer == st.self_id
                    else self.pusher.water_marks.get(st.term, peer)
                )
                lag: int | None = store.ledger_end_index - mark
                dispatcher = self.pusher.dispatchers.get(peer)
                form = None if dispatcher is None else "raw" if dispatcher.raw_push else "json"
            else:
                mark, lag, form = -1, None, None
            peers.append(
                {
                    "id": peer,
                    "addr": addr,
                    "matchIndex": mark,
                    "lagEntries": lag,
                    "self": peer == st.self_id,
                    "live": st.peers_live.get(peer) if peer != st.self_id else True,
                    # how the leader pushes to it: PUSH_RAW, or DLedger's JSON (a Java peer)
                    "pushForm": form,
                }
            )
        return {
            "group": st.group,
            "selfId": st.self_id,
            "role": st.role.value,
            "term": st.term,
            "leaderId": st.leader_id,
            "leaderAddr": st.leader_address,
            "ledgerBeginIndex": store.ledger_begin_index,
            "ledgerEndIndex": store.ledger_end_index,
            "ledgerEndTerm": store.ledger_end_term,
            "committedIndex": store.committed_index,
            "elections": self.elector.elections,
            "member": st.is_member,
            "peers": peers,
        }


def is_success(body: Body) -> bool:
    return code_of(body) == RC.SUCCESS
