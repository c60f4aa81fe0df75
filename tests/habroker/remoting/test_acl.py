"""RocketMQ ACL 1.0 (habroker.remoting.acl): the file, what each request needs, the checks, and
the remoting server refusing before the processor runs.  The Java side (AclClientRPCHook's
signature, a 4.9.7 broker's answers) is checked in tests/interop/test_acl.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml
from habroker.remoting import RemotingCommand, RequestCode, ResponseCode
from habroker.remoting.acl import (
    AclError,
    PlainAccessValidator,
    SessionCredentials,
    address_matcher,
    rpc_hook,
    sign_request,
)
from habroker.remoting.channel import Channel
from habroker.remoting.client import RemotingClient
from habroker.remoting.server import RemotingServer

ADMIN = SessionCredentials("adminKey1", "admin-secret")
USER = SessionCredentials("userKey01", "user-secret")
PEER = "10.1.2.3:40000"  # not white-listed unless a test says so


def write_acl(path: Path, **extra: object) -> Path:
    data = {
        "globalWhiteRemoteAddresses": ["192.168.0.*"],
        "accounts": [
            {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "admin": True},
            {
                "accessKey": USER.access_key,
                "secretKey": USER.secret_key,
                "whiteRemoteAddress": "10.9.9.{1,2}",
                "admin": False,
                "defaultTopicPerm": "DENY",
                "defaultGroupPerm": "SUB",
                "topicPerms": ["orders=PUB|SUB", "audit=SUB", "secret=DENY"],
                "groupPerms": ["blocked=DENY"],
            },
        ],
        **extra,
    }
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def validator(tmp_path: Path) -> PlainAccessValidator:
    return PlainAccessValidator(write_acl(tmp_path / "plain_acl.yml"))


def signed(code: int, header: dict[str, object], body: bytes | None = None, who=USER):
    request = RemotingCommand.request(code, header, body)
    sign_request(request, who)
    return request


def refusal(validator: PlainAccessValidator, request: RemotingCommand, peer: str = PEER) -> str:
    with pytest.raises(AclError) as info:
        validator.validate(request, peer)
    return str(info.value)


def test_address_patterns_as_rocketmq_reads_them() -> None:
    cases = {
        "*": (["1.2.3.4", "::1"], []),
        "": ([], ["127.0.0.1"]),
        "127.0.0.1": (["127.0.0.1"], ["127.0.0.2"]),
        "10.1.1.{1,3}": (["10.1.1.1", "10.1.1.3"], ["10.1.1.2"]),
        "10.1.1.1,10.2.2.2": (["10.2.2.2"], ["10.1.1.2"]),
        "192.168.*.*": (["192.168.7.9"], ["192.169.0.1"]),
        "10.0.1-5.*": (["10.0.5.200"], ["10.0.6.1"]),
        "::1": (["::1", "0:0:0:0:0:0:0:1"], ["::2"]),
    }
    for pattern, (yes, no) in cases.items():
        match = address_matcher(pattern)
        assert all(match(a) for a in yes), pattern
        assert not any(match(a) for a in no), pattern
    for bad in ("10.0.300-400.*", "not-an-address", "{1,2}"):
        with pytest.raises(AclError):
            address_matcher(bad)


def test_the_file_is_checked_as_rocketmq_checks_it(tmp_path: Path) -> None:
    path = tmp_path / "a.yml"
    path.write_text("accounts:\n- accessKey: short\n  secretKey: long-enough\n")
    with pytest.raises(AclError, match="longer than 6"):
        PlainAccessValidator(path)
    path.write_text(
        "accounts:\n- accessKey: longenough\n  secretKey: long-enough\n  topicPerms: [noequals]\n"
    )
    with pytest.raises(AclError, match="name=PERM"):
        PlainAccessValidator(path)
    with pytest.raises(AclError, match="cannot read"):
        PlainAccessValidator(tmp_path / "missing.yml")


def test_signature_covers_every_field_and_the_body(validator: PlainAccessValidator) -> None:
    request = signed(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "orders"}, b"body")
    validator.validate(request, PEER)
    request.body = b"bodY"  # a changed body
    assert refusal(validator, request) == "Check signature failed for accessKey=userKey01"
    request = signed(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "orders"}, b"body")
    request.ext_fields["b"] = "audit"  # a changed field
    assert refusal(validator, request) == "Check signature failed for accessKey=userKey01"


def test_permissions_per_request_code(validator: PlainAccessValidator) -> None:
    def check(code: int, header: dict[str, object], body: bytes | None = None) -> str | None:
        try:
            validator.validate(signed(code, header, body), PEER)
        except AclError as exc:
            return str(exc)
        return None

    send = RequestCode.SEND_MESSAGE_V2
    assert check(send, {"a": "g", "b": "orders"}) is None
    assert check(send, {"a": "g", "b": "audit"}) == "No default permission for topic:audit"
    assert check(send, {"a": "g", "b": "other"}) == "No default permission for topic:other"
    # a batch is checked like a send (RocketMQ 4.9 checks only its signature)
    assert check(RequestCode.SEND_BATCH_MESSAGE, {"a": "g", "b": "audit"}) is not None
    # a send to a retry topic needs SUB on the group
    assert check(send, {"a": "blocked", "b": "%RETRY%blocked"}) == (
        "No default permission for group:blocked"
    )
    pull = RequestCode.PULL_MESSAGE
    assert check(pull, {"topic": "audit", "consumerGroup": "g"}) is None
    assert check(pull, {"topic": "secret", "consumerGroup": "g"}) is not None
    assert check(pull, {"topic": "audit", "consumerGroup": "blocked"}) is not None
    offsets = RequestCode.UPDATE_CONSUMER_OFFSET
    assert check(offsets, {"topic": "secret", "consumerGroup": "g", "queueId": 0}) is not None
    heartbeat = {
        "clientID": "c",
        "producerDataSet": [],
        "consumerDataSet": [
            {"groupName": "g", "subscriptionDataSet": [{"topic": "audit"}, {"topic": "secret"}]}
        ],
    }
    assert check(RequestCode.HEART_BEAT, {}, json.dumps(heartbeat).encode()) == (
        "No default permission for topic:secret"
    )
    assert check(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "orders"}) == (
        f"Need admin permission for request code={int(RequestCode.UPDATE_AND_CREATE_TOPIC)}, "
        "but accessKey=userKey01 is not"
    )
    # the trace topic: a PUB on it is never refused
    assert check(send, {"a": "g", "b": "RMQ_SYS_TRACE_TOPIC"}) is None
    # admin: anything, admin codes included
    for code, header in ((RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "x"}), (send, {"b": "x"})):
        validator.validate(signed(code, header, who=ADMIN), PEER)


def test_white_addresses_skip_the_signature(validator: PlainAccessValidator) -> None:
    unsigned = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "secret"})
    validator.validate(unsigned, "192.168.0.77:5000")  # global: nothing else is checked
    assert refusal(validator, unsigned) == "No accessKey is configured"
    wrong = signed(
        RequestCode.SEND_MESSAGE_V2,
        {"a": "g", "b": "secret"},
        who=SessionCredentials(USER.access_key, "not-the-secret"),
    )
    validator.validate(wrong, "10.9.9.2:5000")  # the account's white address
    assert refusal(validator, wrong, "10.9.9.3:5000").startswith("Check signature failed")


def test_the_file_is_re_read_when_it_changes(tmp_path: Path, monkeypatch) -> None:
    path = write_acl(tmp_path / "plain_acl.yml")
    validator = PlainAccessValidator(path)
    monkeypatch.setattr("habroker.remoting.acl.RELOAD_CHECK_INTERVAL", 0.0)
    unsigned = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "t", "queueId": 0})
    assert refusal(validator, unsigned) == "No accessKey is configured"
    write_acl(path, globalWhiteRemoteAddresses=["10.1.2.3"])
    validator._next_check = 0.0
    validator.validate(unsigned, PEER)
    path.write_text("accounts: [oops")  # an invalid file keeps the last good one
    validator._next_check = 0.0
    validator.validate(unsigned, PEER)


async def test_the_server_refuses_before_the_processor(tmp_path: Path) -> None:
    """Real sockets on 127.0.0.1: refusal is SYSTEM_ERROR with the AclException's text, the
    processor never runs; our client's rpc hook gets through."""
    validator = PlainAccessValidator(write_acl(tmp_path / "plain_acl.yml"))
    calls: list[int] = []

    def processor(request: RemotingCommand, channel: Channel) -> RemotingCommand:
        calls.append(request.code)
        return request.response()

    server = RemotingServer(name="acl-test")
    server.register(RequestCode.GET_MAX_OFFSET, processor)
    server.request_check = validator.check
    await server.start("127.0.0.1", 0)
    port = server._servers[0].sockets[0].getsockname()[1]
    address = f"127.0.0.1:{port}"
    header = {"topic": "t", "queueId": 0}
    try:
        async with RemotingClient(timeout=5) as plain:
            answer = await plain.invoke(address, RequestCode.GET_MAX_OFFSET, header)
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert answer.remark == (
            "org.apache.rocketmq.acl.common.AclException: No accessKey is configured"
        )
        assert calls == []
        async with RemotingClient(timeout=5) as plain:  # an unknown code: checked first too
            answer = await plain.invoke(address, 9999, header)
        assert answer.code == ResponseCode.SYSTEM_ERROR, answer
        async with RemotingClient(timeout=5, rpc_hook=rpc_hook(USER)) as client:
            answer = await client.invoke(address, RequestCode.GET_MAX_OFFSET, header)
            assert answer.code == ResponseCode.SUCCESS, answer
            answer = await client.invoke(address, 9999, header)
            assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, answer
        assert calls == [RequestCode.GET_MAX_OFFSET]
        assert validator.refused == 2
    finally:
        await server.stop()
    await asyncio.sleep(0)


