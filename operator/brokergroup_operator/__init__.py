"""brokergroup_operator: a kopf operator that runs habroker master/slave groups.

Pure parts (``manifests``, ``status``, ``policy``, ``rolling``, ``wiring``) take plain dicts and
return plain dicts so they are tested without a cluster; ``handlers`` is the thin kopf layer and
``kube``/``brokerapi`` are the only modules that do I/O.
"""

GROUP = "brokergroup.io"
VERSION = "v1alpha1"
PLURAL = "brokergroups"
KIND = "BrokerGroup"
API_VERSION = f"{GROUP}/{VERSION}"
FIELD_MANAGER = "brokergroup-operator"

__all__ = ["API_VERSION", "FIELD_MANAGER", "GROUP", "KIND", "PLURAL", "VERSION"]
