"""The authenticated HA handshake (habroker's, optional): both ends prove they hold the group's
secret before the classic protocol starts on the connection.

With ``haAuthSecretFile`` set, a master and its slaves exchange three fixed-size frames right
after the TCP connect, before the slave's first offset report (docs/wire-layouts.md):

1. master → slave CHALLENGE: header, 32-byte random nonce ``Nm``;
2. slave → master RESPONSE: header, 32-byte random nonce ``Ns``, ``proof("slave")``;
3. master → slave PROOF: header, ``proof("master")`` (sent only once the slave's proof checked).

``proof(role) = HMAC-SHA256(secret, LABEL || role || 0x00 || brokerName || 0x00 || Nm || Ns)``:
each side proves itself over both nonces, so a proof is good for one connection and one
direction only (no replay, no reflection), and a secret shared by several groups still does
not let a slave of one replicate from another. Proofs are compared in constant time. Any
mismatch, a frame that is not the handshake (a classic slave's offset report) or silence for
``HANDSHAKE_TIMEOUT`` seconds ends the connection. The master speaks first: a slave that sent
first would make a classic master (a Java one) take the bytes for an offset report, i.e. an
acknowledgement.

The secret never travels and is never logged; what the handshake does not give (no encryption,
no integrity of the frames that follow) is in docs/security.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import socket
import struct
from collections.abc import Coroutine
from pathlib import Path

from habroker.config import ConfigError
from habroker.ha.protocol import PeerClosed, ProtocolError, send_all
from habroker.secret_file import SecretFile

log = logging.getLogger(__name__)

MAGIC = b"HBHA"
VERSION = 1
CHALLENGE, RESPONSE, PROOF = 1, 2, 3
HEADER = struct.Struct(">4sBBHi")
"""Every handshake frame starts with: magic ``HBHA``, version, frame type, reserved (0), and
``NOT_A_SIZE`` where a classic transfer header has its int32 body size."""
NOT_A_SIZE = 1 << 30
"""A classic slave that takes the master's CHALLENGE for a transfer header sees a body of 1 GiB:
a habroker slave refuses it (above 4 MiB), a Java slave waits for it (RocketMQ 4.9.7's check
``diff >= 12 + bodySize`` stays false) until the master closes; neither appends anything. A
negative size, or one near 2**31 (``12 + bodySize`` overflows), passes that check: a Java
slave with an empty log then appends at the frame's offset and creates a commit-log file there
(seen with RocketMQ 4.9.7: tests/interop)."""
_PREFIX = struct.Struct(">4sBBH")  # what is checked before reading on
_MARKER = struct.Struct(">i")
NONCE_SIZE = 32
MAC_SIZE = 32
CHALLENGE_SIZE = HEADER.size + NONCE_SIZE  # 44
RESPONSE_SIZE = HEADER.size + NONCE_SIZE + MAC_SIZE  # 76
PROOF_SIZE = HEADER.size + MAC_SIZE  # 44
LABEL = b"habroker-ha-auth-v1\x00"
HANDSHAKE_TIMEOUT = 3.0
"""Seconds either side waits for the whole handshake before closing the connection."""
MIN_SECRET_SIZE = 16
_FRAME_NAMES = {CHALLENGE: "CHALLENGE", RESPONSE: "RESPONSE", PROOF: "PROOF"}


class HandshakeError(ProtocolError):
    """The peer did not authenticate; the message is the logged reason (never a secret)."""


class HASecretError(ConfigError):
    """The secret file cannot be used (missing, unreadable, empty or too short)."""


class HAAuth:
    """The group secret from ``haAuthSecretFile`` and the count of refused handshakes.

    Owned by the broker (not by a role's HA service) so the count survives role changes. The
    file is read again when it changes; if it becomes unreadable, handshakes fail (closed)
    until it is fixed: a broker never falls back to the unauthenticated protocol.
    """

    def __init__(self, path: str | Path, broker_name: str) -> None:
        self.file = SecretFile(path, "haAuthSecretFile", HASecretError, MIN_SECRET_SIZE)
        self.path = self.file.path
        self.broker_name = broker_name
        self.refused = 0

    def secret(self) -> bytes:
        """The current secret; HandshakeError if the file went bad since startup."""
        try:
            return self.file.value()
        except HASecretError as exc:
            raise HandshakeError(f"cannot authenticate: {exc}") from None

    def proof(self, secret: bytes, role: bytes, master_nonce: bytes, slave_nonce: bytes) -> bytes:
        message = b"".join(
            (LABEL, role, b"\x00", self.broker_name.encode(), b"\x00", master_nonce, slave_nonce)
        )
        return hmac.new(secret, message, hashlib.sha256).digest()

    # -- the two sides -----------------------------------------------------------------------
    async def authenticate_slave(self, sock: socket.socket) -> None:
        """The master's side; returns once the slave proved itself and got the master's proof.

        HandshakeError (counted in ``refused``) for anything else, a peer that closed or went
        silent included."""
        await self._counted(self._authenticate_slave(sock), "slave")

    async def authenticate_master(self, sock: socket.socket) -> None:
        """The slave's side; returns once the master proved itself, else HandshakeError."""
        await self._counted(self._authenticate_master(sock), "master")

    async def _counted(self, handshake: Coroutine[None, None, None], peer: str) -> None:
        try:
            await handshake
        except HandshakeError as exc:
            reason = str(exc)
        except TimeoutError:
            reason = (
                f"nothing from the {peer} within {HANDSHAKE_TIMEOUT:g} s (a {peer} without "
                "haAuthSecretFile speaks the classic protocol only)"
            )
        except (PeerClosed, OSError) as exc:
            reason = f"not completed: {exc}"
        else:
            return
        self.refused += 1
        raise HandshakeError(f"HA handshake refused: {reason}")

    async def _authenticate_slave(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        secret = self.secret()
        master_nonce = secrets.token_bytes(NONCE_SIZE)
        async with asyncio.timeout(HANDSHAKE_TIMEOUT):
            await send_all(loop, sock, _header(CHALLENGE) + master_nonce)
            body = await _read_frame(loop, sock, RESPONSE, RESPONSE_SIZE, "slave")
        slave_nonce, given = body[:NONCE_SIZE], body[NONCE_SIZE:]
        wanted = self.proof(secret, b"slave", master_nonce, slave_nonce)
        if not hmac.compare_digest(given, wanted):
            raise HandshakeError(
                "slave's proof does not match (a different haAuthSecretFile secret or brokerName)"
            )
        await send_all(
            loop,
            sock,
            _header(PROOF) + self.proof(secret, b"master", master_nonce, slave_nonce),
        )

    async def _authenticate_master(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        secret = self.secret()
        slave_nonce = secrets.token_bytes(NONCE_SIZE)
        async with asyncio.timeout(HANDSHAKE_TIMEOUT):
            master_nonce = await _read_frame(loop, sock, CHALLENGE, CHALLENGE_SIZE, "master")
            mine = self.proof(secret, b"slave", master_nonce, slave_nonce)
            await send_all(loop, sock, _header(RESPONSE) + slave_nonce + mine)
            given = await _read_frame(loop, sock, PROOF, PROOF_SIZE, "master")
        wanted = self.proof(secret, b"master", master_nonce, slave_nonce)
        if not hmac.compare_digest(given, wanted):
            raise HandshakeError(
                "master's proof does not match (a different haAuthSecretFile secret or "
                "brokerName): not replicating from it"
            )


def _header(kind: int) -> bytes:
    return HEADER.pack(MAGIC, VERSION, kind, 0, NOT_A_SIZE)


async def _read_exactly(loop: asyncio.AbstractEventLoop, sock: socket.socket, size: int) -> bytes:
    """``size`` bytes, never more: nothing of what follows the handshake is consumed here."""
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = await loop.sock_recv_into(sock, view[got:])
        if n == 0:
            raise PeerClosed(f"peer closed the connection during the HA handshake ({got} bytes)")
        got += n
    return bytes(buf)


async def _read_frame(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, kind: int, size: int, peer: str
) -> bytes:
    """One handshake frame of type ``kind``; its body (what follows the header).

    The first 8 bytes are judged alone: a classic slave sends an 8-byte report and then waits,
    so it is refused at once rather than after the timeout."""
    head = await _read_exactly(loop, sock, _PREFIX.size)
    magic, version, got_kind, _reserved = _PREFIX.unpack(head)
    if magic != MAGIC:
        raise HandshakeError(
            f"{peer} does not speak the HA handshake (first bytes {head.hex()}: "
            f"{'an offset report, ' if peer == 'slave' else ''}the classic protocol?); "
            "haAuthSecretFile requires it"
        )
    if version != VERSION:
        raise HandshakeError(f"{peer} speaks HA handshake version {version}, not {VERSION}")
    if got_kind != kind:
        raise HandshakeError(
            f"{peer} sent HA handshake frame type {got_kind}, expected {_FRAME_NAMES[kind]}"
        )
    rest = await _read_exactly(loop, sock, size - _PREFIX.size)
    (marker,) = _MARKER.unpack_from(rest)
    if marker != NOT_A_SIZE:
        raise HandshakeError(f"{peer} sent a HA handshake header with {marker} for {NOT_A_SIZE}")
    return rest[_MARKER.size :]
