"""Save the host state the cluster may change, put it back on teardown, and prove it is back.

The cluster lives in network namespaces of its own, so its links, addresses, routes and
netfilter rules never touch the host's namespace. What still reaches the host: the kubelets
set a few global kernel sysctls, containerd mounts pod namespaces under /run/netns, the
kubelets make cgroups and use a few fixed host paths, and `up` adds "unreachable" routes for
the cluster's ranges while it runs.

    save DIR             record what `down` restores (before `up`)
    restore DIR          put it back; exit 1 if anything of the cluster's is left
    snapshot FILE        the host's network and kernel state, for a before/after comparison
    kill-leftovers       kill processes of ours that outlived containerd (shims, pods)

`restore` removes only what the cluster made (by its names), so what other programs did
meanwhile survives; `e2e/hostcheck` compares two snapshots.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import re
import shutil
import signal
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
NETNS_DIR = Path("/run/netns")
OUR_NETNS = re.compile(r"^(bg-e2e-|cni-)")  # ours, and containerd's names for pod namespaces
# Host paths the kubelet, containerd and libcni use whatever their root dirs
# (device-plugin socket, log symlinks, CNI result cache, shim sockets).
HOST_PATHS = ["/var/lib/kubelet", "/var/log/containers", "/var/lib/cni", "/run/containerd"]
CNI_NETWORK = "bg-e2e"  # our conflist's name; libcni names its cache files after it
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_GLOBS = ("*/bg-e2e-node*", "*/kubepods*")  # each kubelet's cgroupRoot; the old layout's
# The cluster's address ranges (lib.sh): nothing of these may stay on the host.
CLUSTER_RANGES = [
    ipaddress.ip_network(r) for r in ("10.201.0.0/24", "10.244.0.0/16", "10.96.0.0/16")
]

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


def ipset_names() -> list[str]:
    """The host's ipsets (kube-router makes its own only inside the node namespaces)."""
    if shutil.which("ipset") is None:
        return []
    res = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True, check=False)
    return sorted(res.stdout.split())


def our_cgroups() -> list[str]:
    if not CGROUP_ROOT.exists():
        return []
    return sorted({str(p) for g in CGROUP_GLOBS for p in CGROUP_ROOT.glob(g)})


def mount_points() -> list[str]:
    """Every mount point of this mount namespace (as /proc/self/mountinfo has them)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        out.append(fields[4].replace("\\040", " "))
    return out


def netns_names() -> list[str] | None:
    return sorted(os.listdir(NETNS_DIR)) if NETNS_DIR.exists() else None


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
    (d / "netns.json").write_text(json.dumps(netns_names()))
    (d / "netns-mounted.json").write_text(json.dumps(str(NETNS_DIR) in mount_points()))
    (d / "cgroups.json").write_text(json.dumps(our_cgroups()))
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
    """Delete Kubernetes/CNI tables, chains and rules in the host's namespace (none are made
    there any more: a safety net); then tables that were absent before and are now empty."""
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


def _nft_batch(cmds: list[Obj]) -> None:
    """Run nft commands as one JSON batch (atomic: all or nothing)."""
    if not cmds:
        return
    batch = json.dumps({"nftables": cmds})
    res = subprocess.run(["nft", "-j", "-f", "-"], input=batch, capture_output=True, text=True)
    if res.returncode != 0:
        print(f"hoststate: nft cleanup failed: {res.stderr.strip()[:500]}", file=sys.stderr)


def normalized_nft(items: list[Obj]) -> list[str]:
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


def remove_pod_netns(netns_before: set[str]) -> None:
    """containerd's pod namespaces (cni-*) made since `up`: unmount and remove."""
    if not NETNS_DIR.exists():
        return
    for name in sorted(set(os.listdir(NETNS_DIR)) - netns_before):
        if name.startswith("cni-"):
            p = NETNS_DIR / name
            subprocess.run(["umount", str(p)], capture_output=True)
            p.unlink(missing_ok=True)


