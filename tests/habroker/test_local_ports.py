"""Ports for test and demo brokers: none from the kernel's ephemeral range (an outgoing
connection could take such a port between the pick and the broker's bind), none twice."""

from __future__ import annotations

import socket
from pathlib import Path

from habroker.local import free_port, free_ports, port_pairs


def ephemeral() -> range:
    low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    return range(low, high + 1)


def test_listen_ports_are_outside_the_ephemeral_range_and_never_repeat() -> None:
    picked = free_ports(50) + [free_port() for _ in range(50)]
    assert len(set(picked)) == 100
    assert not [p for p in picked if p in ephemeral()]


def test_outgoing_connections_do_not_land_on_picked_ports() -> None:
    # the CI failure this guards: a listener's port, picked by binding 0 and released, was a
    # local port of some connection by the time the broker bound it
    ports = set(free_ports(20))
    with socket.create_server(("127.0.0.1", 0), backlog=256) as server:
        clients = [socket.create_connection(server.getsockname()) for _ in range(200)]
        try:
            assert not {c.getsockname()[1] for c in clients} & ports
        finally:
            for c in clients:
                c.close()


def test_pairs_are_one_distance_apart_and_distinct() -> None:
    clients, dledger = port_pairs(3)
    distances = {d - c for c, d in zip(clients, dledger, strict=True)}
    assert len(distances) == 1 and distances.pop() > 0
    assert len(set(clients + dledger)) == 6
    assert not [p for p in clients + dledger if p in ephemeral()]
