# End-to-end targets; included from the top-level Makefile, or run directly:
#   make -f e2e/e2e.mk e2e
# On our machines (no Docker engine) the cluster is built from the Kubernetes
# binaries; with Docker, e2e/kind.sh runs the same suite on kind.
E2E_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
E2E_SH := $(E2E_DIR)/cluster
E2E_KUBECONFIG := $(abspath $(E2E_DIR)/.cluster/kubeconfig)
E2E_PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)

.PHONY: cluster-deps cluster-build cluster-up cluster-down cluster-status images e2e e2e-tests

cluster-deps:  ## install the cluster's Debian packages and etcd (idempotent)
	bash $(E2E_SH)/install-deps.sh

cluster-build: cluster-deps  ## build the pinned Kubernetes, CoreDNS, helm (cached after the first time)
	bash $(E2E_SH)/build.sh

cluster-up: cluster-build  ## start the local 3-node cluster (in its own network namespaces); KUBECONFIG=e2e/.cluster/kubeconfig
	bash $(E2E_SH)/up.sh

cluster-down:  ## stop the local cluster and restore the host
	bash $(E2E_SH)/down.sh

cluster-status:  ## what runs where, and the nodes
	bash $(E2E_SH)/status.sh

images: cluster-deps  ## build the broker and operator images; load them if the cluster runs
	bash $(E2E_SH)/images.sh all

# With KUBECONFIG set: run the suite against that cluster (images must be there).
# Without: up, images, suite, down (E2E_KEEP=1 leaves the cluster running).
e2e:  ## the end-to-end suite on a real cluster
ifeq ($(strip $(KUBECONFIG)),)
	$(MAKE) -f $(E2E_DIR)/e2e.mk cluster-build
	E2E_PYTHON=$(E2E_PYTHON) bash $(E2E_DIR)/run.sh
else
	$(E2E_PYTHON) -m pytest $(E2E_DIR)/tests
endif
