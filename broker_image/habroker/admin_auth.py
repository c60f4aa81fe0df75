"""AdminToken: the bearer token that guards ``/v1/admin/*`` when ``adminTokenFile`` is set.

The operator creates one random token per group in a Kubernetes Secret, mounts it into every
broker pod and sends it with each admin call; nobody else has it.  The file is read again when
it changes (a rotated Secret reaches the pod without a restart).  The token itself is never
logged or shown in any answer.
"""

from __future__ import annotations

import hmac
import logging
from pathlib import Path

from habroker.config import ConfigError
from habroker.secret_file import SecretFile

log = logging.getLogger(__name__)

ADMIN_PREFIX = "/v1/admin/"


class AdminTokenError(ConfigError):
    """The token file cannot be used (missing, unreadable or empty)."""


class AdminToken:
    def __init__(self, path: str | Path) -> None:
        self.file = SecretFile(path, "adminTokenFile", AdminTokenError)
        self.path = self.file.path
        self.refused = 0

    def accepts(self, authorization: str | None) -> bool:
        """True for ``Authorization: Bearer <token>`` with the current token."""
        try:
            token = self.file.value()
        except AdminTokenError as exc:
            log.error("%s; refusing admin calls until it is fixed", exc)
            return False
        scheme, _, given = (authorization or "").partition(" ")
        ok = scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token)
        if not ok:
            self.refused += 1
        return ok
