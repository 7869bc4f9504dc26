#!/usr/bin/env bash
# Redis work per request on a 3-master Cluster under the wide profile (not
# part of CI): script calls (EVALSHA) per request, their execution time per
# request (`usec` in INFO commandstats, summed over the nodes) and the
# EXISTS probes per request, from commandstats reset before each
# measurement. BASELINE=path/to/another/floodgate measures that build too,
# interleaved round by round.
#
#   bash bench/cluster_calls.sh
#   BASELINE=/tmp/old/floodgate ROUNDS=3 bash bench/cluster_calls.sh
#
# Settings: ROUNDS (3), DURATION (8), PROCS (4), CONNS (16), STREAMS (8),
# KEYS (250000 per process), BASELINE. Pinning as in compare.sh: the nodes
# and floodgate on CPU 1, the load on CPU 0.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8}
PROCS=${PROCS:-4}
CONNS=${CONNS:-16}
STREAMS=${STREAMS:-8}
KEYS=${KEYS:-250000}
BASELINE=${BASELINE:-}
OUT=$(mktemp -d -t floodgate-cluster-calls.XXXXXX)
BIN=target/release

source bench/lib.sh

cargo build --release --locked --bin floodgate --example wide_load

start_cluster 1 "$OUT"
ports=("${CLUSTER_NODES[@]#*:}")
seeds=$(IFS=,; echo "${CLUSTER_NODES[*]}")

stat() { # stat FIELD COMMAND: FIELD of cmdstat_COMMAND, summed over the nodes
    for p in "${ports[@]}"; do
        redis-cli -p "$p" INFO commandstats | grep "^cmdstat_$2:" | sed "s/.*[:,]$1=\([0-9.]*\).*/\1/" || true
    done | awk '{ s += $1 } END { print s + 0 }'
}

load() { # load PORT LABEL SECONDS: the wide profile; prints the requests done
    local pids=()
    for i in $(seq 0 $((PROCS - 1))); do
        taskset -c 0 "$BIN/examples/wide_load" "127.0.0.1:$1" "$CONNS" "$STREAMS" "$3" "$KEYS" \
            "$2-p$i-" >"$OUT/$2-$i.txt" 2>&1 &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    awk '{ s += $3 } END { print s }' "$OUT/$2"-*.txt
}

BUILDS=(this)
[[ -z $BASELINE ]] || BUILDS+=(baseline)
printf 'round\tbuild\trequests\tscript_calls_per_request\tscript_usec_per_request\texists_per_request\n'
for round in $(seq "$ROUNDS"); do
    for build in "${BUILDS[@]}"; do
        binary="$BIN/floodgate"
        [[ $build == this ]] || binary=$BASELINE
        grpc=$(free_port) http=$(free_port)
        REDIS_TYPE=cluster taskset -c 1 "$binary" serve --config-dir bench/config --store redis \
            --redis-url "$seeds" --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" \
            --log-level warn >"$OUT/$build-$round.log" 2>&1 &
        server=$!
        PIDS+=("$server")
        wait_for curl -sf "http://127.0.0.1:$http/healthcheck"
        load "$grpc" "warm-$build-$round" 2 >/dev/null
        for p in "${ports[@]}"; do redis-cli -p "$p" CONFIG RESETSTAT >/dev/null; done
        requests=$(load "$grpc" "$build-$round" "$DURATION")
        awk -v r="$round" -v b="$build" -v n="$requests" -v c="$(stat calls evalsha)" \
            -v u="$(stat usec evalsha)" -v e="$(stat calls exists)" \
            'BEGIN { printf "%s\t%s\t%d\t%.3f\t%.2f\t%.3f\n", r, b, n, c / n, u / n, e / n }'
        kill -INT "$server"
        wait "$server" || true
    done
done
