"""HTTP pulls pass the checks a remoting pull passes (BrokerController.check_pull, one place
for both faces): a broker that is not readable (brokerPermission without 4) refuses every pull;
a named group must exist (or be auto-created) and may consume; a pull without a group (a reader
that keeps its own offsets) is served."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from habroker.client import Producer
from habroker.local import LocalBroker


def pull(broker: LocalBroker, topic: str, group: str | None = None) -> tuple[int, Any]:
    query = "offset=0" + (f"&group={urllib.request.quote(group)}" if group is not None else "")
    req = urllib.request.Request(
        f"http://{broker.http_address}/v1/topics/{topic}/queues/0/messages?{query}",
        headers={"Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_groups_are_checked_as_remoting_pulls_check_them(broker_factory) -> None:
    broker = broker_factory(autoCreateSubscriptionGroup=False)
    with Producer(broker.http_address) as producer:
        producer.create_topic("T", 1)
        assert producer.send("T", b"x", queue_id=0).status == "PUT_OK"

    code, body = pull(broker, "T")
    assert code == 200 and len(body["messages"]) == 1  # no group: a reader
    code, body = pull(broker, "T", "nobody")
    assert (code, body["error"]) == (404, "unknown_group"), body
    assert "subscription group [nobody] does not exist" in body["message"]
    assert "nobody" not in broker.request("GET", "/v1/subscription-groups")[1].get(
        "subscriptionGroupTable", {}
    )  # refused, not created
    code, body = pull(broker, "T", "no such group")
    assert (code, body["error"]) == (400, "bad_group"), body

    code, body = broker.request("PUT", "/v1/subscription-groups/paused", {"consumeEnable": False})
    assert code == 200, body
    code, body = pull(broker, "T", "paused")
    assert (code, body["error"]) == (403, "group_not_consumable"), body
    assert (
        broker.request("PUT", "/v1/subscription-groups/paused", {"consumeEnable": True})[0] == 200
    )
    code, body = pull(broker, "T", "paused")
    assert code == 200 and len(body["messages"]) == 1


def test_a_group_is_created_on_first_pull_when_auto_create_is_on(broker_factory) -> None:
    broker = broker_factory()  # autoCreateSubscriptionGroup defaults to true, as in RocketMQ
    with Producer(broker.http_address) as producer:
        producer.create_topic("T", 1)
    assert pull(broker, "T", "fresh")[0] == 200
    code, groups = broker.request("GET", "/v1/subscription-groups")
    assert code == 200 and "fresh" in groups["subscriptionGroupTable"]


def test_a_broker_that_is_not_readable_refuses_every_pull(broker_factory) -> None:
    broker = broker_factory(brokerPermission=2)  # write only: drained of readers
    with Producer(broker.http_address) as producer:
        producer.create_topic("T", 1)
        assert producer.send("T", b"x", queue_id=0).status == "PUT_OK"
    for group in (None, "g"):
        code, body = pull(broker, "T", group)
        assert (code, body["error"]) == (403, "broker_not_readable"), body
        assert "pulling message is forbidden (brokerPermission=2)" in body["message"]
