"""The admin token of each group: what the operator shows a broker's ``/v1/admin/*``.

One operator key (a Secret the chart creates in the operator's namespace, mounted as a file:
``BROKERGROUP_ADMIN_KEY_FILE``) and, per group, HMAC-SHA256(key, "<namespace>/<name>/<uid>"):
the operator derives every group's token again after a restart without reading any Secret, so
its RBAC on Secrets is create and patch only (it writes the group's token Secret, which the
broker pods mount, and can read none).  A group deleted and created again gets a new token
(a new uid).  Without a key file the operator runs its brokers without admin authentication
and says so at startup (development setups; the chart always sets one).

The group's HA secret (the authenticated HA handshake between its brokers) is derived the same
way over ``ha:<namespace>/<name>/<uid>``.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path


class AdminKeyError(ValueError):
    """The key file cannot be used."""


def load_key(path: str) -> bytes:
    try:
        key = Path(path).read_bytes().strip()
    except OSError as exc:
        raise AdminKeyError(f"BROKERGROUP_ADMIN_KEY_FILE={path}: {exc.strerror or exc}") from None
    if len(key) < 16:
        raise AdminKeyError(
            f"BROKERGROUP_ADMIN_KEY_FILE={path}: a key of at least 16 bytes is needed"
        )
    return key


def group_token(key: bytes, namespace: str, name: str, uid: str) -> str:
    return hmac.new(key, f"{namespace}/{name}/{uid}".encode(), hashlib.sha256).hexdigest()


def group_ha_secret(key: bytes, namespace: str, name: str, uid: str) -> str:
    """The group's HA secret (``haAuthSecretFile``): the same key over a different label, so it
    never equals the admin token and one does not give away the other."""
    return hmac.new(key, f"ha:{namespace}/{name}/{uid}".encode(), hashlib.sha256).hexdigest()
