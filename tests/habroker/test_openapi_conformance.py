"""openapi.yaml checked against a real broker with schemathesis: every operation, requests
generated from the document (valid ones must be accepted, invalid ones refused with a 4xx), every
answer checked against the documented status codes, content types and schemas, and no 5xx.

The produce body (``application/vnd.rocketmq.batch``) is generated as real batches of random
bodies and properties; in valid requests the topic, group and queue are pinned to ones that exist,
so produce, pull and offsets reach the store rather than stopping at 404, and each operation must
answer 2xx at least once.  Operations that change what a broker is (role, fence,
master address, configuration, DLedger) get a broker of their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from habroker import wire
from habroker.local import LocalBroker, local_broker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

OPENAPI = Path(wire.__file__).with_name("openapi.yaml")
TOPIC, GROUP, QUEUES = "T", "G", 4
EXAMPLES = 25

_token = st.text("abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12)
_batch = st.lists(
    st.builds(
        wire.OutgoingMessage,
        body=st.binary(min_size=1, max_size=2048),
        properties=st.dictionaries(_token, _token, max_size=3),
    ),
    min_size=1,
    max_size=8,
).map(wire.encode_batch)
schemathesis.openapi.media_type(wire.BATCH_CONTENT_TYPE, _batch)


@schemathesis.serializer(wire.BATCH_CONTENT_TYPE)
def _raw(_ctx: Any, value: bytes) -> bytes:
    return value


SCHEMA = schemathesis.openapi.from_path(OPENAPI)
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]
# what a broker is, changed by the call: each gets a fresh broker so nothing leaks into the others
ISOLATED = ("/v1/admin/role", "/v1/admin/fence", "/v1/admin/master-address", "/v1/admin/config")
# valid requests that a classic master refuses by design (409: DLedger only, slaves only)
NEVER_2XX_HERE = ("/v1/admin/dledger/", "/v1/admin/master-address")


def _prepared(root: Path) -> Iterator[LocalBroker]:
    with local_broker(root) as broker:
        broker.request(
            "POST",
            "/v1/topics",
            {"topic": TOPIC, "readQueueNums": QUEUES, "writeQueueNums": QUEUES},
        )
        for queue in range(QUEUES):  # every queue a pinned request may name has an offset
            broker.request("PUT", f"/v1/consumer-offsets/{GROUP}/{TOPIC}/{queue}", {"offset": 0})
        yield broker


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    yield from _prepared(tmp_path_factory.mktemp("shared"))


# invalid requests only where the document gives something to get wrong (a body or parameters)
CASES = [
    pytest.param(op, mode, id=f"{op.label}-{mode.value}")
    for op in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or op.body or op.path_parameters or op.query
]


@pytest.mark.parametrize(("operation", "mode"), CASES)
def test_operation_matches_the_document(
    operation: Any, mode: GenerationMode, shared: LocalBroker, tmp_path: Path
) -> None:
    if operation.path.startswith(ISOLATED) and operation.method.upper() != "GET":
        brokers = _prepared(tmp_path / "own")
        broker = next(brokers)
    else:
        brokers, broker = None, shared
    try:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        def run(case: Any) -> None:
            if mode is GenerationMode.POSITIVE and case.path_parameters:
                # valid names that exist, so the request reaches the store, not only a 404
                pinned = {"topic": TOPIC, "group": GROUP}
                for name in case.path_parameters.keys() & pinned.keys():
                    case.path_parameters[name] = pinned[name]
                if "queueId" in case.path_parameters:
                    case.path_parameters["queueId"] %= QUEUES
            if mode is GenerationMode.POSITIVE and (case.query or {}).get("queueId", -1) >= 0:
                case.query["queueId"] %= QUEUES
            response = case.call_and_validate(base_url=f"http://{broker.http_address}", timeout=10)
            statuses.append(response.status_code)

        statuses: list[int] = []
        run()
        print(f"{operation.label} {mode.value}: statuses {sorted(set(statuses))}")
        if mode is GenerationMode.POSITIVE and not operation.path.startswith(NEVER_2XX_HERE):
            # the generated valid requests reached the broker's logic, not only its refusals
            assert any(200 <= s < 300 for s in statuses), statuses
        if (
            operation.label == "POST /v1/topics/{topic}/messages"
            and mode is GenerationMode.POSITIVE
        ):
            assert broker.status()["maxOffset"] > 0
    finally:
        if brokers is not None:
            brokers.close()
