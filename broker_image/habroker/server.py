"""The HTTP/1.1 client and admin API (aiohttp): translation between HTTP and the broker.

Routes and shapes are documented in ``docs/http-api.md`` and ``openapi.yaml``. Every refusal is
a JSON error with a stable ``error`` code; nothing here decides policy.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import re
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from habroker.admin_auth import ADMIN_PREFIX, AdminToken
from habroker.broker import BrokerController, BrokerError
from habroker.config import ConfigError, broker_id_of, parse_host_port
from habroker.message import decode_records
from habroker.metadata import MetadataError
from habroker.metrics import exposition
from habroker.replicas_manager import MAX_BROKER_ID, MAX_EPOCH, RoleError, RoleRequest
from habroker.store import StoreError
from habroker.wire import BATCH_CONTENT_TYPE, RECORDS_CONTENT_TYPE, BadBatch, decode_batch

log = logging.getLogger(__name__)

BROKER_KEY = web.AppKey("broker", BrokerController)
MAX_PULL_MESSAGES = 1024
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(status: int, code: str, message: str, **details: Any) -> web.Response:
    body: dict[str, Any] = {"error": code, "message": message}
    if details:
        body["details"] = {k: v for k, v in details.items() if v is not None}
    return web.json_response(body, status=status)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every refusal into JSON; an unexpected exception is a logged 500, never a crash."""
    broker = request.app[BROKER_KEY]
    peer = _peer(request)  # now: once the client is gone its transport says nothing
    try:
        return await handler(request)
    except BrokerError as exc:
        broker.stats.request_errors[exc.code] += 1
        return error_response(exc.http_status, exc.code, str(exc), **exc.details)
    except BadBatch as exc:
        broker.stats.request_errors["bad_batch"] += 1
        return error_response(400, "bad_batch", str(exc), index=exc.index)
    except MetadataError as exc:
        broker.stats.request_errors[exc.code] += 1
        return error_response(400, exc.code, str(exc))
    except ConfigError as exc:
        broker.stats.request_errors["bad_config"] += 1
        return error_response(400, "bad_config", str(exc))
    except StoreError as exc:
        code, status = store_error_code(exc)
        broker.stats.request_errors[code] += 1
        return error_response(status, code, str(exc))
    except ClientHungUp as exc:
        # nothing was read whole, so nothing was done; not the broker's error, and no one is
        # left to read an answer
        log.info(
            "client %s:%d hung up during %s %s: %s",
            *peer,
            request.method,
            request.path,
            exc,
        )
        return error_response(400, "client_hung_up", str(exc))
    except web.HTTPException as exc:
        if exc.status >= 400 and exc.content_type != "application/json":
            return error_response(
                exc.status, exc.reason.lower().replace(" ", "_"), exc.text or exc.reason
            )
        raise
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        broker.stats.request_errors["internal"] += 1
        return error_response(500, "internal", "internal error; see the broker log")


ADMIN_TOKEN_KEY = web.AppKey("admin_token", AdminToken)


@web.middleware
async def admin_auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """``/v1/admin/*`` needs the bearer token when ``adminTokenFile`` is set."""
    token = request.app.get(ADMIN_TOKEN_KEY)
    guarded = token is not None and request.path.startswith(ADMIN_PREFIX)
    if guarded and token is not None and not token.accepts(request.headers.get("Authorization")):
        log.warning(
            "refused %s %s from %s:%d: no valid admin token",
            request.method,
            request.path,
            *_peer(request),
        )
        request.app[BROKER_KEY].stats.request_errors["unauthorized"] += 1
        response = error_response(
            401, "unauthorized", "admin calls need Authorization: Bearer <the group's token>"
        )
        response.headers["WWW-Authenticate"] = 'Bearer realm="habroker-admin"'
        return response
    return await handler(request)


