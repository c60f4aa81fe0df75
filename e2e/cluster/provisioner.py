"""A minimal dynamic volume provisioner for the local e2e cluster.

Kind ships a local-path provisioner; this gives our binary-built cluster the
same behaviour: a PVC of the default class gets a `local` PersistentVolume
backed by a fresh directory under the cluster's state dir, and the directory
goes away when the claim is deleted; a grown claim is resized (the class allows expansion:
the provisioner is its resizer too). The volume belongs to the node the
scheduler chose for the claim's first pod (WaitForFirstConsumer): its node
affinity pins the claim, and so the pod, to that node, as kind's local-path
does. It runs in the control plane's network namespace (no image needed) and
talks to the apiserver with its own client certificate, using only the
standard library.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

PROVISIONER = "e2e.brokergroup.io/local-dir"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"

Obj = dict[str, Any]
log = logging.getLogger("provisioner")


class Api:
    """Just enough of the Kubernetes REST API: JSON in, JSON out."""

    def __init__(self, server: str, pki: Path) -> None:
        self.server = server.rstrip("/")
        self.ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ctx.load_cert_chain(str(pki / "provisioner.crt"), str(pki / "provisioner.key"))

    def call(self, method: str, path: str, body: Obj | None = None) -> Obj:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            kind = "merge-patch+json" if method == "PATCH" else "json"
            req.add_header("Content-Type", f"application/{kind}")
        with urllib.request.urlopen(req, context=self.ctx, timeout=10) as resp:
            result: Obj = json.load(resp)
            return result


def our_classes(api: Api) -> dict[str, Obj]:
    items = api.call("GET", "/apis/storage.k8s.io/v1/storageclasses")["items"]
    return {sc["metadata"]["name"]: sc for sc in items if sc.get("provisioner") == PROVISIONER}


def wants_volume(pvc: Obj, classes: dict[str, Obj]) -> Obj | None:
    """Return the claim's class if this claim is ours and ready to provision."""
    spec, meta = pvc["spec"], pvc["metadata"]
    sc = classes.get(spec.get("storageClassName") or "")
    if sc is None or spec.get("volumeName") or pvc.get("status", {}).get("phase") != "Pending":
        return None
    if meta.get("deletionTimestamp") or spec.get("volumeMode", "Filesystem") != "Filesystem":
        return None
    if SELECTED_NODE not in meta.get("annotations", {}):
        return None  # our class waits for the first consumer: the scheduler names the node
    return sc


def provision(api: Api, pvc: Obj, sc: Obj, volumes: Path) -> None:
    meta = pvc["metadata"]
    node = meta["annotations"][SELECTED_NODE]
    name = f"pvc-{meta['uid']}"
    path = volumes / node / name
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o777)  # like kind's local-path: non-root pods can write without fsGroup
    pv: Obj = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER}},
        "spec": {
            "capacity": {"storage": pvc["spec"]["resources"]["requests"]["storage"]},
            "accessModes": pvc["spec"].get("accessModes") or ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy", "Delete"),
            "storageClassName": sc["metadata"]["name"],
            "volumeMode": "Filesystem",
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "local": {"path": str(path)},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": [node],
                                }
                            ]
                        }
                    ]
                }
            },
        },
    }
    try:
        api.call("POST", "/api/v1/persistentvolumes", pv)
        log.info("provisioned %s for %s/%s", name, meta["namespace"], meta["name"])
    except urllib.error.HTTPError as e:
        if e.code != 409:  # already created on an earlier pass
            raise


def reclaim(api: Api, pv: Obj, volumes: Path) -> None:
    """Delete a released volume of ours: its directory, then the object."""
    name = pv["metadata"]["name"]
    path = Path(pv["spec"].get("local", {}).get("path", ""))
    if path.parent.parent == volumes and path.name == name:
        shutil.rmtree(path, ignore_errors=True)
    try:
        api.call("DELETE", f"/api/v1/persistentvolumes/{name}")
        log.info("deleted released volume %s", name)
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise


def _bytes(quantity: str) -> float:
    """A storage quantity in bytes (enough of the format for sizes: 64Mi, 1Gi, 500M, 1024)."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    return float(quantity)


def resize(api: Api, pvc: Obj, pvs: dict[str, Obj]) -> None:
    """The external resizer's job for our volumes: a bound claim that asks for more than its
    volume holds gets it (the volume's capacity, then the claim's). A directory has no size,
    so there is no filesystem to grow."""
    meta, spec = pvc["metadata"], pvc["spec"]
    pv = pvs.get(spec.get("volumeName") or "")
    if pv is None or pvc.get("status", {}).get("phase") != "Bound":
        return
    if pv["metadata"].get("annotations", {}).get(PROVISIONED_BY) != PROVISIONER:
        return
    want = spec["resources"]["requests"]["storage"]
    have = pvc["status"].get("capacity", {}).get("storage", "0")
    if _bytes(want) <= _bytes(have):
        return
    api.call(
        "PATCH",
        f"/api/v1/persistentvolumes/{pv['metadata']['name']}",
        {"spec": {"capacity": {"storage": want}}},
    )
    api.call(
        "PATCH",
        f"/api/v1/namespaces/{meta['namespace']}/persistentvolumeclaims/{meta['name']}/status",
        {"status": {"capacity": {"storage": want}}},
    )
    log.info("resized %s/%s from %s to %s", meta["namespace"], meta["name"], have, want)


def sync_once(api: Api, volumes: Path) -> None:
    classes = our_classes(api)
    pvs = {
        pv["metadata"]["name"]: pv for pv in api.call("GET", "/api/v1/persistentvolumes")["items"]
    }
    for pvc in api.call("GET", "/api/v1/persistentvolumeclaims")["items"]:
        sc = wants_volume(pvc, classes)
        if sc is not None:
            provision(api, pvc, sc, volumes)
        else:
            resize(api, pvc, pvs)
    for pv in api.call("GET", "/api/v1/persistentvolumes")["items"]:
        ours = pv["metadata"].get("annotations", {}).get(PROVISIONED_BY) == PROVISIONER
        released = pv.get("status", {}).get("phase") in ("Released", "Failed")
        if ours and released and pv["spec"].get("persistentVolumeReclaimPolicy") == "Delete":
            reclaim(api, pv, volumes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--pki-dir", type=Path, required=True)
    ap.add_argument("--volumes-dir", type=Path, required=True)
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    api = Api(args.server, args.pki_dir)
    volumes: Path = args.volumes_dir.resolve()
    volumes.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            sync_once(api, volumes)
        except (OSError, urllib.error.URLError, KeyError, ValueError) as e:
            log.warning("sync failed, retrying: %s", e)
        time.sleep(args.interval)


if __name__ == "__main__":
    main()
