#!/usr/bin/env bash
# Install the benchmark's peer, Debian's redis-server, if it is missing (idempotent).
# The benchmarks start their own redis-server processes on 127.0.0.1; the system service is
# never used (on a machine with systemd it is stopped and disabled right after installing).
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq redis-server >/dev/null
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet redis-server 2>/dev/null; then
    $SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
redis-server --version
