"""SecretFile: a credential a broker reads from a file (a mounted Kubernetes Secret).

The admin token (``adminTokenFile``) and the HA group secret (``haAuthSecretFile``) are both
read here: surrounding whitespace stripped, a minimum length enforced, and read again when the
file's modification time or size changes, so a rotated Secret reaches a running pod.  The value
is never logged; errors name the key and the path only.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from habroker.config import ConfigError

log = logging.getLogger(__name__)


class SecretFile:
    """The content of ``path``; ``key`` names the config key in messages, ``error`` is raised
    (a ConfigError) when the file is missing, unreadable or shorter than ``min_size``."""

    def __init__(
        self, path: str | Path, key: str, error: type[ConfigError], min_size: int = 1
    ) -> None:
        self.path = Path(path)
        self.key = key
        self.error = error
        self.min_size = min_size
        self._stamp: tuple[int, int] | None = None
        self._value = b""
        self.value()  # checked at startup: a broker never starts with an unusable file

    def value(self) -> bytes:
        """The current content, read again if the file changed since the last look."""
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return self._value
            value = self.path.read_bytes().strip()
        except OSError as exc:
            raise self.error(f"{self.key}={self.path}: {exc.strerror or exc}") from None
        if not value:
            raise self.error(f"{self.key}={self.path}: the file is empty")
        if len(value) < self.min_size:
            raise self.error(
                f"{self.key}={self.path}: a secret of at least {self.min_size} bytes is needed "
                f"(found {len(value)})"
            )
        if self._stamp is not None:
            log.info("%s re-read from %s", self.key, self.path)
        self._stamp, self._value = stamp, value
        return value