def test_a_non_ascii_signature_is_a_refusal_not_a_crash(validator: PlainAccessValidator) -> None:
    request = signed(RequestCode.SEND_MESSAGE_V2, {"a": "g", "b": "orders"})
    request.ext_fields["Signature"] = "é" * 28
    assert refusal(validator, request) == "Check signature failed for accessKey=userKey01"


def test_the_refusal_log_line_cannot_be_forged(
    validator: PlainAccessValidator, caplog: pytest.LogCaptureFixture
) -> None:
    """The accessKey is the peer's text: control characters are escaped and it is cut short,
    so a peer cannot write lines of its own into the broker log."""

    class Peer:
        remote_address = PEER

    request = RemotingCommand.request(
        RequestCode.GET_MAX_OFFSET,
        {"AccessKey": "x\nFAKE habroker: master demoted" + "y" * 5000, "Signature": "s"},
    )
    with pytest.raises(Exception, match="No acl config"):
        validator.check(request, Peer())  # type: ignore[arg-type]
    lines = [r.getMessage() for r in caplog.records if "ACL refused" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0] and len(lines[0]) < 600, lines


@pytest.mark.parametrize(
    "heartbeat",
    [
        {"consumerDataSet": 5},
        {"consumerDataSet": [{"groupName": "g", "subscriptionDataSet": 7}]},
        {"consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [{"topic": 3}]}]},
        [1, 2],
    ],
)
def test_a_malformed_heartbeat_is_a_refusal_not_a_crash(
    validator: PlainAccessValidator, heartbeat: object
) -> None:
    request = signed(RequestCode.HEART_BEAT, {}, json.dumps(heartbeat).encode())
    try:
        validator.validate(request, PEER)
    except AclError as exc:
        assert "heartbeat body" in str(exc) or "permission" in str(exc)