def restore(d: Path, cluster_dir: Path) -> int:
    """Put the saved state back; return the number of things of the cluster's left."""
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
        left = [
            json.dumps(i)[:200]
            for i in nft_ruleset()
            if ("table" in i and i["table"]["name"] in OUR_TABLES)
            or ("chain" in i and OUR_CHAIN.match(i["chain"]["name"]))
        ]
        for line in left:
            print(f"hoststate: Kubernetes/CNI netfilter object left: {line}", file=sys.stderr)
        problems += len(left)
    legacy = legacy_rules()
    if legacy != (d / "iptables-legacy.txt").read_text():
        ours = [ln for ln in legacy.splitlines() if re.search(r"\b(KUBE|CNI)-", ln)]
        for line in ours:
            print(f"hoststate: iptables-legacy rule left (ours?): {line}", file=sys.stderr)
        problems += len(ours)

    netns_saved: list[str] | None = json.loads((d / "netns.json").read_text())
    remove_pod_netns(set(netns_saved or []))
    mounted_before = (d / "netns-mounted.json").exists() and json.loads(
        (d / "netns-mounted.json").read_text()
    )
    if NETNS_DIR.exists() and not os.listdir(NETNS_DIR):
        # `ip netns add` makes /run/netns a (shared) mount point; undo that if it was not one
        if not mounted_before and str(NETNS_DIR) in mount_points():
            subprocess.run(["umount", str(NETNS_DIR)], capture_output=True)
        if netns_saved is None:
            with contextlib.suppress(OSError):
                NETNS_DIR.rmdir()
    for name in netns_names() or []:
        if OUR_NETNS.match(name) and name not in (netns_saved or []):
            print(f"hoststate: network namespace left: {name}", file=sys.stderr)
            problems += 1

    remove_host_paths(d, cluster_dir)

    cg_before = set(json.loads((d / "cgroups.json").read_text()))
    for top in our_cgroups():
        if top in cg_before:
            continue
        # Leaf first: cgroup directories go with rmdir, never with rm -r.
        for root, _dirs, _files in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
            try:
                os.rmdir(root)
            except OSError as e:
                print(f"hoststate: cannot remove cgroup {root}: {e}", file=sys.stderr)
                problems += 1

    for kind, items in ours_in(snapshot()).items():
        for item in items:
            print(f"hoststate: the cluster's {kind} left on the host: {item}", file=sys.stderr)
            problems += 1
    return problems


# -- snapshot: the host's state for a before/after comparison (e2e/hostcheck) ---------------
SYSCTL_TREES = ["net/ipv4", "net/ipv6/conf/all", "net/ipv6/conf/default", "net/bridge", "net/core"]
SYSCTL_SKIP = re.compile(r"(count|_seq$|random|boot_id|uuid|/neigh/|flush|stable_secret)")


def all_sysctls() -> dict[str, str]:
    """Every readable sysctl of the host's network namespace under SYSCTL_TREES, plus the
    global ones the kubelet writes."""
    out: dict[str, str] = {}
    root = Path("/proc/sys")
    for tree in SYSCTL_TREES:
        base = root / tree
        if not base.exists():
            continue
        for p in sorted(base.rglob("*")):
            rel = str(p.relative_to(root))
            if not p.is_file() or SYSCTL_SKIP.search(rel):
                continue
            with contextlib.suppress(OSError):
                out[rel.replace("/", ".")] = " ".join(p.read_text().split())
    out.update(read_sysctls())
    return out


def _ip_json(*args: str) -> list[Obj]:
    res = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True)
    items: list[Obj] = json.loads(res.stdout or "[]")
    return items


def snapshot() -> Obj:
    addresses = sorted(
        f"{link['ifname']} {a['local']}/{a['prefixlen']}"
        for link in _ip_json("addr", "show")
        for a in link.get("addr_info", [])
    )
    routes = sorted(
        json.dumps({k: v for k, v in r.items() if k not in ("expires", "cache")}, sort_keys=True)
        for family in ("-4", "-6")
        for r in _ip_json(family, "route", "show", "table", "all")
    )
    rules = sorted(
        json.dumps(r, sort_keys=True) for f in ("-4", "-6") for r in _ip_json(f, "rule", "show")
    )
    links = sorted(f"{link['ifname']} {link.get('link_type', '')}" for link in _ip_json("link"))
    return {
        "addresses": addresses,
        "routes": routes,
        "rules": rules,
        "links": links,
        "nftables": normalized_nft(nft_ruleset()),
        "iptables-legacy": legacy_rules().splitlines(),
        "ipsets": ipset_names(),
        "sysctls": [f"{k}={v}" for k, v in sorted(all_sysctls().items())],
        "mounts": sorted(mount_points()),
        "netns": netns_names() or [],
        "cgroups": our_cgroups(),
    }


