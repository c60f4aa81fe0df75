"""DLedger's RPCs: request codes, result codes and the JSON bodies peers exchange.

DLedgerRpcNettyService (openmessaging DLedger 0.3.1.2, the version RocketMQ 4.9.7 and 5.3.1
ship) wraps every request object in a remoting frame whose code is a DLedgerRequestCode and
whose body is the object as fastjson writes it.  The remoting answer's own code is always 200;
the DLedger outcome is the ``code`` field inside the JSON answer.  fastjson omits null fields
and writes enums by name and ``byte[]`` as base64; bodies here follow that so Java peers parse
them, and parsing accepts whatever extra getters-turned-fields Java adds (``batch``,
``count``, ``firstEntryIndex`` ...).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any

import msgspec

from habroker.dledger.entry import (
    BODY_OFFSET,
    INDEX_UNIT_SIZE,
    DLedgerEntry,
    RawJSON,
    WireEntry,
    from_json_dict,
    json_int,
    to_json_dict,
)
from habroker.dledger.entry import decode as decode_entry

Body = dict[str, Any]


class DLedgerRequestCode(IntEnum):
    METADATA = 50000
    APPEND = 50001
    GET = 50002
    VOTE = 51001
    HEART_BEAT = 51002
    PULL = 51003
    PUSH = 51004
    LEADERSHIP_TRANSFER = 51005
    #: habroker's own (outside DLedger's 50000-51006 and 59999): an APPEND whose entries are
    #: the data files' bytes; a Java peer answers remoting's REQUEST_CODE_NOT_SUPPORTED
    PUSH_RAW = 59104


class DLedgerResponseCode(IntEnum):
    UNKNOWN = -1
    SUCCESS = 200
    TIMEOUT = 300
    METADATA_ERROR = 301
    NETWORK_ERROR = 302
    UNSUPPORTED = 303
    UNKNOWN_GROUP = 400
    UNKNOWN_MEMBER = 401
    UNEXPECTED_MEMBER = 402
    EXPIRED_TERM = 403
    NOT_LEADER = 404
    NOT_FOLLOWER = 405
    INCONSISTENT_STATE = 406
    INCONSISTENT_TERM = 407
    INCONSISTENT_INDEX = 408
    INCONSISTENT_LEADER = 409
    INDEX_OUT_OF_RANGE = 410
    UNEXPECTED_ARGUMENT = 411
    REPEATED_REQUEST = 412
    REPEATED_PUSH = 413
    DISK_ERROR = 414
    DISK_FULL = 415
    TERM_NOT_READY = 416
    FALL_BEHIND_TOO_MUCH = 417
    TAKE_LEADERSHIP_FAILED = 418
    INDEX_LESS_THAN_LOCAL_BEGIN = 419
    REQUEST_WITH_EMPTY_BODYS = 420
    PUSH_REQUEST_IS_FULL = 421
    INTERNAL_ERROR = 500
    TERM_CHANGED = 501
    WAIT_QUORUM_ACK_TIMEOUT = 502
    LEADER_PENDING_FULL = 503
    ILLEGAL_MEMBER_STATE = 504
    LEADER_NOT_READY = 505
    LEADER_TRANSFERRING = 506

    @classmethod
    def name_of(cls, code: int) -> str:
        try:
            return cls(code).name
        except ValueError:
            return f"code {code}"


class VoteResult(StrEnum):
    UNKNOWN = "UNKNOWN"
    ACCEPT = "ACCEPT"
    REJECT_UNKNOWN_LEADER = "REJECT_UNKNOWN_LEADER"
    REJECT_UNEXPECTED_LEADER = "REJECT_UNEXPECTED_LEADER"
    REJECT_EXPIRED_VOTE_TERM = "REJECT_EXPIRED_VOTE_TERM"
    REJECT_ALREADY_VOTED = "REJECT_ALREADY_VOTED"
    REJECT_ALREADY_HAS_LEADER = "REJECT_ALREADY_HAS_LEADER"
    REJECT_TERM_NOT_READY = "REJECT_TERM_NOT_READY"
    REJECT_TERM_SMALL_THAN_LEDGER = "REJECT_TERM_SMALL_THAN_LEDGER"
    REJECT_EXPIRED_LEDGER_TERM = "REJECT_EXPIRED_LEDGER_TERM"
    REJECT_SMALL_LEDGER_END_INDEX = "REJECT_SMALL_LEDGER_END_INDEX"
    REJECT_TAKING_LEADERSHIP = "REJECT_TAKING_LEADERSHIP"


class PushType(StrEnum):
    APPEND = "APPEND"
    COMMIT = "COMMIT"
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"


# -- bodies ------------------------------------------------------------------------------------
#: sorted keys, as fastjson writes a bean's fields; for bodies with pre-encoded parts
_SORTED_ENCODER = msgspec.json.Encoder(order="sorted")


def encode(body: Body) -> bytes:
    """fastjson's form: nulls left out, keys in name order (fastjson sorts bean fields),
    in C (msgspec; ``json.dumps`` cost a follower ~3% of its time in answers).  A
    :class:`RawJSON` or ``msgspec.Raw`` value (a push's entries) goes in as it is."""
    return _SORTED_ENCODER.encode(
        {
            k: msgspec.Raw(v.encode()) if isinstance(v, RawJSON) else v
            for k, v in body.items()
            if v is not None
        }
    )


def decode(raw: bytes | bytearray | memoryview | None) -> Body:
    """A JSON object from a peer; anything else is a ValueError the RPC layer answers."""
    if not raw:
        raise ValueError("a DLedger request needs a JSON body")
    try:
        value = json.loads(bytes(raw))
    except RecursionError:
        raise ValueError("a DLedger body nests too deeply") from None
    if not isinstance(value, dict):
        raise ValueError("a DLedger body is a JSON object")
    return value


class _WirePush(msgspec.Struct):
    """The PushEntryRequest fields a follower reads (others, Java's getters, are ignored)."""

    group: str | None = None  # DLedger's JSON names (camelCase)
    localId: str | None = None
    remoteId: str | None = None
    leaderId: str | None = None
    term: int = -1
    code: int = 200
    type: str | None = None
    commitIndex: int = -1
    entry: WireEntry | None = None
    batchEntry: list[WireEntry] | None = None


_PUSH_FIELDS = ("group", "localId", "remoteId", "leaderId", "term", "code", "type", "commitIndex")
#: strict=False: a number fastjson quoted is still a number
_PUSH_DECODER = msgspec.json.Decoder(_WirePush, strict=False)
#: where :func:`decode_push` leaves the entries it decoded (not a JSON name)
ENTRIES_KEY = "\u0000entries"


def decode_push(raw: bytes | bytearray | memoryview | None) -> Body:
    """A PUSH body with its entries decoded in one pass (JSON and base64 in C): the usual
    fields, and the entries under :data:`ENTRIES_KEY`.  A body the typed decoder does not take
    (a null where a number belongs, bad base64, extra nesting) goes the general way,
    :func:`decode`, whose errors are the same as for any other request."""
    try:
        push = _PUSH_DECODER.decode(raw or b"")
    except msgspec.MsgspecError:
        return decode(raw)
    body: Body = {name: getattr(push, name) for name in _PUSH_FIELDS}
    # kept for their presence (a COMPARE or TRUNCATE without ``entry`` is refused); read the
    # entries with push_entries
    body["entry"], body["batchEntry"] = push.entry, push.batchEntry
    wire = push.batchEntry or ([push.entry] if push.entry is not None else [])
    body[ENTRIES_KEY] = [e.entry() for e in wire]
    return body


def base(
    group: str,
    *,
    local_id: str | None = None,
    remote_id: str | None = None,
    leader_id: str | None = None,
    term: int = -1,
    code: int = DLedgerResponseCode.SUCCESS,
) -> Body:
    """RequestOrResponse's common fields."""
    return {
        "group": group,
        "localId": local_id,
        "remoteId": remote_id,
        "leaderId": leader_id,
        "term": term,
        "code": int(code),
    }


def answer(request: Body, code: int = DLedgerResponseCode.SUCCESS, **fields: Any) -> Body:
    """A response that copies the request's base info (``copyBaseInfo``), then ``fields``."""
    out: Body = {
        key: request.get(key) for key in ("group", "localId", "remoteId", "leaderId", "term")
    }
    out["code"] = int(code)
    out.update(fields)
    return out


def code_of(body: Body) -> int:
    return int(body.get("code", DLedgerResponseCode.SUCCESS))


def term_of(body: Body) -> int:
    return int(body.get("term", -1))


def push_request(
    group: str,
    *,
    local_id: str,
    remote_id: str,
    term: int,
    push_type: PushType,
    commit_index: int,
    entry: DLedgerEntry | None = None,
) -> Body:
    """A PUSH of one ``entry``, or of none (COMMIT; a batch sets ``batchEntry`` after).

    Java writes PushEntryRequest's getters too: ``batch`` (batchEntry not empty), ``count``,
    ``firstEntryIndex`` and ``lastEntryIndex`` (-1 without entries) and ``totalSize`` (the sizes
    of a batch's entries; 0 for a single ``entry``); the bodies here carry them the same way.
    """
    body = base(group, local_id=local_id, remote_id=remote_id, leader_id=local_id, term=term)
    index = -1 if entry is None else entry.index
    body.update(
        type=push_type.value,
        commitIndex=commit_index,
        entry=None if entry is None else to_json_dict(entry),
        batchEntry=[],
        batch=False,
        count=0 if entry is None else 1,
        firstEntryIndex=index,
        lastEntryIndex=index,
        totalSize=0,
    )
    return body


def _push_items(request: Body) -> list[Any]:
    """The JSON entries of a push; ValueError if ``batchEntry``/``entry`` have the wrong shape."""
    batch = request.get("batchEntry") or []
    if not isinstance(batch, list):
        raise ValueError(f"batchEntry is a JSON array, not {type(batch).__name__}")
    if batch:
        items = batch
    else:
        entry = request.get("entry")
        items = [entry] if entry else []
    for item in items:
        if not isinstance(item, dict):
            raise ValueError(f"a pushed entry is a JSON object, not {type(item).__name__}")
    return items


# -- raw pushes (habroker to habroker) ---------------------------------------------------------
#: where a raw push's entries are left in its Body (not a JSON name)
RAW_KEY = "\u0000raw"
_RAW_INTS = ("term", "commitIndex", "firstEntryIndex", "count")


@dataclass(frozen=True, slots=True)
class RawEntries:
    """An APPEND's ``count`` index units (32 bytes each, as the leader's index files hold
    them), then its entries as they lie in the leader's data files, back to back (no
    blanks)."""

    first: int
    count: int
    data: bytes

    def entries(self) -> list[DLedgerEntry]:
        """Decoded (the rare paths: an append the log already has, a retried push)."""
        out: list[DLedgerEntry] = []
        at = 0
        view = memoryview(self.data)[self.count * INDEX_UNIT_SIZE :]
        while at < len(view):
            entry = decode_entry(view[at:])
            if entry.size < BODY_OFFSET or at + entry.size > len(view):
                raise ValueError(f"entry {entry.index} of a raw push has size {entry.size}")
            out.append(entry)
            at += entry.size
        return out


def raw_push_header(
    group: str,
    *,
    local_id: str,
    remote_id: str,
    term: int,
    commit_index: int,
    first: int,
    count: int,
) -> dict[str, str]:
    """A raw push's fields, as remoting extFields (the body is the entries)."""
    return {
        "group": group,
        "localId": local_id,
        "remoteId": remote_id,
        "leaderId": local_id,
        "term": str(term),
        "commitIndex": str(commit_index),
        "firstEntryIndex": str(first),
        "count": str(count),
    }


def decode_raw_push(fields: dict[str, str], body: bytes | None) -> Body:
    """A raw push as the Body of an APPEND (ValueError when a field is missing or no number):
    the usual fields, and the entries under :data:`RAW_KEY`."""
    out: Body = {key: fields.get(key) for key in ("group", "localId", "remoteId", "leaderId")}
    for key in _RAW_INTS:
        try:
            out[key] = int(fields[key])
        except (KeyError, ValueError):
            raise ValueError(f"a raw push needs {key} as a number") from None
    if not body or out["count"] < 1:
        raise ValueError("a raw push carries at least one entry")
    out["code"] = int(DLedgerResponseCode.SUCCESS)
    out["type"] = PushType.APPEND.value
    out[RAW_KEY] = RawEntries(out["firstEntryIndex"], out["count"], body)
    return out


def push_span(request: Body) -> tuple[int, int]:
    """(first index, count) of the entries a push carries, without decoding their bodies;
    ValueError on a malformed push."""
    raw: RawEntries | None = request.get(RAW_KEY)
    if raw is not None:
        return raw.first, raw.count
    decoded: list[DLedgerEntry] | None = request.get(ENTRIES_KEY)
    if decoded is not None:
        return (decoded[0].index, len(decoded)) if decoded else (-1, 0)
    items = _push_items(request)
    return (json_int(items[0], "index", -1), len(items)) if items else (-1, 0)


def push_entries(request: Body) -> list[DLedgerEntry]:
    """The entries a push carries: ``batchEntry`` when not empty, else ``entry``; ValueError
    on a malformed push."""
    raw: RawEntries | None = request.get(RAW_KEY)
    if raw is not None:
        return raw.entries()
    decoded: list[DLedgerEntry] | None = request.get(ENTRIES_KEY)
    if decoded is not None:
        return decoded
    return [from_json_dict(item) for item in _push_items(request)]
