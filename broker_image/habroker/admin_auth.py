"""AdminToken: the bearer token that guards ``/v1/admin/*`` when ``adminTokenFile`` is set.

The operator creates one random token per group in a Kubernetes Secret, mounts it into every
broker pod and sends it with each admin call; nobody else has it.  The file is read again when
it changes (a rotated Secret reaches the pod without a restart).  The token itself is never
logged or shown in any answer.
"""

from __future__ import annotations

import hmac
import logging
import os
from pathlib import Path

from habroker.config import ConfigError

log = logging.getLogger(__name__)

ADMIN_PREFIX = "/v1/admin/"


class AdminTokenError(ConfigError):
    """The token file cannot be used (missing, unreadable or empty)."""


class AdminToken:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._token = b""
        self.refused = 0
        self._load()

    def _load(self) -> None:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return
            token = self.path.read_bytes().strip()
        except OSError as exc:
            raise AdminTokenError(f"adminTokenFile={self.path}: {exc.strerror or exc}") from None
        if not token:
            raise AdminTokenError(f"adminTokenFile={self.path}: the file is empty")
        if self._stamp is not None:
            log.info("admin token re-read from %s", self.path)
        self._stamp, self._token = stamp, token

    def accepts(self, authorization: str | None) -> bool:
        """True for ``Authorization: Bearer <token>`` with the current token."""
        try:
            self._load()
        except AdminTokenError as exc:
            log.error("%s; refusing admin calls until it is fixed", exc)
            return False
        scheme, _, given = (authorization or "").partition(" ")
        ok = scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), self._token)
        if not ok:
            self.refused += 1
        return ok
