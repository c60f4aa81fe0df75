"""Kubernetes writes the operator makes besides kopf's own (status patches, Events).

lightkube's AsyncClient: server-side apply is a first-class call (``PatchType.APPLY`` with a
field manager), it is asyncio-native like kopf, and it is small (no generated client of every
API group loaded at import, which matters for the operator's memory goal). Reads never go through
here: pods and StatefulSets come from kopf indexes fed by watches, so a status sweep costs the
apiserver no requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.core.resource import NamespacedResource
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apps_v1 import StatefulSet
from lightkube.resources.core_v1 import ConfigMap, PersistentVolumeClaim, Pod, Secret, Service
from lightkube.resources.networking_v1 import NetworkPolicy
from lightkube.resources.policy_v1 import PodDisruptionBudget
from lightkube.types import PatchType

from . import FIELD_MANAGER, GROUP, KIND, PLURAL, VERSION

BrokerGroup = create_namespaced_resource(GROUP, VERSION, KIND, PLURAL)

KINDS: dict[str, type[NamespacedResource]] = {
    "ConfigMap": ConfigMap,
    "Service": Service,
    "StatefulSet": StatefulSet,
    "PodDisruptionBudget": PodDisruptionBudget,
    "NetworkPolicy": NetworkPolicy,
    # a group's admin token: applied (create, patch), never read (admin_token.py)
    "Secret": Secret,
}


class Kube:
    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self.requests = 0  # counted for the benchmark

    @classmethod
    def from_env(cls) -> Kube:
        """In-cluster service account first, then $KUBECONFIG / ~/.kube/config."""
        return cls(AsyncClient(config=KubeConfig.from_env(), field_manager=FIELD_MANAGER))

    async def apply(self, manifest: Mapping[str, Any]) -> str:
        """Server-side apply: idempotent, and fields other managers own are left alone.

        ``force`` takes over fields a human changed with kubectl on our children: the
        BrokerGroup is the source of truth for everything the operator sets. Returns the
        object's resourceVersion afterwards (unchanged when the apply changed nothing).
        """
        meta = manifest["metadata"]
        self.requests += 1
        applied = await self._client.patch(
            KINDS[manifest["kind"]],
            meta["name"],
            dict(manifest),
            namespace=meta["namespace"],
            patch_type=PatchType.APPLY,
            field_manager=FIELD_MANAGER,
            force=True,
        )
        meta = getattr(applied, "metadata", None)
        return str(getattr(meta, "resourceVersion", "") or "")

    async def group_alive(self, namespace: str, name: str, uid: str) -> bool:
        """Whether this very BrokerGroup (same uid) exists and is not being deleted: the
        garbage collector deletes children after their owner, and those must stay deleted."""
        self.requests += 1
        try:
            group = await self._client.get(BrokerGroup, name, namespace=namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return False
            raise
        meta = group.metadata
        return meta is not None and meta.uid == uid and meta.deletionTimestamp is None

    async def delete_pod(self, namespace: str, name: str) -> bool:
        """Delete one pod (a rolling step); False if it was already gone."""
        return await self._delete(Pod, namespace, name)

    async def delete_service(self, namespace: str, name: str) -> bool:
        """Delete a Service of ours the group no longer wants (a removed slave's external
        door); False if it was already gone."""
        return await self._delete(Service, namespace, name)

    async def _delete(self, kind: type[NamespacedResource], namespace: str, name: str) -> bool:
        self.requests += 1
        try:
            await self._client.delete(kind, name, namespace=namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return False
            raise
        return True

    async def patch_group_status(
        self, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        """Merge-patch ``.status`` of a BrokerGroup now (the failover assignment must be
        durable before any broker hears of a new epoch; kopf's own patch comes too late)."""
        self.requests += 1
        await self._client.patch(
            BrokerGroup.Status,
            name,
            {"status": dict(status)},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )

    async def annotate_group(
        self, namespace: str, name: str, annotations: Mapping[str, Any]
    ) -> None:
        """Set or (value None) remove annotations of a BrokerGroup (a finished switchover)."""
        self.requests += 1
        await self._client.patch(
            BrokerGroup,
            name,
            {"metadata": {"annotations": dict(annotations)}},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )

    async def resize_claim(self, namespace: str, name: str, size: str) -> None:
        """Ask a PersistentVolumeClaim for more storage (merge patch of its request; the
        apiserver refuses when the StorageClass does not allow expansion)."""
        self.requests += 1
        await self._client.patch(
            PersistentVolumeClaim,
            name,
            {"spec": {"resources": {"requests": {"storage": size}}}},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )

    async def label_pod(self, namespace: str, name: str, labels: Mapping[str, str]) -> bool:
        """Merge labels into a pod (its role, which the client Service selects); False if the
        pod is gone."""
        self.requests += 1
        try:
            await self._client.patch(
                Pod,
                name,
                {"metadata": {"labels": dict(labels)}},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )
        except ApiError as exc:
            if exc.status.code == 404:
                return False
            raise
        return True

    async def close(self) -> None:
        await self._client.close()
