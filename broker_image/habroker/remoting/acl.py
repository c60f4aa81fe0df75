"""RocketMQ ACL 1.0 on the remoting port: the plain_acl.yml accounts, the request signature, and
the check every request passes when ``aclEnable`` is on (RocketMQ 4.9's PlainAccessValidator).

A signed request carries ``AccessKey``, ``Signature`` and optionally ``SecurityToken`` in its
extFields. The signature is base64(HMAC-SHA1(secretKey, content)) where content is the values of
every other extField, ordered by key, concatenated as UTF-8, followed by the body bytes: what the
Java client's ``AclClientRPCHook`` sends. :func:`sign_request` is that hook for our own clients.

A refused request is answered SYSTEM_ERROR with ``org.apache.rocketmq.acl.common.AclException:
<reason>`` as remark, as a Java broker answers an exception thrown by its RPC hook. docs/security.md
describes the file, the checks and their limits.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from habroker import fastjson
from habroker.remoting.channel import Channel
from habroker.remoting.codes import RequestCode, ResponseCode, code_name
from habroker.remoting.command import RemotingCommand
from habroker.remoting.server import RequestRefused

log = logging.getLogger(__name__)

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"  # MixAll's, left out of the content as 4.9 does
RETRY_PREFIX = "%RETRY%"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
EXCEPTION = "org.apache.rocketmq.acl.common.AclException"

# Permission's bits
DENY = 1
ANY = 2
PUB = 4
SUB = 8

ADMIN_CODES = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
    }
)

#: seconds between two looks at the file's size and mtime (RocketMQ's FileWatchService: 500 ms)
RELOAD_CHECK_INTERVAL = 0.5


class AclError(Exception):
    """A refusal (or a bad file); the message is what RocketMQ's AclException would say."""


# -- signature -----------------------------------------------------------------------------------
def _java_order(item: tuple[str, str]) -> bytes:
    """Java's String order (UTF-16 code units), which a TreeMap of the fields uses."""
    return item[0].encode("utf-16-be")


def _fields_text(ext_fields: Mapping[str, str], skip: tuple[str, ...]) -> bytes:
    ordered = sorted(ext_fields.items(), key=_java_order)
    return "".join(value for key, value in ordered if key not in skip).encode("utf-8")


def request_content(ext_fields: Mapping[str, str], body: bytes | None) -> bytes:
    """AclUtils.combineRequestContent as the broker builds it: the values ordered by key
    (without Signature and _UNIQUE_KEY_QUERY), then the body."""
    return _fields_text(ext_fields, (SIGNATURE, UNIQUE_MSG_QUERY_FLAG)) + (body or b"")


def signature(content: bytes, secret_key: str) -> str:
    """AclSigner.calSignature: base64 of HMAC-SHA1 with the UTF-8 secret as key."""
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def _request_signature(ext_fields: Mapping[str, str], body: bytes, secret_key: str) -> str:
    """:func:`signature` of :func:`request_content`, without copying the body (up to 4 MiB)."""
    mac = hmac.new(secret_key.encode("utf-8"), digestmod=hashlib.sha1)
    mac.update(_fields_text(ext_fields, (SIGNATURE, UNIQUE_MSG_QUERY_FLAG)))
    mac.update(body)
    return base64.b64encode(mac.digest()).decode("ascii")


@dataclass(frozen=True)
class SessionCredentials:
    access_key: str
    secret_key: str
    security_token: str | None = None

    def __repr__(self) -> str:  # never print the secret
        return f"SessionCredentials(access_key={self.access_key!r})"


def sign_request(request: RemotingCommand, credentials: SessionCredentials) -> None:
    """AclClientRPCHook.doBeforeRequest: add AccessKey (SecurityToken) and the Signature."""
    request.ext_fields[ACCESS_KEY] = credentials.access_key
    if credentials.security_token is not None:
        request.ext_fields[SECURITY_TOKEN] = credentials.security_token
    request.ext_fields.pop(SIGNATURE, None)
    # the client signs every field, _UNIQUE_KEY_QUERY included (the broker leaves it out; Java's
    # clients never send it with a signature either)
    content = _fields_text(request.ext_fields, ())
    request.ext_fields[SIGNATURE] = signature(content + request.body_bytes, credentials.secret_key)


