#!/usr/bin/env bash
# Prometheus and Grafana against a live cluster: promtool passes deploy/prometheus's config
# and alert rules, and the rules' unit tests (gantry-rules.test.yml: each GPU alert fires where
# it should and not where it should not); then Debian's Prometheus, on loopback, scrapes a local
# cluster (3 workers, 1 shard server) running a job, and every PromQL expression of the Grafana
# dashboard (deploy/grafana) returns data through the HTTP API, and every alert rule loads and
# evaluates. The third worker reads its GPU metrics from NVML, a stand-in library
# (tests/worker/gpu_metrics/fake_nvml.cc: two GPUs at 95 C, throttled by heat, gaining
# uncorrectable ECC errors, idle while the job runs), so the GPU panels have data and each GPU
# alert's expression selects that worker's GPUs. The cluster serves TLS with the cluster token
# and a principals file whose teams: section gives a team a quota, so the Teams row's panels
# (gantry_coordinator_team_*) have a quota to show. Usage: prometheus_test.sh BUILD_DIR
set -uo pipefail
BUILD="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"
source "$ROOT/tests/integration/lib.sh"
for tool in prometheus promtool python3; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (scripts/setup.sh installs it)"; exit 77; }
done
check "promtool check config deploy/prometheus/prometheus.yml" bash -c \
  "cd '$ROOT/deploy/prometheus' && promtool check config prometheus.yml >'$TMP/config.txt' 2>&1 && ! grep -qi warning '$TMP/config.txt'"
check "promtool check rules deploy/prometheus/gantry-rules.yml" bash -c "promtool check rules '$ROOT/deploy/prometheus/gantry-rules.yml' >/dev/null"
check "promtool test rules deploy/prometheus/gantry-rules.test.yml" bash -c \
  "cd '$ROOT/deploy/prometheus' && promtool test rules gantry-rules.test.yml >'$TMP/rules-test.txt' 2>&1 || { cat '$TMP/rules-test.txt'; false; }"
FAKE_NVML="$BUILD/tests/libgantry_fake_nvml.so"
[ -f "$FAKE_NVML" ] || { echo "FAIL $FAKE_NVML is not built (ninja gantry_fake_nvml)"; exit 1; }

# TLS, the cluster token (the CLI's, the workers', the shard server's: one admin) and a
# principals file with a team's quota (security_test.sh's settings, and the file).
command -v openssl >/dev/null || { echo "SKIP: openssl is not installed"; exit 77; }
bash "$ROOT/deploy/tls/make-test-ca.sh" "$TMP/tls" >/dev/null || { echo "FAIL make-test-ca"; exit 1; }
export GANTRY_TLS_CA="$TMP/tls/ca.pem" GANTRY_TLS_CERT="$TMP/tls/server.pem" GANTRY_TLS_KEY="$TMP/tls/server.key"
export GANTRY_TOKEN_FILE="$TMP/tls/token" GANTRY_PRINCIPALS_FILE="$TMP/principals.yaml"
printf 'users:\n  - name: watcher\n    role: viewer\n    token_sha256: %s\nteams:\n  - name: vision\n    quota: {cpu: 8}\n' \
  "$(openssl rand -hex 16 | "$CLI" principals hash)" >"$GANTRY_PRINCIPALS_FILE"

"$TRAIN" prepare --out-dir "$TMP/data" /usr/share/games/fortunes >/dev/null 2>&1 || { echo "FAIL prepare"; exit 1; }
cat >"$TMP/job.yaml" <<YAML
name: watched
model: {n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 256, seq_len: 64}
data: {train: $TMP/data/train.bin, shuffle: true}
train: {steps: 100000, micro_batch: 4, global_batch: 12, lr: 1.0e-3}
checkpoint: {every: 20, keep: 2, dir: $TMP/unused}
parallel: {dp: 3}
YAML
bash "$ROOT/deploy/local/cluster.sh" start --dir "$TMP/cluster" --workers 2 --threads 1 >/dev/null || exit 1
source "$TMP/cluster/env"
GANTRY_FAKE_NVML="gpus=2 util=0 mem_used=1073741824 power_mw=350000 temp=95 sm_mhz=1755 throttle=0x40 ecc_uncorrected_step=1" \
  "$BUILD/worker/gantry-worker" --coordinator "$GANTRY_COORDINATOR" --work_dir "$TMP/cluster/worker3" \
  --metrics_listen 127.0.0.1:0 --threads 1 --host "$(hostname)-w3" --gpu_metrics nvml --nvml_library "$FAKE_NVML" \
  --ready_file "$TMP/cluster/worker3.ready" 2>"$TMP/cluster/worker3.log" &