class _ClientFaultsAsInfo(logging.Filter):
    """aiohttp logs a request it cannot parse (bad request line, header or chunk: the client's
    fault, and what a port scanner sends) as an ERROR with a traceback; one INFO line says it."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError) and 400 <= (exc.code or 400) < 500:
            detail = " ".join(str(exc.message).split())
            record.msg = f"{record.getMessage()}: malformed HTTP request ({exc.code}): {detail}"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


#: what aiohttp's protocol layer logs for this face (malformed requests one INFO line each)
protocol_log = logging.getLogger("habroker.server.http")
protocol_log.addFilter(_ClientFaultsAsInfo())


def store_error_code(exc: StoreError) -> tuple[str, int]:
    name = type(exc).__name__
    return {
        "MessageTooLarge": ("message_too_large", 413),
        "PropertiesTooLarge": ("properties_too_large", 400),
        "StoreNotWritable": ("store_not_writable", 503),
        "InvalidTopic": ("bad_topic", 400),
    }.get(name, ("store_error", 500))


# -- helpers ---------------------------------------------------------------------------------
def _int_param(
    request: web.Request,
    name: str,
    default: int | None = None,
    *,
    lo: int | None = None,
    hi: int | None = None,
) -> int:
    raw = request.query.get(name)
    if raw is None:
        if default is None:
            raise BrokerError("bad_request", f"query parameter {name!r} is required")
        return default
    value = _decimal(name, raw)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise BrokerError("bad_request", f"{name}={value}: must be {lo}..{hi}")
    return value


def _path_int(request: web.Request, name: str) -> int:
    return _decimal(name, request.match_info[name])


_DECIMAL = re.compile(r"-?[0-9]+")


def _decimal(name: str, raw: str) -> int:
    """An integer parameter as openapi.yaml has it: ASCII digits, an optional minus, nothing
    else (Python's int() would take ' 5', '+5', '5_0' and other scripts' digits)."""
    try:
        if _DECIMAL.fullmatch(raw):
            return int(raw)  # a huge value is the caller's range check to refuse
    except ValueError:  # more digits than Python converts (4300)
        pass
    raise BrokerError("bad_request", f"{name}={raw!r}: expected an integer")


class ClientHungUp(Exception):
    """The client closed its connection before its request body arrived whole."""


async def _read_body(request: web.Request) -> bytes:
    """The whole request body; a client that hangs up midway raises :class:`ClientHungUp`."""
    try:
        return await request.read()
    except ConnectionResetError as exc:
        raise ClientHungUp(str(exc) or type(exc).__name__) from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _json_number(text: str) -> int | float:
    """A JSON number with no fractional part is an integer (``270.0``, ``2e3``), as JSON
    Schema and openapi.yaml say, so integer fields accept it; anything else stays a float."""
    value = float(text)
    return int(value) if value.is_integer() else value


async def _json_body(request: web.Request) -> dict[str, Any]:
    """Every JSON request body is parsed here: strict RFC 8259 JSON (UTF-8, no NaN/Infinity);
    anything else, however deeply nested or cut off, is ``400 bad_json``."""
    if request.content_type != "application/json":
        raise BrokerError(
            "unsupported_media_type",
            f"expected application/json, got {request.content_type!r}",
            415,
        )
    charset = (request.charset or "utf-8").lower()
    if charset not in ("utf-8", "utf8", "us-ascii"):
        raise BrokerError(
            "bad_json",
            f"request body is not valid JSON: charset={charset!r}; JSON is UTF-8 (RFC 8259)",
        )
    raw = await _read_body(request)
    try:
        data = json.loads(
            raw.decode("utf-8"), parse_constant=_no_constant, parse_float=_json_number
        )
    except RecursionError:
        raise BrokerError("bad_json", "request body is not valid JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, over-long integers
        raise BrokerError("bad_json", f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BrokerError("bad_json", "request body must be a JSON object")
    return data


def _peer(request: web.Request) -> tuple[str, int]:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return str(peer[0]), int(peer[1])
    return "127.0.0.1", 0


# -- handlers --------------------------------------------------------------------------------
async def produce(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    topic = request.match_info["topic"]
    if request.content_type != BATCH_CONTENT_TYPE:
        raise BrokerError(
            "unsupported_media_type",
            f"produce takes {BATCH_CONTENT_TYPE} (RocketMQ batch encoding), got "
            f"{request.content_type!r}",
            415,
        )
    max_request = broker.config.maxMessageSize * 16
    if request.content_length is not None and request.content_length > max_request:
        raise BrokerError(
            "request_too_large",
            f"request of {request.content_length} bytes exceeds "
            f"{max_request} (maxMessageSize * 16)",
            413,
        )
    queue_id = _int_param(request, "queueId", -1, lo=-1)
    data = await _read_body(request)
    result, queue_id = await broker.produce(topic, queue_id, decode_batch(data), _peer(request))
    return web.json_response(
        {
            "status": result.status.value,
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": result.queue_offset,
            "count": result.count,
            "commitLogOffset": result.wrote_offset,
            "wroteBytes": result.wrote_bytes,
            "msgId": result.msg_id,
        }
    )


async def pull(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    topic = request.match_info["topic"]
    queue_id = _path_int(request, "queueId")
    offset = _int_param(request, "offset", lo=0)
    max_msgs = _int_param(request, "max", 32, lo=1, hi=MAX_PULL_MESSAGES)
    max_bytes = _int_param(request, "maxBytes", 4 * 1024 * 1024, lo=1)
    group = request.query.get("group") or None
    broker.check_pull(group)
    outcome = broker.pull(topic, queue_id, offset, max_msgs, group, max_bytes)
    result = outcome.result
    status = "PULL_RETRY_IMMEDIATELY" if outcome.retry_immediately else result.status.value
    headers = {
        "X-Pull-Status": status,
        "X-Next-Begin-Offset": str(result.next_begin_offset),
        "X-Min-Offset": str(result.min_offset),
        "X-Max-Offset": str(result.max_offset),
        "X-Suggest-Which-Broker-Id": str(outcome.suggest_which_broker_id),
        "X-Broker-Id": str(broker.config.brokerId),
        "X-Message-Count": str(result.message_count),
    }
    payload = b"".join(result.records)
    broker.stats.pull_bytes += len(payload)
    if "application/json" in request.headers.get("Accept", ""):
        messages = [
            {
                "topic": m.topic,
                "queueId": m.queue_id,
                "queueOffset": m.queue_offset,
                "commitLogOffset": m.commit_log_offset,
                "bornTimestamp": m.born_timestamp,
                "storeTimestamp": m.store_timestamp,
                "msgId": m.msg_id,
                "properties": m.properties,
                "body": base64.b64encode(m.body).decode(),
            }
            for m in decode_records(payload)
        ]
        return web.json_response(
            {
                "status": status,
                "nextBeginOffset": result.next_begin_offset,
                "minOffset": result.min_offset,
                "maxOffset": result.max_offset,
                "suggestWhichBrokerId": outcome.suggest_which_broker_id,
                "brokerId": broker.config.brokerId,
                "messages": messages,
            },
            headers=headers,
        )
    return web.Response(body=payload, content_type=RECORDS_CONTENT_TYPE, headers=headers)


async def topic_offsets(request: web.Request) -> web.Response:
    return web.json_response(request.app[BROKER_KEY].queue_offsets(request.match_info["topic"]))


async def create_topic(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    if broker.is_slave:
        raise BrokerError("not_master", "topics are created on the master; slaves copy them", 403)
    body = await _json_body(request)
    topic = body.get("topic")
    if not isinstance(topic, str):
        raise BrokerError("bad_topic", "field 'topic' (string) is required")
    nums = broker.config.defaultTopicQueueNums
    values = {}
    for key, default in (("readQueueNums", nums), ("writeQueueNums", nums), ("perm", 6)):
        value = body.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise BrokerError("bad_topic", f"field {key!r} must be an integer, got {value!r}")
        values[key] = value
    unknown = set(body) - {"topic", "readQueueNums", "writeQueueNums", "perm"}
    if unknown:
        raise BrokerError("bad_topic", f"unknown field(s): {', '.join(sorted(unknown))}")
    cfg, changed = broker.create_topic(
        topic, values["readQueueNums"], values["writeQueueNums"], values["perm"]
    )
    return web.json_response(
        broker.topics.to_json()["topicConfigTable"][cfg.topicName], status=201 if changed else 200
    )


async def list_topics(request: web.Request) -> web.Response:
    return web.json_response(request.app[BROKER_KEY].topics.to_json())


async def put_group(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    if broker.is_slave:
        raise BrokerError(
            "not_master", "subscription groups are set on the master; slaves copy them", 403
        )
    cfg = broker.groups.update(request.match_info["group"], await _json_body(request))
    return web.json_response(broker.groups.to_json()["subscriptionGroupTable"][cfg.groupName])


async def list_groups(request: web.Request) -> web.Response:
    return web.json_response(request.app[BROKER_KEY].groups.to_json())


async def commit_offset(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    body = await _json_body(request)
    offset = body.get("offset")
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise BrokerError("bad_request", f"field 'offset' must be an integer, got {offset!r}")
    broker.commit_offset(
        request.match_info["group"],
        request.match_info["topic"],
        _path_int(request, "queueId"),
        offset,
    )
    return web.json_response({"offset": offset})


async def query_offset(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    group, topic = request.match_info["group"], request.match_info["topic"]
    offset = broker.offsets.query(group, topic, _path_int(request, "queueId"))
    if offset is None:
        raise BrokerError(
            "no_offset",
            f"group {group!r} has no offset for {topic}/{request.match_info['queueId']}",
            404,
        )
    return web.json_response({"offset": offset})


async def all_offsets(request: web.Request) -> web.Response:
    return web.json_response(request.app[BROKER_KEY].offsets.to_json())


async def status(request: web.Request) -> web.Response:
    return web.json_response(request.app[BROKER_KEY].status())


async def set_master_address(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    body = await _json_body(request)
    ha = body.get("haMasterAddress")
    http = body.get("masterHttpAddress")
    if not isinstance(ha, str) or (http is not None and not isinstance(http, str)):
        raise BrokerError(
            "bad_request",
            "fields: haMasterAddress (string, host:port or ''), "
            "masterHttpAddress (optional string)",
        )
    broker.set_master_address(ha, http)
    return web.json_response(
        {"haMasterAddress": ha, "masterHttpAddress": broker.master_http_address}
    )


async def get_external_addresses(request: web.Request) -> web.Response:
    routes = request.app[BROKER_KEY].routes
    return web.json_response(
        {
            "brokerAddrs": {str(k): v for k, v in routes.external.items()},
            "peerAddrs": dict(routes.external_peers),
        }
    )


_K = TypeVar("_K", int, str)

_EXTERNAL_FIELDS = (
    'fields: brokerAddrs, an object of brokerId -> "host:port" (e.g. {"0": '
    '"203.0.113.7:31911"}), and/or, in a DLedger group, peerAddrs, an object of '
    'dLegerSelfId -> "host:port" (e.g. {"n0": "203.0.113.7:31911"})'
)


async def put_external_addresses(request: web.Request) -> web.Response:
    """Where clients outside the cluster reach each broker of the group (the operator knows:
    node ports, load balancers); route answers on externalListenPort carry these.  A classic
    group's are told by brokerId; a DLedger group's by peer, since brokerIds follow the
    leader (habroker.route_info)."""
    broker = request.app[BROKER_KEY]
    body = await _json_body(request)
    addrs = body.get("brokerAddrs", {})
    peer_addrs = body.get("peerAddrs", {})
    if "brokerAddrs" not in body and "peerAddrs" not in body:
        raise BrokerError("bad_request", _EXTERNAL_FIELDS)
    parsed = _external_map(addrs, _broker_id_key)
    peers = _external_map(peer_addrs, _peer_id_key)
    if parsed is None or peers is None:
        raise BrokerError("bad_request", _EXTERNAL_FIELDS)
    if peers and broker.dledger_store is None:
        raise BrokerError("bad_request", "peerAddrs: this broker is not a DLedger peer")
    broker.routes.set_external(parsed, peers)
    return web.json_response(
        {"brokerAddrs": {str(k): v for k, v in parsed.items()}, "peerAddrs": peers}
    )


def _broker_id_key(key: str) -> int:
    if not _BROKER_ID.fullmatch(key) or int(key) > MAX_BROKER_ID:
        raise ConfigError(key)
    return int(key)


def _peer_id_key(key: str) -> str:
    broker_id_of(key)  # RocketMQ numbers a follower from its id: n0, n1, ...
    return key


def _external_map(value: Any, key_of: Callable[[str], _K]) -> dict[_K, str] | None:
    """``{key: "host:port"}`` checked, or None when anything in it is malformed."""
    if not isinstance(value, dict):
        return None
    out: dict[_K, str] = {}
    for key, address in value.items():
        try:
            if not isinstance(address, str) or not isinstance(key, str):
                return None
            parse_host_port(address)
            out[key_of(key)] = address
        except ConfigError:
            return None
    return out


_BROKER_ID = re.compile(r"0|[1-9][0-9]{0,18}")


def _role_view(broker: BrokerController) -> dict[str, Any]:
    return {
        "role": broker.role.value,
        "brokerId": broker.config.brokerId,
        "brokerName": broker.config.brokerName,
        "maxOffset": broker.store.max_phy_offset,
        **broker.replicas.status(),
    }


async def get_role(request: web.Request) -> web.Response:
    return web.json_response(_role_view(request.app[BROKER_KEY]))


async def put_role(request: web.Request) -> web.Response:
    """The controller (the operator) says what this broker is: docs/failover.md."""
    broker = request.app[BROKER_KEY]
    body = await _json_body(request)
    try:
        await broker.replicas.set_role(RoleRequest.from_json(body))
    except RoleError as exc:
        raise BrokerError(exc.code, str(exc), exc.http_status) from None
    return web.json_response(_role_view(broker))


async def fence(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    body = await _json_body(request)
    epoch = body.get("epoch")
    if type(epoch) is not int or not 1 <= epoch <= MAX_EPOCH:
        raise BrokerError("bad_request", f"fields: epoch (int 1..{MAX_EPOCH}), got {epoch!r}")
    try:
        return web.json_response(await broker.replicas.fence(epoch))
    except RoleError as exc:
        raise BrokerError(exc.code, str(exc), exc.http_status) from None


async def leadership_transfer(request: web.Request) -> web.Response:
    """DLedger groups: hand leadership to a caught-up follower (before a rolling restart)."""
    broker = request.app[BROKER_KEY]
    body = await _json_body(request)
    transferee = body.get("transfereeId")
    if not isinstance(transferee, str) or not transferee:
        raise BrokerError("bad_request", "fields: transfereeId (a dLegerPeers id, e.g. n1)")
    return web.json_response(await broker.transfer_leadership(transferee))


async def put_dledger_peers(request: web.Request) -> web.Response:
    """DLedger groups: a new membership, one peer added or removed (docs/dledger.md)."""
    broker = request.app[BROKER_KEY]
    body = await _json_body(request)
    peers = body.get("peers")
    if not isinstance(peers, str) or not peers:
        raise BrokerError("bad_request", "fields: peers (dLegerPeers syntax, n0-host:port;...)")
    return web.json_response(broker.set_dledger_peers(peers))


async def get_config(request: web.Request) -> web.Response:
    return web.json_response(request.app[BROKER_KEY].config.to_properties())


_JSON_TYPE_NAMES = {"bool": "true or false", "int": "an integer", "str": "a string"}


def _json_type(value: Any) -> str:
    """The config field type a JSON value can set (``bool`` before ``int``: True is an int)."""
    return "bool" if isinstance(value, bool) else type(value).__name__


async def patch_config(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    body = await _json_body(request)
    bad = [k for k in body if k not in broker.config.RUNTIME_KEYS]
    if bad:
        raise BrokerError(
            "not_runtime_key",
            f"cannot change {', '.join(bad)} at runtime; runtime keys: "
            f"{', '.join(broker.config.RUNTIME_KEYS)}",
        )
    hints = {f.name: f.type for f in dataclasses.fields(broker.config)}
    wrong = [k for k, v in body.items() if _json_type(v) != hints[k]]
    if wrong:
        raise BrokerError(
            "bad_config",
            "wrong JSON type for "
            + ", ".join(f"{k} (expected {_JSON_TYPE_NAMES[str(hints[k])]})" for k in wrong),
        )
    new = broker.update_config(body)
    return web.json_response({k: new.to_properties()[k] for k in body})


async def clean_expired(request: web.Request) -> web.Response:
    broker = request.app[BROKER_KEY]
    result = await broker.store.clean_expired(force=True)
    return web.json_response({"deletedFiles": result.deleted_files, "minOffset": result.min_offset})


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    ok, reason = request.app[BROKER_KEY].readiness()
    return web.Response(text=reason + "\n", status=200 if ok else 503)


async def openapi(request: web.Request) -> web.Response:
    text = resources.files("habroker").joinpath("openapi.yaml").read_text(encoding="utf-8")
    return web.Response(text=text, content_type="application/yaml")


async def metrics(request: web.Request) -> web.Response:
    body, content_type = exposition(request.app[BROKER_KEY], request.headers.get("Accept", ""))
    return web.Response(body=body, headers={"Content-Type": content_type})


def add_routes(router: web.UrlDispatcher) -> None:
    """Every route; ``openapi.yaml`` documents exactly these (a test holds them together)."""
    r = router
    r.add_post("/v1/topics/{topic}/messages", produce)
    r.add_get("/v1/topics/{topic}/queues/{queueId}/messages", pull)
    r.add_get("/v1/topics/{topic}/offsets", topic_offsets)
    r.add_post("/v1/topics", create_topic)
    r.add_get("/v1/topics", list_topics)
    r.add_put("/v1/subscription-groups/{group}", put_group)
    r.add_get("/v1/subscription-groups", list_groups)
    r.add_put("/v1/consumer-offsets/{group}/{topic}/{queueId}", commit_offset)
    r.add_get("/v1/consumer-offsets/{group}/{topic}/{queueId}", query_offset)
    r.add_get("/v1/consumer-offsets", all_offsets)
    r.add_get("/v1/status", status)
    r.add_put("/v1/admin/master-address", set_master_address)
    r.add_get("/v1/admin/role", get_role)
    r.add_put("/v1/admin/role", put_role)
    r.add_post("/v1/admin/fence", fence)
    r.add_post("/v1/admin/dledger/leadership-transfer", leadership_transfer)
    r.add_put("/v1/admin/dledger/peers", put_dledger_peers)
    r.add_get("/v1/admin/external-addresses", get_external_addresses)
    r.add_put("/v1/admin/external-addresses", put_external_addresses)
    r.add_get("/v1/admin/config", get_config)
    r.add_patch("/v1/admin/config", patch_config)
    r.add_post("/v1/admin/clean-expired", clean_expired)
    r.add_get("/v1/openapi.yaml", openapi)
    r.add_get("/healthz", healthz)
    r.add_get("/readyz", readyz)
    r.add_get("/metrics", metrics)


def create_app(broker: BrokerController) -> web.Application:
    limit = broker.config.maxMessageSize * 16 + 1024 * 1024
    app = web.Application(
        middlewares=[errors_middleware, admin_auth_middleware], client_max_size=limit
    )
    app[BROKER_KEY] = broker
    if broker.admin_token is not None:
        app[ADMIN_TOKEN_KEY] = broker.admin_token
    add_routes(app.router)
    return app


async def serve_http(broker: BrokerController) -> web.AppRunner:
    """The HTTP listener on ``httpListenPort`` for a started broker; the caller cleans it up."""
    runner = web.AppRunner(
        create_app(broker), access_log=None, handle_signals=False, logger=protocol_log
    )
    await runner.setup()
    site = web.TCPSite(
        runner, broker.config.bindAddress, broker.config.httpListenPort, reuse_address=True
    )
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    return runner
