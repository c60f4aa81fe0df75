"""Which remoting requests the real Java client and mqadmin send, in order (a Markdown report).

    python -m tests.interop.trace_requests [--version 4.9.7|5.3.1] [--out FILE]

Boots a 4.9.7 name server and one Java broker of ``--version`` in a private network namespace,
runs producers (each send mode), a lite pull consumer, a push consumer with a retry, and mqadmin
commands through the driver with ``--trace`` (an RPCHook on the client), and writes for each what
went over the wire: request codes with their direction (``->`` we sent, ``<-`` the server sent us),
target (name server or broker), the response code, and the first header seen for each code.
docs/interop.md shows the output for 4.9.7; rerun it after a client upgrade.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.interop.rocketmq_java import (
    BrokerSpec,
    JavaBroker,
    JavaNameServer,
    NetNS,
    ensure_installed,
    parse_events,
    run_driver,
    run_mqadmin,
)

NAMESRV = "127.0.0.1:9876"


def _target(event: dict[str, Any]) -> str:
    addr = event.get("addr")
    return "namesrv" if addr is None or str(addr).endswith(":9876") else "broker"


def _printable(text: str) -> str:
    """Message properties are joined with \\x01 / \\x02: show them, and no line breaks."""
    return text.replace("\x01", "␁").replace("\x02", "␂").replace("\n", " ")


def condense(events: Iterable[dict[str, Any]]) -> list[str]:
    """One line per request, consecutive repeats folded into ``x n``."""
    replies = {
        (e["dir"], e["opaque"], e["code"]): e for e in events if e.get("event") == "rpc-reply"
    }
    lines: list[str] = []
    last, count = "", 0
    for e in events:
        if e.get("event") != "rpc":
            continue
        reply = replies.get((e["dir"], e["opaque"], e["code"]))
        answer = reply.get("responseName") or reply.get("responseCode") if reply else None
        arrow = "->" if e["dir"] == "out" else "<-"
        text = f"{arrow} {_target(e)} {e['name']} ({e['code']})"
        if e["oneway"]:
            text += " oneway"
        if answer is not None:
            text += f" = {answer}"
            if answer != "SUCCESS" and reply and reply.get("remark"):
                text += f" ({_printable(str(reply['remark']))[:70]})"
        if text == last:
            count += 1
            continue
        if last:
            lines.append(last + (f" x {count}" if count > 1 else ""))
        last, count = text, 1
    if last:
        lines.append(last + (f" x {count}" if count > 1 else ""))
    return lines


def first_headers(events: Iterable[dict[str, Any]], seen: dict[str, dict[str, Any]]) -> None:
    for e in events:
        if e.get("event") == "rpc" and e["name"] not in seen:
            seen[e["name"]] = {"code": e["code"], "dir": e["dir"], "header": e["header"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default="4.9.7", choices=("4.9.7", "5.3.1"))
    parser.add_argument("--out", type=Path, help="write the Markdown here (default stdout)")
    args = parser.parse_args(argv)
    v = args.version
    ensure_installed(["4.9.7", v])
    sections: list[tuple[str, list[dict[str, Any]]]] = []
    with tempfile.TemporaryDirectory(prefix="trace-") as tmp, NetNS(Path(tmp)) as ns:
        JavaNameServer(ns, ns.root / "namesrv").start()
        JavaBroker(ns, v, ns.root / "broker", BrokerSpec(role="ASYNC_MASTER")).start()

        def admin(*cmd: str) -> None:
            out = run_mqadmin(ns, v, "--trace", cmd[0], "-n", NAMESRV, *cmd[1:])
            sections.append((f"mqadmin {' '.join(cmd)}", parse_events(out)))

        def drive(title: str, *cmd: str) -> list[dict[str, Any]]:
            events = run_driver(ns, v, *cmd, "--namesrv", NAMESRV, "--trace")
            sections.append((title, events))
            return events

        admin("updateTopic", "-c", "DefaultCluster", "-t", "T", "-r", "2", "-w", "2")
        sent = drive("producer: sync send x 2", "produce", "--topic", "T", "--count", "2")
        drive(
            "producer: async send x 2", "produce", "--topic", "T", "--count", "2", "--mode", "async"
        )
        drive("producer: oneway x 2", "produce", "--topic", "T", "--count", "2", "--mode", "oneway")
        drive("producer: batch of 4", "produce", "--topic", "T", "--count", "4", "--mode", "batch")
        drive("lite pull consumer (10 messages)", "lite-pull", "--topic", "T", "--group", "gl",
              "--expect", "10", "--timeout-s", "30")  # fmt: skip
        first = next(e for e in sent if e.get("event") == "send")
        drive("push consumer (10 messages, one failed once, retried)", "push", "--topic", "T",
              "--group", "gp", "--expect", "10", "--fail-ids", first["ids"][0],
              "--fail-times", "1", "--timeout-s", "60")  # fmt: skip
        admin("clusterList")
        admin("topicList")
        admin("topicRoute", "-t", "T")
        admin("topicStatus", "-t", "T")
        admin("brokerStatus", "-b", "127.0.0.1:10911")
        admin("consumerProgress", "-g", "gl")
        by_id = ("-i", first["offsetMsgId"]) + (("-t", "T") if v.startswith("5.") else ())
        admin("queryMsgById", *by_id)  # 5.x requires the topic too
        admin("getBrokerConfig", "-b", "127.0.0.1:10911")
        admin("deleteTopic", "-c", "DefaultCluster", "-t", "T")

    out = [f"### Requests of the Java {v} client and mqadmin (broker {v}, name server 4.9.7)\n"]
    headers: dict[str, dict[str, Any]] = {}
    for title, events in sections:
        out.append(f"**{title}**\n\n```")
        out.extend(condense(events))
        out.append("```\n")
        first_headers(events, headers)
    out.append("First header seen for each request code:\n\n```")
    for name, h in sorted(headers.items(), key=lambda kv: kv[1]["code"]):
        fields = ", ".join(
            f"{k}={_printable(str(val))[:70]}" for k, val in sorted(h["header"].items())
        )
        out.append(f"{h['code']:>4} {name} [{h['dir']}]: {fields}")
    out.append("```\n")
    text = "\n".join(out)
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
