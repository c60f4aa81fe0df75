"""openapi.yaml checked against a real broker with schemathesis: every operation, requests
generated from the document (valid ones must be accepted, invalid ones refused with a 4xx), every
answer checked against the documented status codes, content types and schemas, and no 5xx.

The produce body (``application/vnd.rocketmq.batch``) is generated as real batches of random
bodies and properties; in valid requests the topic, group and queue are pinned to ones that exist,
so produce, pull and offsets reach the store rather than stopping at 404, and each operation must
answer 2xx at least once.  Operations that change what a broker is (role, fence,
master address, configuration, DLedger) get a broker of their own.

The admin operations run twice: against a broker without ``adminTokenFile`` (open, by design),
and against one with it, every request carrying the bearer token; there the same request
without the token, or with another one, must be refused 401 as the document says.
"""

from __future__ import annotations

import copy
import os
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
from schemathesis.specs.openapi.checks import ignored_auth

OPENAPI = Path(wire.__file__).with_name("openapi.yaml")
TOPIC, GROUP, QUEUES = "T", "G", 4
EXAMPLES = 25
ADMIN = "/v1/admin/"
TOKEN = "conformance-" + os.urandom(8).hex()
AUTH = {"Authorization": f"Bearer {TOKEN}"}

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


def _without_admin_token(document: dict[str, Any]) -> dict[str, Any]:
    """The document as a broker without adminTokenFile serves it: no operation needs a token."""
    opened = copy.deepcopy(document)
    for item in opened["paths"].values():
        for operation in item.values():
            if isinstance(operation, dict):
                operation.pop("security", None)
    return opened


# no adminTokenFile: the admin API is open by design (docs/security.md), so requests without
# the token are valid requests there
OPEN_OPERATIONS = [
    result.ok()
    for result in schemathesis.openapi.from_dict(
        _without_admin_token(SCHEMA.raw_schema)
    ).get_all_operations()
]
# what a broker is, changed by the call: each gets a fresh broker so nothing leaks into the others
ISOLATED = ("/v1/admin/role", "/v1/admin/fence", "/v1/admin/master-address", "/v1/admin/config")
# valid requests that a classic master refuses by design (409: DLedger only, slaves only)
NEVER_2XX_HERE = ("/v1/admin/dledger/", "/v1/admin/master-address")


def _prepared(root: Path, token: bool = False) -> Iterator[LocalBroker]:
    config: dict[str, Any] = {}
    if token:
        root.mkdir(parents=True, exist_ok=True)
        (root / "admin-token").write_text(TOKEN + "\n")
        config["adminTokenFile"] = str(root / "admin-token")
    with local_broker(root, **config) as broker:
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


@pytest.fixture(scope="module")
def shared_with_token(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    yield from _prepared(tmp_path_factory.mktemp("shared-token"), token=True)


# invalid requests only where the document gives something to get wrong (a body or parameters)
def _cases(operations: list[Any]) -> list[Any]:
    return [
        pytest.param(op, mode, id=f"{op.label}-{mode.value}")
        for op in operations
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        if mode is GenerationMode.POSITIVE or op.body or op.path_parameters or op.query
    ]


def _conform(
    operation: Any, mode: GenerationMode, shared: LocalBroker, tmp_path: Path, token: bool
) -> None:
    if operation.path.startswith(ISOLATED) and operation.method.upper() != "GET":
        brokers = _prepared(tmp_path / "own", token=token)
        broker = next(brokers)
    else:
        brokers, broker = None, shared
    base_url = f"http://{broker.http_address}"
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
            if token:
                # with the token: as documented; schemathesis' ignored_auth check also sends
                # the request without it and with a wrong one and wants 401/403 for both
                response = case.call_and_validate(base_url=base_url, headers=AUTH, timeout=10)
                _refused_without_the_token(case, base_url)
            else:
                response = case.call_and_validate(base_url=base_url, timeout=10)
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


def _refused_without_the_token(case: Any, base_url: str) -> None:
    """The same request without a token and with another one: 401, as the document says."""
    generated = case.headers
    try:
        for auth in (None, f"Bearer {TOKEN}x"):
            headers = {k: v for k, v in (generated or {}).items() if k.lower() != "authorization"}
            if auth is not None:
                headers["Authorization"] = auth
            case.headers = headers
            response = case.call(base_url=base_url, timeout=10)
            assert response.status_code == 401, (auth, response.status_code, response.text)
            assert response.headers.get("www-authenticate", [""])[0].startswith("Bearer")
            assert response.json()["error"] == "unauthorized"
            case.validate_response(response, excluded_checks=[ignored_auth])
    finally:
        case.headers = generated


@pytest.mark.parametrize(("operation", "mode"), _cases(OPEN_OPERATIONS))
def test_operation_matches_the_document(
    operation: Any, mode: GenerationMode, shared: LocalBroker, tmp_path: Path
) -> None:
    _conform(operation, mode, shared, tmp_path, token=False)


@pytest.mark.parametrize(
    ("operation", "mode"), _cases([op for op in OPERATIONS if op.path.startswith(ADMIN)])
)
def test_admin_operation_matches_the_document_with_a_token(
    operation: Any, mode: GenerationMode, shared_with_token: LocalBroker, tmp_path: Path
) -> None:
    _conform(operation, mode, shared_with_token, tmp_path, token=True)


def test_document_declares_the_admin_token() -> None:
    """Every admin operation needs the bearer token and may answer 401; nothing else does."""
    raw = SCHEMA.raw_schema
    scheme = raw["components"]["securitySchemes"]["adminToken"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert "security" not in raw  # the client API, status and probes stay open
    admin = [op for op in OPERATIONS if op.path.startswith(ADMIN)]
    assert len(admin) >= 10
    for op in OPERATIONS:
        definition = op.definition.raw
        if op.path.startswith(ADMIN):
            assert definition.get("security") == [{"adminToken": []}], op.label
            assert "401" in definition["responses"], op.label
        else:
            assert "security" not in definition and "401" not in definition["responses"], op.label
