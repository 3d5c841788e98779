#!/usr/bin/env bash
# Installs every Debian package that Gantry's build, tests and demo need.
# Non-interactive and idempotent: packages already present are not fetched again.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libabsl-dev                      # absl::Status / StatusOr
  libopenblas-openmp-dev           # CPU GEMM (chosen over oneDNN by measurement: docs/perf/cpu.md)
  libyaml-cpp-dev                  # job specs
  nlohmann-json3-dev               # safetensors headers, config.json
  libgflags-dev libgoogle-glog-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc   # the wire contract
  librocksdb-dev                   # coordinator and shard-server state
  libssl-dev                       # the principals file's token hashes (libcrypto; gRPC links it too)
  prometheus-cpp-dev               # metrics: the registry (core) and /metrics (pull, civetweb)
  libasio-dev                      # the data plane's event loop (standalone Asio, header only)
  libgloo-dev                      # CPU collectives
  curl prometheus                  # curl, promtool and Prometheus: /metrics pages, alert rules, dashboards
  systemd python3 python3-venv python3-pip openssl   # systemd-analyze verify; test drivers and their tools; a test CA (TLS)
  libgtest-dev libgmock-dev libbenchmark-dev
  fortunes fortunes-min            # the demo corpus
)
# Only for the GEMM library comparison in bench/ (optional; the build works without it).
OPTIONAL=(libdnnl-dev)

missing=()
for p in "${PACKAGES[@]}" "${OPTIONAL[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# NVIDIA's cudnn-frontend (header-only C++ over cuDNN's graph API) for the cuDNN attention
# path, pinned; from PyPI (nvidia-cudnn-frontend), whose wheel carries the headers in
# include/. Only the headers are unpacked: nothing is installed into a Python, and its
# dependencies are not wanted (--no-deps). Only where the CUDA toolkit is (nvcc).
CUDNN_FRONTEND_VERSION=1.32.0
CUDNN_FRONTEND_DIR=/opt/gantry/cudnn-frontend-$CUDNN_FRONTEND_VERSION
install_cudnn_frontend() {
  if [ -f "$CUDNN_FRONTEND_DIR/include/cudnn_frontend.h" ]; then return 0; fi
  if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then return 0; fi
  local tmp
  tmp=$(mktemp -d)
  echo "setup: cudnn-frontend $CUDNN_FRONTEND_VERSION (PyPI nvidia-cudnn-frontend, headers only)"
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION"
  python3 -m zipfile -e "$tmp"/nvidia_cudnn_frontend-*.whl "$tmp/wheel"
  $SUDO mkdir -p "$CUDNN_FRONTEND_DIR"
  $SUDO cp -r "$tmp/wheel/include" "$CUDNN_FRONTEND_DIR/"
  rm -rf "$tmp"
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} required packages present"
  install_cudnn_frontend
  exit 0
fi

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
install_cudnn_frontend
echo "setup: done"
