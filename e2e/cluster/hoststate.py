"""Save the host state the cluster changes, and put it back on teardown.

The kubelet sets a few kernel sysctls and adds iptables chains, kube-proxy
adds its nftables tables, the CNI plugins add network namespaces and enable
forwarding. `save` records the parts we touch before `up`; `restore` removes
only what Kubernetes and CNI added (by their names), so rules other programs
added meanwhile survive, then reports any remaining difference.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

SYSCTLS = [
    "net.ipv4.ip_forward",
    "net.ipv6.conf.all.forwarding",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
]
# Chains and tables that only Kubernetes components and CNI plugins create.
OUR_CHAIN = re.compile(r"^(KUBE-|CNI-)")
OUR_TABLES = {"kube-proxy"}
NETNS_DIR = Path("/var/run/netns")
# Host paths the kubelet, containerd and libcni use whatever their root dirs
# (device-plugin socket, log symlinks, CNI result cache, shim sockets).
HOST_PATHS = ["/var/lib/kubelet", "/var/log/containers", "/var/lib/cni", "/run/containerd"]
CNI_NETWORK = "bg-e2e"  # our conflist's name; libcni names its cache files after it
CGROUP_ROOT = Path("/sys/fs/cgroup")

Obj = dict[str, Any]


def sysctl_path(key: str) -> Path:
    return Path("/proc/sys") / key.replace(".", "/")


def read_sysctls() -> dict[str, str]:
    out = {}
    for key in SYSCTLS:
        p = sysctl_path(key)
        if p.exists():
            out[key] = p.read_text().strip()
    return out


def nft_ruleset() -> list[Obj]:
    if shutil.which("nft") is None:
        return []
    res = subprocess.run(
        ["nft", "-j", "list", "ruleset"], capture_output=True, text=True, check=True
    )
    items: list[Obj] = json.loads(res.stdout or '{"nftables": []}')["nftables"]
    return [i for i in items if "metainfo" not in i]


def legacy_rules() -> str:
    """iptables-legacy rules, without counters, for comparison only."""
    out = []
    for cmd in ("iptables-legacy-save", "ip6tables-legacy-save"):
        if shutil.which(cmd):
            res = subprocess.run([cmd], capture_output=True, text=True, check=False)
            out += [ln for ln in res.stdout.splitlines() if ln and ln[0] not in "#:"]
    return "\n".join(out)


def kubepods_cgroups() -> list[str]:
    return sorted(str(p) for p in CGROUP_ROOT.glob("*/kubepods*")) if CGROUP_ROOT.exists() else []


# What the kubelet writes (protectKernelDefaults off). Finding all of them
# before `up` means an earlier cluster's teardown never ran to the end.
KUBELET_TUNABLES = {"vm.overcommit_memory": "1", "kernel.panic": "10", "kernel.panic_on_oops": "1"}


def save(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    values = read_sysctls()
    if all(values.get(k) == v for k, v in KUBELET_TUNABLES.items()):
        print(
            "hoststate: warning: the host already has a kubelet's sysctls "
            f"({KUBELET_TUNABLES}); an earlier cluster was not torn down. "
            "They are saved as found, and `down` will put these values back.",
            file=sys.stderr,
        )
    (d / "sysctl.json").write_text(json.dumps(values, indent=1))
    (d / "nft.json").write_text(json.dumps(nft_ruleset()))
    (d / "iptables-legacy.txt").write_text(legacy_rules())
    netns = sorted(os.listdir(NETNS_DIR)) if NETNS_DIR.exists() else None
    (d / "netns.json").write_text(json.dumps(netns))
    (d / "cgroups.json").write_text(json.dumps(kubepods_cgroups()))
    (d / "paths.json").write_text(json.dumps({p: os.path.lexists(p) for p in HOST_PATHS}))


def remove_host_paths(d: Path, cluster_dir: Path) -> None:
    """Remove what our cluster left in shared host paths; remove the paths
    themselves only if they did not exist before `up`."""
    results = Path("/var/lib/cni/results")
    if results.is_dir():
        for f in results.glob(f"{CNI_NETWORK}-*"):
            f.unlink(missing_ok=True)
    logs = Path("/var/log/containers")
    if logs.is_dir():
        for link in logs.iterdir():
            if link.is_symlink() and str(os.readlink(link)).startswith(str(cluster_dir)):
                link.unlink()
    saved = d / "paths.json"
    existed: dict[str, bool] = json.loads(saved.read_text()) if saved.exists() else {}
    for path, was_there in existed.items():
        p = Path(path)
        if was_there or not p.exists() or os.path.ismount(p):
            continue
        if path == "/run/containerd":  # shared with any other containerd: only empty dirs
            for root, _dirs, _files in sorted(os.walk(p), key=lambda w: -w[0].count("/")):
                with contextlib.suppress(OSError):
                    os.rmdir(root)
        else:
            shutil.rmtree(p, ignore_errors=True)


def _jumps_to_ours(rule: Obj) -> bool:
    for e in rule.get("expr", []):
        for verdict in ("jump", "goto"):
            if verdict in e and OUR_CHAIN.match(e[verdict].get("target", "")):
                return True
    return False


def nft_cleanup(before: list[Obj]) -> None:
    """Delete Kubernetes/CNI tables, chains and rules; then tables that were
    absent before and are now empty (iptables-nft creates filter/nat/mangle)."""
    tables_before = {(t["table"]["family"], t["table"]["name"]) for t in before if "table" in t}
    now = nft_ruleset()
    cmds: list[Obj] = []
    gone: set[tuple[str, str]] = set()
    for item in now:
        t = item.get("table")
        if t and t["name"] in OUR_TABLES and (t["family"], t["name"]) not in tables_before:
            cmds.append({"delete": {"table": {"family": t["family"], "name": t["name"]}}})
            gone.add((t["family"], t["name"]))
    ours = [i["chain"] for i in now if "chain" in i and OUR_CHAIN.match(i["chain"]["name"])]
    ours = [c for c in ours if (c["family"], c["table"]) not in gone]
    for item in now:
        r = item.get("rule")
        if r is None or (r["family"], r["table"]) in gone or OUR_CHAIN.match(r["chain"]):
            continue
        if _jumps_to_ours(r):
            ref = {k: r[k] for k in ("family", "table", "chain", "handle")}
            cmds.append({"delete": {"rule": ref}})
    refs = [{k: c[k] for k in ("family", "table", "name")} for c in ours]
    cmds += [{"flush": {"chain": ref}} for ref in refs]
    cmds += [{"delete": {"chain": ref}} for ref in refs]
    _nft_batch(cmds)

    now = nft_ruleset()
    busy = {(i["rule"]["family"], i["rule"]["table"]) for i in now if "rule" in i}
    busy |= {
        (v["family"], v["table"])
        for i in now
        for k, v in i.items()
        if k in ("set", "map", "flowtable")
    }
    _nft_batch(
        [
            {"delete": {"table": {"family": t["family"], "name": t["name"]}}}
            for t in (i["table"] for i in now if "table" in i)
            if (t["family"], t["name"]) not in tables_before | busy
        ]
    )


def _nft_batch(cmds: list[Obj]) -> None:
    """Run nft commands as one JSON batch (atomic: all or nothing)."""
    if not cmds:
        return
    batch = json.dumps({"nftables": cmds})
    res = subprocess.run(["nft", "-j", "-f", "-"], input=batch, capture_output=True, text=True)
    if res.returncode != 0:
        print(f"hoststate: nft cleanup failed: {res.stderr.strip()[:500]}", file=sys.stderr)


def _normalized(items: list[Obj]) -> list[str]:
    """Ruleset without handles and counters, for a before/after comparison."""

    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {
                k: strip(v)
                for k, v in x.items()
                if k not in ("handle", "counter", "packets", "bytes")
            }
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    return sorted(json.dumps(strip(i), sort_keys=True) for i in items)


def restore(d: Path, cluster_dir: Path) -> int:
    """Put the saved state back; return the number of differences left."""
    if not (d / "sysctl.json").exists():
        print("hoststate: nothing saved, nothing to restore", file=sys.stderr)
        return 0
    problems = 0
    saved: dict[str, str] = json.loads((d / "sysctl.json").read_text())
    for key, value in saved.items():
        p = sysctl_path(key)
        if p.exists() and p.read_text().strip() != value:
            try:
                p.write_text(value + "\n")
            except OSError as e:
                print(f"hoststate: cannot restore {key}={value}: {e}", file=sys.stderr)
                problems += 1

    before: list[Obj] = json.loads((d / "nft.json").read_text())
    if shutil.which("nft"):
        nft_cleanup(before)
        after = nft_ruleset()
        # Ours left over is a failure; anything else that differs was done by
        # someone else meanwhile, so it is only reported.
        left = [
            json.dumps(i)[:200]
            for i in after
            if ("table" in i and i["table"]["name"] in OUR_TABLES)
            or ("chain" in i and OUR_CHAIN.match(i["chain"]["name"]))
        ]
        for line in left:
            print(f"hoststate: Kubernetes/CNI netfilter object left: {line}", file=sys.stderr)
        problems += len(left)
        added = set(_normalized(after)) - set(_normalized(before))
        removed = set(_normalized(before)) - set(_normalized(after))
        for line in sorted(added):
            print(
                f"hoststate: note: nftables has something new, not ours: {line[:200]}",
                file=sys.stderr,
            )
        for line in sorted(removed):
            print(
                f"hoststate: note: nftables lost something since up: {line[:200]}", file=sys.stderr
            )
    legacy = legacy_rules()
    if legacy != (d / "iptables-legacy.txt").read_text():
        ours = [ln for ln in legacy.splitlines() if re.search(r"\b(KUBE|CNI)-", ln)]
        for line in ours:
            print(f"hoststate: iptables-legacy rule left (ours?): {line}", file=sys.stderr)
        problems += len(ours)

    netns_saved: list[str] | None = json.loads((d / "netns.json").read_text())
    netns_before = set(netns_saved or [])
    if NETNS_DIR.exists():
        for name in sorted(set(os.listdir(NETNS_DIR)) - netns_before):
            if name.startswith("cni-"):  # containerd's CRI names pod namespaces so
                p = NETNS_DIR / name
                subprocess.run(["umount", str(p)], capture_output=True)
                p.unlink(missing_ok=True)
        if netns_saved is None and not os.listdir(NETNS_DIR):
            NETNS_DIR.rmdir()

    remove_host_paths(d, cluster_dir)

    cg_before = set(json.loads((d / "cgroups.json").read_text()))
    for top in kubepods_cgroups():
        if top in cg_before:
            continue
        # Leaf first: cgroup directories go with rmdir, never with rm -r.
        for root, _dirs, _files in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
            try:
                os.rmdir(root)
            except OSError as e:
                print(f"hoststate: cannot remove cgroup {root}: {e}", file=sys.stderr)
                problems += 1
    return problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["save", "restore"])
    ap.add_argument("dir", type=Path)
    ap.add_argument(
        "--cluster-dir", type=Path, default=None, help="the cluster's state dir (restore)"
    )
    args = ap.parse_args()
    if args.action == "save":
        save(args.dir)
    else:
        cluster_dir = args.cluster_dir or args.dir.resolve().parent
        sys.exit(1 if restore(args.dir, cluster_dir) else 0)


if __name__ == "__main__":
    main()