def rpc_hook(credentials: SessionCredentials) -> Callable[[RemotingCommand], None]:
    return lambda request: sign_request(request, credentials)


# -- white remote addresses (RemoteAddressStrategyFactory) -----------------------------------------
AddressMatcher = Callable[[str], bool]


def address_matcher(pattern: str | None) -> AddressMatcher:
    """``*``, one address (v4 or v6), ``a,b,c``, ``192.168.1.{1,2}``, and IPv4 ranges with ``*``
    or ``lo-hi`` in one octet (``192.168.*.*``, ``10.1.1-5.*``); blank matches nothing."""
    text = (pattern or "").strip()
    if not text:
        return lambda _addr: False
    if text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return lambda _addr: True
    if text.endswith("}"):
        head, _, tail = text.rpartition("{")
        if not head:
            raise AclError(f"bad white remote address {text!r}")
        return _one_of([head + part.strip() for part in tail[:-1].split(",")])
    if "," in text:
        return _one_of([part.strip() for part in text.split(",")])
    if "*" in text or "-" in text:
        return _ipv4_range(text)
    return _one_of([text])


def _one_of(addresses: list[str]) -> AddressMatcher:
    try:
        wanted = {ipaddress.ip_address(a) for a in addresses}
    except ValueError as exc:
        raise AclError(f"bad white remote address: {exc}") from None

    def match(addr: str) -> bool:
        try:
            return ipaddress.ip_address(addr) in wanted
        except ValueError:
            return False

    return match


def _ipv4_range(text: str) -> AddressMatcher:
    octets = text.split(".")
    if len(octets) != 4 or not octets[0].strip().isdigit():
        raise AclError(f"bad white remote address {text!r} (IPv4 ranges only)")
    bounds: list[tuple[int, int]] = []
    for raw in octets:
        part = raw.strip()
        try:
            if part == "*":
                bounds.append((0, 255))
            elif "-" in part:
                lo, _, hi = part.partition("-")
                bounds.append((int(lo), int(hi)))
            else:
                bounds.append((int(part), int(part)))
        except ValueError:
            raise AclError(f"bad white remote address {text!r}") from None
    if any(not 0 <= lo <= hi <= 255 for lo, hi in bounds):
        raise AclError(f"bad white remote address {text!r}")

    def match(addr: str) -> bool:
        parts = addr.split(".")
        if len(parts) != 4 or not all(p.isdigit() for p in parts):
            return False
        return all(lo <= int(p) <= hi for p, (lo, hi) in zip(parts, bounds, strict=True))

    return match


# -- the file -----------------------------------------------------------------------------------
def parse_perm(text: Any) -> int:
    """Permission.parsePermFromString: PUB, SUB, PUB|SUB, SUB|PUB; anything else is DENY."""
    value = str(text).strip() if text is not None else ""
    return {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}.get(value, DENY)


@dataclass
class Account:
    access_key: str
    secret_key: str
    white: AddressMatcher
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    #: topic -> perm; groups are keyed by their retry topic, as RocketMQ keys them
    perms: dict[str, int] = field(default_factory=dict)


@dataclass
class PlainAclConfig:
    global_white: list[AddressMatcher]
    accounts: dict[str, Account]

    @classmethod
    def parse(cls, data: Any) -> PlainAclConfig:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise AclError("plain_acl.yml: not a mapping")
        white = [address_matcher(str(a)) for a in data.get("globalWhiteRemoteAddresses") or []]
        accounts: dict[str, Account] = {}
        for entry in data.get("accounts") or []:
            if not isinstance(entry, dict):
                raise AclError("plain_acl.yml: accounts[] holds a non-mapping")
            account = _account(entry)
            if account.access_key in accounts:
                raise AclError(f"plain_acl.yml: accessKey {account.access_key} repeated")
            accounts[account.access_key] = account
        return cls(white, accounts)

    @classmethod
    def load(cls, path: Path) -> PlainAclConfig:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise AclError(f"cannot read the ACL file {path}: {exc}") from None
        try:
            return cls.parse(yaml.safe_load(text))
        except yaml.YAMLError as exc:
            raise AclError(f"{path}: not YAML: {exc}") from None


