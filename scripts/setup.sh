#!/usr/bin/env bash
# Installs every Debian package that Gantry's build, tests and demo need.
# Non-interactive and idempotent: packages already present are not fetched again.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libabsl-dev                      # absl::Status / StatusOr
  libopenblas-openmp-dev           # CPU GEMM (chosen over oneDNN by measurement: docs/perf.md)
  libyaml-cpp-dev                  # job specs
  nlohmann-json3-dev               # safetensors headers, config.json
  libgflags-dev libgoogle-glog-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc   # the wire contract
  librocksdb-dev                   # coordinator and shard-server state
  libgloo-dev                      # CPU collectives
  curl prometheus                  # curl, promtool and Prometheus: /metrics pages, alert rules, dashboards
  systemd python3 python3-venv openssl   # systemd-analyze verify; test drivers and their tools; a test CA (TLS)
  libgtest-dev libgmock-dev libbenchmark-dev
  fortunes fortunes-min            # the demo corpus
)
# Only for the GEMM library comparison in bench/ (optional; the build works without it).
OPTIONAL=(libdnnl-dev)

missing=()
for p in "${PACKAGES[@]}" "${OPTIONAL[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} required packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Optional packages may be missing from a mirror: install required ones first, strictly.
req=()
for p in "${missing[@]}"; do
  case " ${OPTIONAL[*]} " in *" $p "*) ;; *) req+=("$p");; esac
done
if [ ${#req[@]} -gt 0 ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${req[@]}"
fi
for p in "${OPTIONAL[@]}"; do
  case " ${missing[*]} " in
    *" $p "*) $SUDO apt-get install -y -qq --no-install-recommends "$p" || echo "setup: optional $p not installed";;
  esac
done
echo "setup: done"