echo $! >>"$TMP/extra.pids"
wait_for 30 test -s "$TMP/cluster/worker3.ready" || { echo "FAIL the NVML worker did not start"; tail "$TMP/cluster/worker3.log"; exit 1; }
id=$("$CLI" submit "$TMP/job.yaml")
targets=""
for f in coordinator shardserver worker1 worker2 worker3; do
  targets="$targets\"127.0.0.1:$(ready_port "$TMP/cluster/$f.ready" metrics_port)\", "
done
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$TMP/prometheus.yml" <<YAML
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: ["$ROOT/deploy/prometheus/gantry-rules.yml"]
scrape_configs:
  - job_name: gantry
    static_configs: [{targets: [${targets%, }]}]
YAML
prometheus --config.file "$TMP/prometheus.yml" --storage.tsdb.path "$TMP/tsdb" --web.listen-address "127.0.0.1:$PORT" \
  >"$TMP/prometheus.log" 2>&1 &
echo $! >>"$TMP/extra.pids"
API="http://127.0.0.1:$PORT/api/v1"
query() { curl -sf --get --data-urlencode "query=$1" "$API/query"; }
check "Prometheus scrapes the 5 daemons" wait_for 30 bash -c \
  "$(declare -f query); API='$API'; query 'count(up == 1)' | grep -q '\"value\":\[[0-9.]*,\"5\"\]'"
# Enough history for the rates: a checkpoint written and seen twice.
wait_for 60 bash -c "$(declare -f query); API='$API'; query 'rate(gantry_shardserver_checkpoint_written_bytes_total[1m]) > 0' | grep -q '\"result\":\[{'"
wait_for 30 bash -c "$(declare -f query); API='$API'; query 'rate(gantry_worker_checkpoint_write_seconds_count[5m]) > 0' | grep -q '\"result\":\[{'"
# and every target scraped 3 times, so that each series of each daemon has 2 samples for
# increase() (the rates above can be ready a scrape before another daemon's second sample).
wait_for 30 bash -c "$(declare -f query); API='$API'; query 'count(count_over_time(up[1h]) >= 3) == 5' | grep -q '\"result\":\[{'"
python3 - "$ROOT/deploy/grafana/gantry-dashboard.json" "$API" >"$TMP/panels.txt" <<'PY'
import json, sys, urllib.parse, urllib.request
dash, api = json.load(open(sys.argv[1])), sys.argv[2]
bad = 0
for p in dash["panels"]:
    for t in p.get("targets", []):
        url = api + "/query?" + urllib.parse.urlencode({"query": t["expr"]})
        r = json.load(urllib.request.urlopen(url))
        n = len(r["data"]["result"]) if r["status"] == "success" else -1
        print(("ok   " if n > 0 else "FAIL ") + f'panel "{p["title"]}": {n} series')
        bad += n <= 0
sys.exit(1 if bad else 0)
PY
rc=$?; sed 's/^/     /' "$TMP/panels.txt"
check "every panel of the dashboard returns data ($(grep -c '^ok' "$TMP/panels.txt") of $(wc -l <"$TMP/panels.txt"))" bash -c "[ $rc -eq 0 ]"
NVML_INSTANCE="127.0.0.1:$(ready_port "$TMP/cluster/worker3.ready" metrics_port)"
python3 - "$API" "$NVML_INSTANCE" >"$TMP/rules.txt" <<'PY'
import json, sys, urllib.parse, urllib.request
api, nvml_worker = sys.argv[1], sys.argv[2]
# What the stand-in NVML reports makes each GPU alert's expression select the NVML worker's
# GPUs (or, for the idle one, the job it runs): 2 GPUs each, or the job.
gpu_alerts = {"GantryGpuHot": 2, "GantryGpuThrottled": 2, "GantryGpuEccErrors": 2, "GantryJobGpusIdle": 1}
groups = json.load(urllib.request.urlopen(api + "/rules"))["data"]["groups"]
rules = [r for g in groups for r in g["rules"]]
bad = 0
for r in rules:
    q = json.load(urllib.request.urlopen(api + "/query?" + urllib.parse.urlencode({"query": r["query"]})))
    ok = r.get("health") == "ok" and q["status"] == "success"
    series = q["data"]["result"] if ok else []
    if r["name"] in gpu_alerts:
        want = gpu_alerts.pop(r["name"])
        mine = [s for s in series if s["metric"].get("instance", nvml_worker) == nvml_worker]
        ok = ok and len(series) == want and len(mine) == want
    print(("ok   " if ok else "FAIL ") + f'alert {r["name"]}: health {r.get("health")}, {len(series)} series match now')
    bad += not ok
sys.exit(1 if bad or len(rules) != 11 or gpu_alerts else 0)
PY
rc=$?; sed 's/^/     /' "$TMP/rules.txt"
check "the 11 alert rules load and evaluate; each GPU alert selects the NVML worker's GPUs" bash -c "[ $rc -eq 0 ]"
"$CLI" cancel "$id" >/dev/null
echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
