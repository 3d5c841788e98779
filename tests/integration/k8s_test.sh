#!/usr/bin/env bash
# The Kubernetes manifests (deploy/k8s) build with `kubectl kustomize` and validate offline,
# strictly (an unknown field fails), against the Kubernetes schemas
# (kubernetes-validate: pip install kubernetes-validate). The ServiceMonitor is a CRD with no
# schema there; its fields are checked here. Neither tool is a Debian package: where one is
# missing the test says so and passes nothing.
# scripts/test.sh installs kubernetes-validate into BUILD_DIR/tools; kubectl comes with the
# machine (Debian's kubernetes-client, 1.20, is too old for the kustomization's `labels`).
# Usage: k8s_test.sh [BUILD_DIR]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PATH="$PATH:${1:-$ROOT/build}/tools/bin:${VENV:-$ROOT/venv}/bin"
for tool in kubectl kubernetes-validate; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (kubectl: Kubernetes' apt repository; kubernetes-validate: scripts/test.sh installs it from PyPI)"; exit 77; }
done
fail=0; passed=0
check() { local n="$1"; shift; if "$@"; then echo "ok   $n"; passed=$((passed + 1)); else echo "FAIL $n"; fail=$((fail + 1)); fi; }
check "kubectl kustomize deploy/k8s builds" bash -c "kubectl kustomize '$ROOT/deploy/k8s' >'$TMP/all.yaml'"
kinds=$(grep -c '^kind:' "$TMP/all.yaml")
check "it holds the 10 objects (namespace, config, 3 services, PVC, deployment, statefulset, daemonset, servicemonitor): $kinds" \
  bash -c "[ $kinds -eq 10 ]"
check "every built-in object validates strictly against the Kubernetes 1.30 schemas" bash -c \
  "kubernetes-validate --strict -k 1.30.0 '$TMP/all.yaml' >'$TMP/v.txt' 2>&1; rc=\$?; sed 's/^/     /' '$TMP/v.txt'; \
   [ \$rc -eq 0 ] && [ \$(grep -c ' passed for resource ' '$TMP/v.txt') -eq 9 ]"
sed 's/replicas: 1 /replicaz: 1 /' "$ROOT/deploy/k8s/coordinator.yaml" >"$TMP/bad.yaml"
check "(the check can fail: an unknown field is refused)" bash -c "! kubernetes-validate --strict -k 1.30.0 '$TMP/bad.yaml' >/dev/null 2>&1"
check "one worker per GPU node (a DaemonSet) offers the GPUs it requests, and the servers' probes use the gRPC health service" bash -c \
  "sed -n '/^kind: DaemonSet/,/^---/p' '$TMP/all.yaml' >'$TMP/ds.yaml' && grep -q 'name: gantry-worker' '$TMP/ds.yaml' && \
   grep -q 'nvidia.com/gpu: 8' '$TMP/ds.yaml' && grep -q -- '- --gpus=8' '$TMP/ds.yaml' && grep -q -- '- --device=cuda' '$TMP/ds.yaml' && \
   [ \$(grep -c -- '- health\$' '$TMP/all.yaml') -eq 4 ] && \
   [ \$(grep -c -- '- 127.0.0.1:707[01]\$' '$TMP/all.yaml') -eq 4 ]"
check "the ServiceMonitor scrapes the metrics port of the three daemons" bash -c \
  "sed -n '/^kind: ServiceMonitor/,\$p' '$TMP/all.yaml' >'$TMP/sm.yaml' && grep -q 'port: metrics' '$TMP/sm.yaml' && \
   grep -q -- '- gantry-coordinator' '$TMP/sm.yaml' && grep -q -- '- gantry-shardserver' '$TMP/sm.yaml' && \
   grep -q -- '- gantry-worker' '$TMP/sm.yaml'"
echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
