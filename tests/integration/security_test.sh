#!/usr/bin/env bash
# TLS and the cluster token end to end: a local cluster (1 worker, 1 shard server) whose
# daemons serve TLS with mutual TLS and a token (deploy/tls/make-test-ca.sh). With the right
# settings the CLI submits a job that runs to SUCCEEDED (worker, shard server and
# coordinator talking TLS + token) and lists its checkpoints; calls without the token, with
# a wrong one, or without TLS are refused; the health service answers without a token.
# Usage: security_test.sh BUILD_DIR
set -uo pipefail
BUILD="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"
source "$ROOT/tests/integration/lib.sh"
command -v openssl >/dev/null || { echo "SKIP: openssl is not installed"; exit 77; }
bash "$ROOT/deploy/tls/make-test-ca.sh" "$TMP/tls" >/dev/null || { echo "FAIL make-test-ca"; exit 1; }
export GANTRY_TLS_CA="$TMP/tls/ca.pem" GANTRY_TLS_CERT="$TMP/tls/server.pem" GANTRY_TLS_KEY="$TMP/tls/server.key"
export GANTRY_TLS_CLIENT_CA="$TMP/tls/ca.pem" GANTRY_TOKEN_FILE="$TMP/tls/token"

"$TRAIN" prepare --out-dir "$TMP/data" /usr/share/games/fortunes >/dev/null 2>&1 || { echo "FAIL prepare"; exit 1; }
cat >"$TMP/job.yaml" <<YAML
name: secured
model: {n_layer: 1, n_head: 2, n_embd: 32, vocab_size: 256, seq_len: 32}
data: {train: $TMP/data/train.bin, shuffle: true}
train: {steps: 10, micro_batch: 4, lr: 1.0e-3}
checkpoint: {every: 5, dir: $TMP/unused}
YAML
bash "$ROOT/deploy/local/cluster.sh" start --dir "$TMP/cluster" --workers 1 --threads 1 >/dev/null || exit 1
source "$TMP/cluster/env"
id=$("$CLI" submit "$TMP/job.yaml" 2>"$TMP/submit.err")
check "with TLS, client certificates and the token, a job runs to SUCCEEDED" bash -c \
  "[ -n '$id' ] && '$CLI' watch '$id' | grep -q '$id SUCCEEDED'"
check "and its checkpoints (on the TLS shard server) are listed" bash -c "'$CLI' checkpoints '$id' | grep -qE '^10 '"
check "without the token: UNAUTHENTICATED" bash -c \
  "! env -u GANTRY_TOKEN_FILE '$CLI' jobs 2>'$TMP/e1' && grep -q 'UNAUTHENTICATED: this cluster needs its token' '$TMP/e1'"
check "with a wrong token: UNAUTHENTICATED" bash -c \
  "! env -u GANTRY_TOKEN_FILE GANTRY_TOKEN=wrong '$CLI' jobs 2>'$TMP/e2' && grep -q 'UNAUTHENTICATED: wrong cluster token' '$TMP/e2'"
check "without TLS (plaintext): refused" bash -c \
  "! env -u GANTRY_TLS_CA -u GANTRY_TLS_CERT -u GANTRY_TLS_KEY -u GANTRY_TOKEN_FILE '$CLI' jobs 2>'$TMP/e3' && grep -q 'UNAVAILABLE' '$TMP/e3'"
check "a token without TLS is a configuration error, named" bash -c \
  "! env -u GANTRY_TLS_CA -u GANTRY_TLS_CERT -u GANTRY_TLS_KEY '$CLI' jobs 2>'$TMP/e4' && grep -q 'travels only over TLS' '$TMP/e4'"
check "the health service answers without the token (gantry health, the probes' command)" \
  env -u GANTRY_TOKEN_FILE "$CLI" health "$GANTRY_COORDINATOR"
echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