def _account(entry: dict[str, Any]) -> Account:
    access_key = str(entry.get("accessKey") or "")
    secret_key = str(entry.get("secretKey") or "")
    # PlainPermissionManager.checkPlainAccessConfig: both longer than 6 characters
    if len(access_key) <= 6 or len(secret_key) <= 6:
        raise AclError(
            f"plain_acl.yml: accessKey={access_key} and its secretKey cannot be null and "
            "length should longer than 6"
        )
    perms: dict[str, int] = {}
    for key, is_topic in (("groupPerms", False), ("topicPerms", True)):
        for item in entry.get(key) or []:
            name, sep, perm = str(item).partition("=")
            if not sep or "=" in perm or not name.strip():
                raise AclError(f"plain_acl.yml: {key} entry {item!r} is not 'name=PERM'")
            resource = name.strip() if is_topic else RETRY_PREFIX + name.strip()
            perms[resource] = parse_perm(perm)
    return Account(
        access_key=access_key,
        secret_key=secret_key,
        white=address_matcher(entry.get("whiteRemoteAddress")),
        admin=entry.get("admin") is True or str(entry.get("admin")).lower() == "true",
        default_topic_perm=parse_perm(entry.get("defaultTopicPerm")),
        default_group_perm=parse_perm(entry.get("defaultGroupPerm")),
        perms=perms,
    )


# -- what a request needs (PlainAccessValidator.parse) -----------------------------------------
def _retry(group: str | None) -> str:
    return RETRY_PREFIX + ("null" if group is None else group)  # Java's string concatenation


def needed_perms(request: RemotingCommand) -> dict[str, int]:
    """Resource -> the permission the request needs, per request code as RocketMQ 4.9 maps it."""
    ext = request.ext_fields
    needs: dict[str, int] = {}
    code = request.code

    def add(resource: str | None, perm: int) -> None:
        needs[resource or ""] = perm  # a missing field is the resource "null" in Java: refused

    if code == RequestCode.SEND_MESSAGE:
        topic = ext.get("topic", "")
        if topic.startswith(RETRY_PREFIX):
            add(_retry(ext.get("group")), SUB)  # sic: 4.9 reads "group", not "producerGroup"
        else:
            add(topic, PUB)
    elif code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        # 4.9 checks SEND_MESSAGE_V2 only; habroker also checks the batch (same V2 header)
        topic = ext.get("b", ext.get("topic", ""))
        if topic.startswith(RETRY_PREFIX):
            add(_retry(ext.get("a", ext.get("producerGroup"))), SUB)
        else:
            add(topic, PUB)
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        add(_retry(ext.get("group")), SUB)
    elif code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
        add(ext.get("topic"), SUB)
        add(_retry(ext.get("consumerGroup")), SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        add(ext.get("topic"), SUB)
    elif code == RequestCode.HEART_BEAT:
        for consumer in _heartbeat_consumers(request.body_bytes):
            add(_retry(str(consumer.get("groupName") or "")), SUB)
            subscriptions = consumer.get("subscriptionDataSet") or []
            if not isinstance(subscriptions, list):
                raise AclError("heartbeat body: subscriptionDataSet is not a list")
            for sub in subscriptions:
                if isinstance(sub, dict):
                    add(str(sub.get("topic") or ""), SUB)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        add(_retry(ext.get("consumerGroup")), SUB)
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        add(_retry(ext.get("consumerGroup")), SUB)
        add(ext.get("topic"), SUB)
    return needs


def _heartbeat_consumers(body: bytes) -> list[dict[str, Any]]:
    try:
        data = fastjson.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise AclError(f"heartbeat body: {exc}") from None
    consumers = data.get("consumerDataSet") if isinstance(data, dict) else None
    if not isinstance(consumers or [], list):
        raise AclError("heartbeat body: consumerDataSet is not a list")
    return [c for c in consumers or [] if isinstance(c, dict)]


def _perm_ok(needed: int, owned: int) -> bool:
    """Permission.checkPermission."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def _describe(resource: str) -> str:
    """PlainAccessResource.printStr."""
    if resource.startswith(RETRY_PREFIX):
        return f"group:{resource[len(RETRY_PREFIX) :]}"
    return f"topic:{resource}"


def _loggable(text: str, limit: int = 300) -> str:
    """The peer's text (an accessKey) for one log line: control characters escaped, cut short."""
    safe = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[: limit + 1])
    return safe if len(text) <= limit else safe[:limit] + "..."


