"""Regenerate ``habroker/rocketmq_keys.py``: the keys a RocketMQ broker reads from broker.conf.

A Java broker (``BrokerStartup``) hands its properties file to ``MixAll.properties2Object`` for
each of its config objects; that call derives a key from every public one-argument ``setXxx``
method (``xxx`` with its first letter lower-cased) and parses the value by the setter's
parameter type (int, long, double, boolean, float, String; any other type is skipped). So the
set of keys RocketMQ knows is exactly those setters. This script reads them from a local
apache/rocketmq git checkout (or bare mirror) at the given tags and writes names and types
only: facts, no upstream code.

    python tools/rocketmq_config_keys.py --repo ~/src/rocketmq \\
        --tag rocketmq-all-4.9.7 --tag rocketmq-all-5.3.1

``--check`` compares with the committed module instead of writing it.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

OUTPUT = Path(__file__).resolve().parents[1] / "broker_image" / "habroker" / "rocketmq_keys.py"

#: the config classes BrokerStartup fills from broker.conf, by source path
CLASSES = {
    "BrokerConfig": "common/src/main/java/org/apache/rocketmq/common/BrokerConfig.java",
    "NettyServerConfig": "remoting/src/main/java/org/apache/rocketmq/remoting/netty/NettyServerConfig.java",
    "NettyClientConfig": "remoting/src/main/java/org/apache/rocketmq/remoting/netty/NettyClientConfig.java",
    "MessageStoreConfig": "store/src/main/java/org/apache/rocketmq/store/config/MessageStoreConfig.java",
    "AuthConfig": "auth/src/main/java/org/apache/rocketmq/auth/config/AuthConfig.java",
}
STARTUP = "broker/src/main/java/org/apache/rocketmq/broker/BrokerStartup.java"
#: the 2014 commit that dropped MessageStoreConfig's per-file path setters (storePathIndex,
#: storeCheckpoint, ...). Published sample broker.conf files still carry those keys, and every
#: later Java broker ignores them without a word, so habroker accepts them the same way.
LEGACY_COMMIT = "a05d33f2afa5f4a83a6f6ddf68e3cc3196b04036"
LEGACY_PATH = (
    "rocketmq-store/src/main/java/com/alibaba/rocketmq/store/config/MessageStoreConfig.java"
)
#: the parameter types properties2Object parses; a setter of any other type is skipped by Java
PARSED_TYPES = {
    "int": "int",
    "Integer": "int",
    "long": "long",
    "Long": "long",
    "double": "double",
    "Double": "double",
    "float": "float",
    "Float": "float",
    "boolean": "boolean",
    "Boolean": "boolean",
    "String": "String",
}

SETTER = re.compile(
    r"^\s*public\s+(?:final\s+|synchronized\s+)*[\w<>\[\],\s]+?\s+set(\w+)\s*\(\s*"
    r"(?:final\s+)?([\w.]+)\s+\w+\s*\)",
    re.M,
)
EXTENDS = re.compile(r"^public\s+(?:abstract\s+)?class\s+\w+\s+extends\s+(\w+)", re.M)
STARTUP_OBJECT = re.compile(r"\b(\w+)\s+(\w+)\s*=\s*new\s+(\w+)\(\)")
STARTUP_FILLED = re.compile(r"properties2Object\(\s*properties\s*,\s*(\w+)\s*\)")
STARTUP_SYSTEM_ENV = re.compile(r'properties\.getProperty\(\s*"(\w+)"')


def git_show(repo: Path, tag: str, path: str) -> str | None:
    done = subprocess.run(
        ["git", "-C", str(repo), "show", f"{tag}:{path}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout if done.returncode == 0 else None


def setters(repo: Path, tag: str, path: str) -> dict[str, str]:
    """key -> Java parameter type, for a class and its superclasses in the same package."""
    source = git_show(repo, tag, path)
    if source is None:
        return {}
    found: dict[str, str] = {}
    parent = EXTENDS.search(source)
    if parent:
        found.update(setters(repo, tag, str(Path(path).with_name(parent.group(1) + ".java"))))
    for name, typ in SETTER.findall(source):
        key = name[0].lower() + name[1:]
        simple = typ.rsplit(".", 1)[-1]
        # an overload Java can parse (setBrokerRole(String)) wins over one it skips
        if key not in found or simple in PARSED_TYPES:
            found[key] = simple
    return found


def keys_at(repo: Path, tag: str) -> dict[str, tuple[str, str]]:
    """key -> (type, class) for one tag, checked against what BrokerStartup really fills."""
    startup = git_show(repo, tag, STARTUP)
    if startup is None:
        sys.exit(f"{tag}: {STARTUP} not found in {repo}")
    variables = {var: cls for _, var, cls in STARTUP_OBJECT.findall(startup)}
    filled = {variables[v] for v in STARTUP_FILLED.findall(startup) if v in variables}
    unknown = filled - set(CLASSES)
    if unknown:
        sys.exit(f"{tag}: BrokerStartup fills {sorted(unknown)}: add their paths to CLASSES")
    out: dict[str, tuple[str, str]] = {}
    for cls in sorted(filled):
        for key, typ in setters(repo, tag, CLASSES[cls]).items():
            if key in out:
                old_type, old_cls = out[key]
                out[key] = (_merge(old_type, typ), f"{old_cls}+{cls}")
            else:
                out[key] = (PARSED_TYPES.get(typ, typ), cls)
    for key in STARTUP_SYSTEM_ENV.findall(startup):
        out.setdefault(key, ("String", "BrokerStartup"))
    return out


def _merge(a: str, b: str) -> str:
    return "|".join(sorted({*a.split("|"), PARSED_TYPES.get(b, b)}))


def legacy_keys(repo: Path, known: set[str]) -> dict[str, str]:
    """Setters MessageStoreConfig lost in LEGACY_COMMIT (and never regained), key -> type."""
    before = setters(repo, LEGACY_COMMIT + "^", LEGACY_PATH)
    after = setters(repo, LEGACY_COMMIT, LEGACY_PATH)
    if not before:
        sys.exit(f"{LEGACY_COMMIT}^:{LEGACY_PATH} not found in {repo} (a full clone is needed)")
    return {
        key: PARSED_TYPES.get(typ, typ)
        for key, typ in before.items()
        if key not in after and key not in known
    }


def render(repo: Path, tags: list[str]) -> str:
    merged: dict[str, tuple[str, str, list[str]]] = {}
    for tag in tags:
        version = tag.removeprefix("rocketmq-all-")
        for key, (typ, cls) in keys_at(repo, tag).items():
            if key in merged:
                old_type, old_cls, versions = merged[key]
                classes = "+".join(sorted({*old_cls.split("+"), *cls.split("+")}))
                merged[key] = (_merge(old_type, typ), classes, [*versions, version])
            else:
                merged[key] = (typ, cls, [version])
    lines = [
        '"""The keys a RocketMQ broker reads from its properties file, with their value types.',
        "",
        "Generated by tools/rocketmq_config_keys.py from apache/rocketmq at",
        ", ".join(tags) + "; do not edit. One entry per public one-argument",
        "setter of the config objects the Java broker fills from broker.conf; the type is the",
        "setter's parameter type (int, long, double, float, boolean, String, or another type",
        "that Java itself does not parse).",
        '"""',
        "",
        "#: key -> (value type, RocketMQ config classes, RocketMQ versions that know the key)",
        "ROCKETMQ_KEYS: dict[str, tuple[str, str, str]] = {",
    ]
    for key in sorted(merged):
        typ, cls, versions = merged[key]
        lines.append(f'    "{key}": ("{typ}", "{cls}", "{" ".join(versions)}"),')
    lines.append("}")
    lines += [
        "",
        f"#: key -> value type: MessageStoreConfig setters removed upstream in {LEGACY_COMMIT[:10]}",
        "#: (2014); still found in published sample configs, ignored by every later Java broker",
        "LEGACY_KEYS: dict[str, str] = {",
    ]
    for key, typ in sorted(legacy_keys(repo, set(merged)).items()):
        lines.append(f'    "{key}": "{typ}",')
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="apache/rocketmq git checkout")
    parser.add_argument(
        "--tag",
        action="append",
        default=[],
        help="release tag to read (repeat); default rocketmq-all-4.9.7 and rocketmq-all-5.3.1",
    )
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--check", action="store_true", help="fail if --output is stale")
    args = parser.parse_args(argv)
    tags = args.tag or ["rocketmq-all-4.9.7", "rocketmq-all-5.3.1"]
    text = render(args.repo, tags)
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale: rerun without --check", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
