#!/usr/bin/env bash
# Prometheus and Grafana against a live cluster: promtool passes deploy/prometheus's config
# and alert rules; then Debian's Prometheus, on loopback, scrapes a local cluster (2 workers,
# 1 shard server) running a job, and every PromQL expression of the Grafana dashboard
# (deploy/grafana) returns data through the HTTP API, and every alert rule loads and
# evaluates. Usage: prometheus_test.sh BUILD_DIR
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

"$TRAIN" prepare --out-dir "$TMP/data" /usr/share/games/fortunes >/dev/null 2>&1 || { echo "FAIL prepare"; exit 1; }
cat >"$TMP/job.yaml" <<YAML
name: watched
model: {n_layer: 2, n_head: 2, n_embd: 64, vocab_size: 256, seq_len: 64}
data: {train: $TMP/data/train.bin, shuffle: true}
train: {steps: 100000, micro_batch: 4, global_batch: 8, lr: 1.0e-3}
checkpoint: {every: 20, keep: 2, dir: $TMP/unused}
parallel: {dp: 2}
YAML
bash "$ROOT/deploy/local/cluster.sh" start --dir "$TMP/cluster" --workers 2 --threads 1 >/dev/null || exit 1
source "$TMP/cluster/env"
id=$("$CLI" submit "$TMP/job.yaml")
targets=""
for f in coordinator shardserver worker1 worker2; do
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
check "Prometheus scrapes the 4 daemons" wait_for 30 bash -c \
  "$(declare -f query); API='$API'; query 'count(up == 1)' | grep -q '\"value\":\[[0-9.]*,\"4\"\]'"
# Enough history for the rates: a checkpoint written and seen twice.
wait_for 60 bash -c "$(declare -f query); API='$API'; query 'rate(gantry_shardserver_checkpoint_written_bytes_total[1m]) > 0' | grep -q '\"result\":\[{'"
wait_for 30 bash -c "$(declare -f query); API='$API'; query 'rate(gantry_worker_checkpoint_write_seconds_count[5m]) > 0' | grep -q '\"result\":\[{'"
# and every target scraped 3 times, so that each series of each daemon has 2 samples for
# increase() (the rates above can be ready a scrape before another daemon's second sample).
wait_for 30 bash -c "$(declare -f query); API='$API'; query 'count(count_over_time(up[1h]) >= 3) == 4' | grep -q '\"result\":\[{'"
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
python3 - "$API" >"$TMP/rules.txt" <<'PY'
import json, sys, urllib.parse, urllib.request
api = sys.argv[1]
groups = json.load(urllib.request.urlopen(api + "/rules"))["data"]["groups"]
rules = [r for g in groups for r in g["rules"]]
bad = 0
for r in rules:
    q = json.load(urllib.request.urlopen(api + "/query?" + urllib.parse.urlencode({"query": r["query"]})))
    ok = r.get("health") == "ok" and q["status"] == "success"
    print(("ok   " if ok else "FAIL ") + f'alert {r["name"]}: health {r.get("health")}, {len(q["data"]["result"])} firing series now')
    bad += not ok
sys.exit(1 if bad or len(rules) != 6 else 0)
PY
rc=$?; sed 's/^/     /' "$TMP/rules.txt"
check "the 6 alert rules load and evaluate" bash -c "[ $rc -eq 0 ]"
"$CLI" cancel "$id" >/dev/null
echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