# -- the validator ------------------------------------------------------------------------------
class PlainAccessValidator:
    """The plain_acl.yml at ``path``, re-read when its size or mtime changes."""

    def __init__(self, path: Path | str, on_refusal: Callable[[], None] | None = None) -> None:
        """``on_refusal`` is called once per refused request (the broker's metrics)."""
        self.path = Path(path)
        self.on_refusal = on_refusal
        self.config = PlainAclConfig.load(self.path)
        self._stamp = self._file_stamp()
        self._next_check = time.monotonic() + RELOAD_CHECK_INTERVAL
        self.refused = 0

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def maybe_reload(self) -> None:
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + RELOAD_CHECK_INTERVAL
        stamp = self._file_stamp()
        if stamp == self._stamp or stamp is None:
            return
        self._stamp = stamp
        try:
            self.config = PlainAclConfig.load(self.path)
        except AclError as exc:
            log.error(
                "ACL file %s changed but is not valid, keeping the last one: %s", self.path, exc
            )
            return
        log.info("ACL file %s re-read: %d accounts", self.path, len(self.config.accounts))

    def validate(self, request: RemotingCommand, remote_address: str) -> None:
        """Raise :class:`AclError` when the request may not run (PlainPermissionManager.validate)."""
        self.maybe_reload()
        host = remote_address.rpartition(":")[0] if ":" in remote_address else remote_address
        host = host.strip("[]")
        config = self.config
        if any(match(host) for match in config.global_white):
            return
        ext = request.ext_fields
        needs = needed_perms(request)
        access_key = ext.get(ACCESS_KEY)
        if access_key is None:
            raise AclError("No accessKey is configured")
        account = config.accounts.get(access_key)
        if account is None:
            raise AclError(f"No acl config for {access_key}")
        if account.white(host):
            return
        expected = _request_signature(ext, request.body_bytes, account.secret_key)
        given = ext.get(SIGNATURE, "").encode("utf-8", "replace")  # the peer's text: any str
        if not hmac.compare_digest(expected.encode("ascii"), given):
            raise AclError(f"Check signature failed for accessKey={access_key}")
        if needs.get(TRACE_TOPIC) == PUB:
            return
        if request.code in ADMIN_CODES and not account.admin:
            raise AclError(
                f"Need admin permission for request code={request.code}, "
                f"but accessKey={access_key} is not"
            )
        if not account.perms and account.admin:
            return
        for resource, needed in needs.items():
            is_group = resource.startswith(RETRY_PREFIX)
            owned = account.perms.get(resource)
            if owned is None:
                owned = account.default_group_perm if is_group else account.default_topic_perm
            if not _perm_ok(needed, owned):
                raise AclError(f"No default permission for {_describe(resource)}")

    def check(self, request: RemotingCommand, channel: Channel) -> None:
        """The server's request check: a refusal is SYSTEM_ERROR with the AclException's text,
        as a Java broker answers, and one WARNING line (never the secret or the signature)."""
        try:
            self.validate(request, channel.remote_address)
        except AclError as exc:
            self.refused += 1
            if self.on_refusal is not None:
                self.on_refusal()
            log.warning(
                "ACL refused %s from %s: %s",
                code_name(request.code),
                channel.remote_address,
                _loggable(str(exc)),
            )
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"{EXCEPTION}: {exc}") from None
