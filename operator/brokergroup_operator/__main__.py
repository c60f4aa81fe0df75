"""``python -m brokergroup_operator``: run the operator (same as ``kopf run -m ...handlers``).

Namespaces to watch come from ``--namespace`` (repeatable) or ``WATCH_NAMESPACE`` (comma
separated); without either the operator watches the whole cluster.
"""

from __future__ import annotations

import argparse
import logging
import os
import random

import kopf


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="brokergroup-operator")
    parser.add_argument("-n", "--namespace", action="append", default=[], help="watch only these")
    parser.add_argument(
        "--liveness", default=None, help="e.g. http://0.0.0.0:8080/healthz for a liveness probe"
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument(
        "--log-sweeps", action="store_true", help="log each group's sweep duration (benchmarks)"
    )
    args = parser.parse_args(argv)
    namespaces = args.namespace or [
        ns for ns in os.environ.get("WATCH_NAMESPACE", "").split(",") if ns.strip()
    ]
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        # kopf serves the liveness probe with aiohttp, which logs every request at INFO:
        # one line per probe drowns the operator's own messages
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    if args.log_sweeps:
        logging.getLogger("brokergroup_operator.sweeps").setLevel(logging.DEBUG)
    from . import handlers, metrics  # handlers: registers them with kopf's default registry

    if handlers.SETTINGS.metrics_port:
        metrics.serve(handlers.SETTINGS.metrics_port, handlers.SETTINGS.metrics_address)

    kopf.run(
        standalone=not handlers.SETTINGS.peering,
        peering_name=handlers.SETTINGS.peering or None,
        priority=peering_priority(),
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=args.liveness,
    )


def peering_priority() -> int:
    """A random kopf peering priority per process: kopf pauses every operator that sees a peer
    of the same priority, so equal replicas would all stand still; with distinct priorities the
    highest handles events and the others stand by until its record is gone."""
    return random.SystemRandom().randrange(1, 2**31)


if __name__ == "__main__":
    main()
