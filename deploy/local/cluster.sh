#!/usr/bin/env bash
# A Gantry cluster on this machine: one coordinator, S shard servers (1) and N CPU workers
# (1) on loopback, their state under one folder. DIR/pids lists the processes in start
# order: the coordinator, the shard servers, the workers.
#
#   deploy/local/cluster.sh start [--dir DIR] [--workers N] [--shardservers S] [--threads T] [--per-host K]
#                                 [--devices D1,D2,...] [--gpus G1,G2,...]
#     (--per-host: workers named as K to a host, so that a tensor-parallel group of K fits one;
#      --devices: each worker's --device in turn, cpu for those not named, e.g.
#      cuda-emulated,cuda-emulated,cpu: a job's resources.device picks the workers;
#      --gpus: each worker's --gpus in turn (cuda kinds; for cuda-emulated a fake GPU count),
#      the default for those not named: a worker hosts one rank of a job per GPU)
#   deploy/local/cluster.sh stop  [--dir DIR]
#
# start prints the coordinator address and writes DIR/env (source it: it sets
# GANTRY_COORDINATOR for the gantry CLI). Logs are DIR/*.log. Ports are picked by the
# daemons (port 0) and read back from their ready files, so several clusters can coexist.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="${GANTRY_BIN:-$ROOT/build}"
cmd="${1:-}"; shift || true
DIR="$ROOT/runs/cluster"; WORKERS=1; SHARDS=1; THREADS=0; DEVICES=(); GPUS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="$2"; shift 2 ;;
    --workers) WORKERS="$2"; shift 2 ;;
    --shardservers) SHARDS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --per-host) PER_HOST="$2"; shift 2 ;;
    --devices) IFS=, read -r -a DEVICES <<<"$2"; shift 2 ;;
    --gpus) IFS=, read -r -a GPUS <<<"$2"; shift 2 ;;
    *) echo "cluster.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

wait_ready() {  # wait_ready FILE PID NAME: until FILE exists, 30 s at most
  for _ in $(seq 1 300); do
    [ -s "$1" ] && return 0
    kill -0 "$2" 2>/dev/null || { echo "cluster.sh: $3 exited; see its log:" >&2; tail -5 "$DIR/$3.log" >&2; return 1; }
    sleep 0.1
  done
  echo "cluster.sh: $3 not ready after 30 s" >&2; return 1
}
port_of() { sed "s/.*\"$2\": \([0-9]*\).*/\1/" "$1"; }

case "$cmd" in
  start)
    if [ -f "$DIR/pids" ] && xargs -r kill -0 <"$DIR/pids" 2>/dev/null; then
      echo "cluster.sh: a cluster is already running in $DIR (stop it first)" >&2; exit 1
    fi
    mkdir -p "$DIR"; : >"$DIR/pids"; rm -f "$DIR"/*.ready
    "$BIN/coordinator/gantry-coordinator" --listen 127.0.0.1:0 --metrics_listen 127.0.0.1:0 \
      --data_dir "$DIR/coordinator" --ready_file "$DIR/coordinator.ready" 2>"$DIR/coordinator.log" &
    echo $! >>"$DIR/pids"; wait_ready "$DIR/coordinator.ready" $! coordinator
    COORD="127.0.0.1:$(port_of "$DIR/coordinator.ready" grpc_port)"
    for s in $(seq 1 "$SHARDS"); do  # the first keeps the unnumbered names
      name=shardserver$([ "$s" -gt 1 ] && echo "$s" || true)
      "$BIN/shardserver/gantry-shardserver" --listen 127.0.0.1:0 --metrics_listen 127.0.0.1:0 \
        --data_dir "$DIR/$name" --coordinator "$COORD" --ready_file "$DIR/$name.ready" 2>"$DIR/$name.log" &
      echo $! >>"$DIR/pids"; wait_ready "$DIR/$name.ready" $! "$name"
    done
    # Workers on one host get disjoint CPU slices (each pins its threads inside its slice);
    # with more workers than CPUs, none pins.
    NCPU=$(nproc); PER=$(( WORKERS > 0 ? NCPU / WORKERS : NCPU ))  # --workers 0: a control plane alone
    for i in $(seq 1 "$WORKERS"); do
      if [ "$WORKERS" -gt 1 ] && [ "$PER" -ge 1 ]; then
        FIRST=$(( (i - 1) * PER )); LAUNCH=(taskset -c "$FIRST-$(( FIRST + PER - 1 ))"); PIN=1
      else
        LAUNCH=(); PIN=$([ "$WORKERS" -gt "$NCPU" ] && echo 0 || echo 1)
      fi
      (cd "$ROOT" && GANTRY_PIN_THREADS=$PIN exec "${LAUNCH[@]}" "$BIN/worker/gantry-worker" --coordinator "$COORD" --work_dir "$DIR/worker$i" \
        --metrics_listen 127.0.0.1:0 --threads "$THREADS" --host "$(hostname)-$([ "${PER_HOST:-1}" -gt 1 ] && echo "h$(( (i - 1) / PER_HOST + 1 ))" || echo "w$i")" \
        --device "${DEVICES[$((i - 1))]:-cpu}" --gpus "${GPUS[$((i - 1))]:-0}" --ready_file "$DIR/worker$i.ready") 2>"$DIR/worker$i.log" &
      echo $! >>"$DIR/pids"; wait_ready "$DIR/worker$i.ready" $! "worker$i"
    done
    # Wait until every worker has attached and the shard server has registered.
    for _ in $(seq 1 300); do
      n=$(GANTRY_COORDINATOR="$COORD" "$BIN/cli/gantry" workers 2>/dev/null | grep -c ' idle \| busy ' || true)
      [ "$n" -ge "$WORKERS" ] && [ "$(cat "$DIR"/shardserver*.log | grep -c "registered with coordinator")" -ge "$SHARDS" ] && break
      sleep 0.1
    done
    echo "export GANTRY_COORDINATOR=$COORD" >"$DIR/env"
    echo "cluster up in $DIR: coordinator $COORD, $SHARDS shard server(s), $WORKERS worker(s); source $DIR/env"
    ;;
  stop)
    [ -f "$DIR/pids" ] || { echo "cluster.sh: no cluster in $DIR"; exit 0; }
    tac "$DIR/pids" | xargs -r kill -TERM 2>/dev/null || true
    for pid in $(cat "$DIR/pids"); do
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && { echo "cluster.sh: $pid did not stop in 10 s, killing" >&2; kill -9 "$pid"; }
    done
    rm -f "$DIR/pids"
    echo "cluster in $DIR stopped"
    ;;
  *)
    echo "usage: deploy/local/cluster.sh start|stop [--dir DIR] [--workers N] [--threads T]" >&2; exit 2 ;;
esac
