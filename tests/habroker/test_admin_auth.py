"""The admin API's bearer token (``adminTokenFile``) on a real broker process: without the
token nothing under /v1/admin/ is done, with it everything is; the client API stays open; a
rotated file takes effect without a restart; the token never reaches the log."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from habroker.local import LocalBroker

TOKEN = "s3cr3t-" + os.urandom(8).hex()


def call(
    broker: LocalBroker, method: str, path: str, body: Any = None, token: str | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://{broker.http_address}{path}", data=data, method=method, headers=headers
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw[:1] == b"{" else {}), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}"), dict(exc.headers)


def test_admin_calls_need_the_token(broker_factory, tmp_path: Path):
    token_file = tmp_path / "admin-token"
    token_file.write_text(TOKEN + "\n")
    broker = broker_factory(adminTokenFile=str(token_file))
    before = call(broker, "GET", "/v1/admin/config", token=TOKEN)[1]["slaveReadEnable"]
    for token in (None, "wrong", TOKEN + "x", ""):
        code, body, headers = call(
            broker, "PATCH", "/v1/admin/config", {"slaveReadEnable": True}, token
        )
        assert code == 401 and body["error"] == "unauthorized", (token, code, body)
        assert headers.get("WWW-Authenticate", "").startswith("Bearer")
    assert call(broker, "GET", "/v1/admin/config", token=TOKEN)[1]["slaveReadEnable"] == before
    assert call(broker, "GET", "/v1/admin/role")[0] == 401
    code, body, _ = call(broker, "PATCH", "/v1/admin/config", {"slaveReadEnable": True}, TOKEN)
    assert code == 200 and body == {"slaveReadEnable": "true"}, body
    # the client API and the probes are not admin calls
    assert call(broker, "GET", "/v1/status")[0] == 200
    assert call(broker, "GET", "/healthz")[0] == 200
    code, _, _ = call(
        broker, "POST", "/v1/topics", {"topic": "t", "readQueueNums": 1, "writeQueueNums": 1}
    )
    assert code in (200, 201)
    # a rotated Secret: the new token works, the old one no longer does (no restart)
    new = TOKEN + "-2"
    time.sleep(0.01)
    token_file.write_text(new)
    assert call(broker, "GET", "/v1/admin/role", token=TOKEN)[0] == 401
    assert call(broker, "GET", "/v1/admin/role", token=new)[0] == 200
    text = broker.log_path.read_text()
    assert "no valid admin token" in text
    assert TOKEN not in text and new not in text, "the token reached the log"


def test_a_broker_whose_token_file_is_empty_or_missing_refuses_to_start(tmp_path: Path):
    for name, content in (("empty", ""), ("missing", None)):
        path = tmp_path / f"{name}-token"
        if content is not None:
            path.write_text(content)
        broker = LocalBroker(tmp_path / name, adminTokenFile=str(path))
        broker.start(wait=False)
        assert broker.proc is not None
        assert broker.proc.wait(30) != 0
        lines = [line for line in broker.log_path.read_text().splitlines() if line.strip()]
        assert any(f"adminTokenFile={path}" in line for line in lines), lines
        assert not any("Traceback" in line for line in lines), lines
