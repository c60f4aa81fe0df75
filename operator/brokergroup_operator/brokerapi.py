"""The few habroker admin calls the operator makes (see docs/http-api.md), over aiohttp.

One ClientSession for the whole operator (connection reuse across groups), a timeout on every
request, and a semaphore bounding how many requests are in flight at once so a sweep over many
groups cannot open hundreds of sockets or starve the event loop that also runs kopf's watches.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any
from urllib.parse import quote

import aiohttp

JSON = dict[str, Any]


class BrokerAPIError(Exception):
    """A broker call failed: unreachable, timed out, or answered with an error."""

    def __init__(self, message: str, http_status: int | None = None) -> None:
        super().__init__(message)
        #: the broker's HTTP status when it answered (None: it could not be reached)
        self.http_status = http_status


class BrokerAPI:
    def __init__(
        self, session: aiohttp.ClientSession, timeout: float = 2.0, concurrency: int = 32
    ) -> None:
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._limit = asyncio.Semaphore(concurrency)
        self._headers: dict[str, str] = {}
        self._root = self
        self.requests = 0  # counted for the benchmark (on the root, for every group's view)

    def with_token(self, token: str | None) -> BrokerAPI:
        """The same client (session, limit, counter) sending one group's admin token."""
        if token is None:
            return self
        view = copy.copy(self)
        view._headers = {"Authorization": f"Bearer {token}"}
        return view

    async def _call(
        self,
        method: str,
        address: str,
        path: str,
        body: JSON | None = None,
        seconds: float | None = None,
    ) -> Any:
        url = f"http://{address}{path}"
        limit = self._timeout if seconds is None else aiohttp.ClientTimeout(total=seconds)
        async with self._limit:
            self._root.requests += 1
            try:
                async with self._session.request(
                    method, url, json=body, timeout=limit, headers=self._headers
                ) as resp:
                    if resp.status >= 400:
                        text = (await resp.text())[:300]
                        raise BrokerAPIError(
                            f"{method} {path}: HTTP {resp.status}: {text}", resp.status
                        )
                    if resp.content_type == "application/json":
                        return await resp.json()
                    return await resp.text()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise BrokerAPIError(f"{method} {path}: {type(exc).__name__}: {exc}") from None

    async def status(self, address: str) -> JSON:
        result = await self._call("GET", address, "/v1/status")
        if not isinstance(result, dict):
            raise BrokerAPIError("GET /v1/status: not a JSON object")
        return result

    async def set_master_address(self, address: str, body: JSON) -> None:
        await self._call("PUT", address, "/v1/admin/master-address", body)

    async def set_external_addresses(self, address: str, addrs: dict[int, str]) -> None:
        body = {"brokerAddrs": {str(k): v for k, v in sorted(addrs.items())}}
        await self._call("PUT", address, "/v1/admin/external-addresses", body)

    async def set_external_peer_addresses(self, address: str, addrs: dict[str, str]) -> None:
        """A DLedger peer's map, by dLegerSelfId (brokerIds follow the leader: the peer maps
        them when it answers a route)."""
        body = {"peerAddrs": dict(sorted(addrs.items()))}
        await self._call("PUT", address, "/v1/admin/external-addresses", body)

    async def patch_config(self, address: str, body: JSON) -> None:
        await self._call("PATCH", address, "/v1/admin/config", body)

    async def subscription_groups(self, address: str) -> dict[str, JSON]:
        result = await self._call("GET", address, "/v1/subscription-groups")
        table = result.get("subscriptionGroupTable") if isinstance(result, dict) else None
        return dict(table or {})

    async def put_subscription_group(self, address: str, group: str, body: JSON) -> None:
        await self._call("PUT", address, f"/v1/subscription-groups/{quote(group, safe='')}", body)

    async def role(self, address: str) -> JSON:
        result = await self._call("GET", address, "/v1/admin/role")
        if not isinstance(result, dict):
            raise BrokerAPIError("GET /v1/admin/role: not a JSON object")
        return result

    async def set_role(self, address: str, body: JSON) -> JSON:
        """``PUT /v1/admin/role``: master or slave at an epoch (failover, switchover)."""
        result = await self._call("PUT", address, "/v1/admin/role", body)
        return result if isinstance(result, dict) else {}

    async def fence(self, address: str, epoch: int) -> JSON:
        """``POST /v1/admin/fence``: refuse writes from now on; returns the broker's maxOffset."""
        result = await self._call("POST", address, "/v1/admin/fence", {"epoch": epoch})
        return result if isinstance(result, dict) else {}

    async def set_dledger_peers(self, address: str, peers: str) -> JSON:
        """``PUT /v1/admin/dledger/peers``: a DLEDGER peer's new membership (one peer added or
        removed); answers the membership it now holds."""
        result = await self._call("PUT", address, "/v1/admin/dledger/peers", {"peers": peers})
        return result if isinstance(result, dict) else {}

    async def leadership_transfer(
        self, address: str, transferee_id: str, seconds: float = 15.0
    ) -> JSON:
        """``POST /v1/admin/dledger/leadership-transfer`` on a DLEDGER group's leader: answers
        200 once ``transferee_id`` leads (an election's length), 409 when the broker is not a
        DLedger leader."""
        result = await self._call(
            "POST",
            address,
            "/v1/admin/dledger/leadership-transfer",
            {"transfereeId": transferee_id},
            seconds=seconds,
        )
        return result if isinstance(result, dict) else {}