def _in_cluster_ranges(text: str) -> bool:
    for token in re.findall(r"[0-9a-f.:]+/\d+|\d+\.\d+\.\d+\.\d+", text):
        with contextlib.suppress(ValueError):
            net = ipaddress.ip_network(token, strict=False)
            if any(net.version == r.version and net.overlaps(r) for r in CLUSTER_RANGES):
                return True
    return False


def is_ours(kind: str, item: str) -> bool:
    """Does this piece of host state belong to the cluster (by its names and addresses)?"""
    if kind in ("addresses", "routes", "rules"):
        return _in_cluster_ranges(item) or "bg-e2e" in item
    if kind == "links":
        return item.split()[0].startswith(("bg-", "cni0"))
    if kind == "nftables":
        return bool(re.search(r'"(KUBE-|CNI-|kube-proxy)', item))
    if kind == "iptables-legacy":
        return bool(re.search(r"\b(KUBE|CNI)-", item))
    if kind == "ipsets":
        return item.startswith(("KUBE-", "kube-router"))
    if kind in ("mounts", "netns"):
        name = item.rsplit("/", 1)[-1]
        return "/.cluster/" in item or "bg-e2e" in item or bool(OUR_NETNS.match(name))
    return kind == "cgroups"  # only our kubelets' cgroups are listed


def ours_in(snap: Obj) -> dict[str, list[str]]:
    """Whatever of the cluster's is in a snapshot (of a host without a running cluster)."""
    out: dict[str, list[str]] = {}
    for kind, items in snap.items():
        mine = [i for i in items if kind != "sysctls" and is_ours(kind, i)]
        if mine:
            out[kind] = mine
    return out


def kill_leftovers(cluster_dir: Path, cgroup_prefix: str) -> int:
    """SIGKILL processes of the cluster's that outlived containerd: shims serving our
    sockets (our state dir on their command line) and processes in our kubelets' cgroups."""
    me = os.getpid()
    killed = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == me:
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cgroups = (proc / "cgroup").read_text()
        except OSError:
            continue
        shim = "containerd-shim" in cmdline and str(cluster_dir) in cmdline
        in_pod = any(
            line.split(":", 2)[-1].startswith(cgroup_prefix) for line in cgroups.splitlines()
        )
        if shim or in_pod:
            with contextlib.suppress(OSError):
                os.kill(int(proc.name), signal.SIGKILL)
                killed += 1
    if killed:
        print(f"hoststate: killed {killed} leftover process(es) of the cluster", file=sys.stderr)
    return killed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["save", "restore", "snapshot", "kill-leftovers"])
    ap.add_argument("path", type=Path, nargs="?", help="DIR (save, restore) or FILE (snapshot)")
    ap.add_argument("--cluster-dir", type=Path, default=None, help="the cluster's state dir")
    ap.add_argument("--cgroup-prefix", default="/bg-e2e-node", help="kill-leftovers")
    args = ap.parse_args()
    if args.action == "kill-leftovers":
        if args.cluster_dir is None:
            ap.error("kill-leftovers needs --cluster-dir")
        kill_leftovers(args.cluster_dir.resolve(), args.cgroup_prefix)
        return
    if args.path is None:
        ap.error(f"{args.action} needs a path")
    if args.action == "save":
        save(args.path)
    elif args.action == "snapshot":
        args.path.parent.mkdir(parents=True, exist_ok=True)
        args.path.write_text(json.dumps(snapshot(), indent=1))
    else:
        cluster_dir = args.cluster_dir or args.path.resolve().parent
        sys.exit(1 if restore(args.path, cluster_dir) else 0)


if __name__ == "__main__":
    main()
