"""What the remoting client raises: one base class, and messages a user can act on.

RocketMQ's Java client has MQClientException (the client could not do it) and MQBrokerException
(a broker said no, with a response code); these are the same split, plus the two cases every
user hits first — a topic nobody created and an address nothing answers on — as their own types
so the CLI and applications can say so in one line.
"""

from __future__ import annotations

from habroker.remoting.codes import ResponseCode, code_name


class MQClientError(Exception):
    """Base of every error the remoting client raises."""


class BrokerUnreachableError(MQClientError):
    """No connection, or no answer in time, from a broker or name server."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"cannot reach {address}: {reason}")
        self.address = address
        self.reason = reason


class NameServerUnreachableError(BrokerUnreachableError):
    """None of the name-server addresses answered."""

    def __init__(self, addresses: list[str], reason: str) -> None:
        MQClientError.__init__(
            self,
            f"no name server answered (tried {', '.join(addresses)}): {reason}; "
            "check --namesrv / namesrv_addr (a broker of the group or a RocketMQ name server)",
        )
        self.address = ";".join(addresses)
        self.reason = reason


class TopicNotExistError(MQClientError):
    """The name server has no route for the topic: it was never created (or was deleted)."""

    def __init__(self, topic: str, where: str) -> None:
        super().__init__(
            f"topic {topic!r} does not exist ({where} has no route for it); create it with "
            f"`habroker topic create {topic}` or MQAdmin.create_topic({topic!r})"
        )
        self.topic = topic
        self.where = where


class MQBrokerError(MQClientError):
    """A broker answered with a code the operation does not accept."""

    def __init__(self, code: int, remark: str | None, address: str, request: int) -> None:
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = f"code {code}"
        text = f"{address} refused {code_name(request)}: {name}"
        if remark:
            text += f" ({remark})"
        super().__init__(text)
        self.code = code
        self.remark = remark or ""
        self.address = address
        self.request = request


class MessageRejectedError(MQClientError):
    """A message the client refuses before sending it (RocketMQ's Validators)."""
