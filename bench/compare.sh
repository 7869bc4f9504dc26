#!/usr/bin/env bash
# The speed method of issue #10, in one command (not part of CI):
#
#   servers (the no-op ceiling, the same no-op server scheduled as floodgate
#   schedules (tokio's LIFO slot off: `ceiling --no-lifo`), floodgate on the
#   embedded store, floodgate on Redis) and redis-server pinned to CPU 1, the load pinned to CPU 0;
#   PROCS load processes x CONNS connections x STREAMS streams each, one
#   descriptor per request on a rule that is never reached. PROFILE=hot
#   (default): h2load, each process its own descriptor value (a hot key per
#   process). PROFILE=wide: examples/wide_load, every request a value not
#   seen for a long while (each process cycles through KEYS values of its
#   own, so the stores keep creating counters). Then a
#   WARMUP-second warm-up, then DURATION seconds measured; ROUNDS rounds
#   interleaving the servers (every other round in reverse order); medians
#   per server of req/s, p99 and server CPU per request (utime + stime from
#   /proc, floodgate alone and, for Redis, floodgate plus redis-server), and
#   the ratios to both no-op servers (the issue's ratio is to the better
#   one, `ceiling_tuned`). CLUSTER=1
#   adds floodgate on a 3-master Redis Cluster (all three nodes pinned to
#   CPU 1 as well). STORES picks floodgate's stores (default: memory redis,
#   and cluster with CLUSTER=1). BASELINE=path/to/another/floodgate adds
#   that binary on each of those stores as `<store>_base`, in the same
#   rounds: an A/B of two builds in one run. SNAPSHOT=1 adds `memory_snap`,
#   the embedded store writing its snapshot every second
#   (MEMORY_STORE_SNAPSHOT_PATH). FILL=1 first brings every embedded store
#   to its byte budget (128 MiB) with hour-long counters of wide keys, so
#   snapshots carry a full store. Store `memory_table` is the embedded
#   store with the hot keys' limits read from a limit table of
#   TABLE_ENTRIES (100,000) entries (the `tabled` rule, `table:
#   bench_clients`, the same numbers as `client`): against `memory`, the
#   cost of a table. Stores `redis_lease` and `cluster_lease`
#   (in STORES) are floodgate on Redis / the Cluster with the hot
#   descriptor's rule leased (`lease: true`, the `leased` key); every Redis
#   server's row also shows its script calls per 100 requests (from its own
#   /metrics). Stores `wan_lease` and `memory_lease` (in STORES; issue #43)
#   put the same leased rule 40 ms away and next door: `wan_lease` is
#   floodgate on the embedded store with a named store `global`
#   (STORES_FILE: type redis, timeout 2s) reached through
#   bench/wan_proxy.py, WAN_DELAY_MS (40) each way in front of the bench's
#   redis-server, and the `leased` rule given `store: global` in a copy of
#   bench/config made under OUT (bench/config itself names no store, since
#   a server started without STORES_FILE refuses one); `memory_lease` is
#   the `leased` rule on the embedded store, as bench/config has it.
#
# Settings (environment): PROFILE (hot), ROUNDS (5), DURATION (8), WARMUP (2),
# PROCS (4), CONNS (16), STREAMS (8), KEYS (250000 per process, wide only),
# CLUSTER (0), STORES, BASELINE, SNAPSHOT (0), FILL (0), TABLE_ENTRIES, WAN_DELAY_MS (40),
# OUT (a new temporary directory). Needs taskset,
# h2load, redis-server, curl, python3 and 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

PROFILE=${PROFILE:-hot}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-8}
WARMUP=${WARMUP:-2}
PROCS=${PROCS:-4}
CONNS=${CONNS:-16}
STREAMS=${STREAMS:-8}
KEYS=${KEYS:-250000}
CLUSTER=${CLUSTER:-0}
if [[ $CLUSTER == 1 ]]; then DEFAULT_STORES="memory redis cluster"; else DEFAULT_STORES="memory redis"; fi
STORES=${STORES-$DEFAULT_STORES}
BASELINE=${BASELINE:-}
SNAPSHOT=${SNAPSHOT:-0}
FILL=${FILL:-0}
WAN_DELAY_MS=${WAN_DELAY_MS:-40}
OUT=${OUT:-$(mktemp -d -t floodgate-compare.XXXXXX)}
mkdir -p "$OUT"
METHOD=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
BIN=target/release
SERVER_CPU=1
LOAD_CPU=0

for tool in taskset h2load redis-server redis-cli curl python3; do
    command -v "$tool" >/dev/null || { echo "missing $tool" >&2; exit 1; }
done

source bench/lib.sh

grpc_ok() { # grpc_ok PORT: one call must end with grpc-status 0
    curl -sf --http2-prior-knowledge -H 'content-type: application/grpc' -H 'te: trailers' \
        --data-binary @"$OUT/body-0.bin" -o /dev/null -D "$OUT/headers" \
        "http://127.0.0.1:$1$METHOD" && grep -qi '^grpc-status: 0' "$OUT/headers"
}

cpu_ticks() { # cpu_ticks PID…: utime + stime of every PID, in clock ticks
    local total=0
    for pid in "$@"; do
        total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
    done
    echo "$total"
}

# wide PORT LABEL SECONDS: the wide profile's load, pinned to LOAD_CPU;
# prints req/s, p99 ms and requests done (summed / worst over processes).
wide() {
    local port=$1 label=$2 seconds=$3 pids=()
    for i in $(seq 0 $((PROCS - 1))); do
        taskset -c "$LOAD_CPU" "$BIN/examples/wide_load" "127.0.0.1:$port" "$CONNS" "$STREAMS" \
            "$seconds" "$KEYS" "$label-p$i-" >"$OUT/$label-$i.txt" 2>&1 &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    awk '{ rate += $1; if ($2 > p99) p99 = $2; done_ += $3; errors += $4 }
         END { if (errors > 0) print "errors: " errors > "/dev/stderr"; printf "%.0f %.2f %d\n", rate, p99, done_ }' \
        "$OUT/$label"-*.txt
}

# h2 PORT LABEL SECONDS: the load, pinned to LOAD_CPU; prints req/s and p99 ms.
h2() {
    if [[ $PROFILE == wide ]]; then
        wide "$@"
        return
    fi
    local port=$1 label=$2 seconds=$3 pids=() body=body
    # A leased server's hot keys are on the leased rule, a tabled one's on
    # the rule reading a limit table.
    [[ $label == *lease* ]] && body=body-lease
    [[ $label == *table* ]] && body=body-table
    for i in $(seq 0 $((PROCS - 1))); do
        taskset -c "$LOAD_CPU" h2load -D "$seconds" -c "$CONNS" -m "$STREAMS" -t 1 \
            -H 'content-type: application/grpc' -H 'te: trailers' \
            -d "$OUT/$body-$i.bin" --log-file "$OUT/$label-$i.log" \
            "http://127.0.0.1:$port$METHOD" >"$OUT/$label-$i.txt" 2>&1 &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    local rate p99 done_
    rate=$(awk '/^finished in/ { sub(",", "", $4); sum += $4 } END { printf "%.0f", sum }' "$OUT/$label"-*.txt)
    done_=$(awk '/^requests:/ { sum += $8 } END { print sum }' "$OUT/$label"-*.txt)
    p99=$(cat "$OUT/$label"-*.log | cut -f3 | sort -n | awk '{ v[NR] = $1 } END { k = int(NR * 0.99); if (k < 1) k = 1; printf "%.2f", v[k] / 1000 }')
    echo "$rate $p99 $done_"
}

echo "==> building release binaries"
cargo build --release --locked --bin floodgate --example grpc_body --example ceiling --example wide_load
for i in $(seq 0 $((PROCS - 1))); do
    "$BIN/examples/grpc_body" encode bench "client=c$i" >"$OUT/body-$i.bin"
    "$BIN/examples/grpc_body" encode bench "leased=c$i" >"$OUT/body-lease-$i.bin"
    "$BIN/examples/grpc_body" encode bench "tabled=c$i" >"$OUT/body-table-$i.bin"
done

start() { # start COMMAND…: pinned to SERVER_CPU; sets PID
    taskset -c "$SERVER_CPU" "$@" >"$OUT/server-${#PIDS[@]}.log" 2>&1 &
    PID=$!
    PIDS+=("$PID")
}

declare -A PORT PIDOF HTTP
PORT[ceiling]=$(free_port)
start "$BIN/examples/ceiling" "127.0.0.1:${PORT[ceiling]}"
PIDOF[ceiling]=$PID
PORT[ceiling_tuned]=$(free_port)
start "$BIN/examples/ceiling" "127.0.0.1:${PORT[ceiling_tuned]}" --no-lifo
PIDOF[ceiling_tuned]=$PID

start_redis "$OUT/redis" "$SERVER_CPU"
rport=$REDIS_PORT
RPID=$REDIS_PID

SERVERS=(ceiling ceiling_tuned)
STORE_PIDS=("$RPID")
# serve NAME BINARY STORE REDIS_URL [ENV…]: a floodgate to measure, on the
# rules in CONFIG_DIR (bench/config unless set for the call).
serve() {
    local name=$1 binary=$2 store=$3 url=$4 http
    shift 4
    PORT[$name]=$(free_port)
    http=$(free_port)
    HTTP[$name]=$http
    env "$@" taskset -c "$SERVER_CPU" "$binary" serve --config-dir "${CONFIG_DIR:-bench/config}" --store "$store" \
        --redis-url "$url" --grpc-addr "127.0.0.1:${PORT[$name]}" \
        --http-addr "127.0.0.1:$http" --log-level warn >"$OUT/server-$name.log" 2>&1 &
    PIDS+=($!)
    PIDOF[$name]=$!
    wait_for curl -sf "http://127.0.0.1:$http/healthcheck"
    SERVERS+=("$name")
}
for store in memory redis; do
    [[ " $STORES " == *" $store "* ]] || continue
    serve "$store" "$BIN/floodgate" "$store" "127.0.0.1:$rport"
    [[ -z $BASELINE ]] || serve "${store}_base" "$BASELINE" "$store" "127.0.0.1:$rport"
done
if [[ " $STORES " == *" redis_lease "* ]]; then
    serve redis_lease "$BIN/floodgate" redis "127.0.0.1:$rport"
    [[ -z $BASELINE ]] || serve redis_lease_base "$BASELINE" redis "127.0.0.1:$rport"
fi
if [[ " $STORES " == *" memory_table "* ]]; then
    # The hot keys' limits from a limit table of TABLE_ENTRIES entries (the
    # same numbers as the rule's), read from a TABLES_PATH log written here.
    python3 - "$PROCS" "${TABLE_ENTRIES:-100000}" >"$OUT/tables.log" <<'PY'
import json, sys
procs, n = int(sys.argv[1]), int(sys.argv[2])
items = [{"key": "c%d" % i, "entry": {"requests_per_unit": 1000000000}} for i in range(procs)]
items += [{"key": "tenant-%d" % i, "entry": {"requests_per_unit": 100 + i % 1000}} for i in range(n)]
print(json.dumps({"time": "2026-01-01T00:00:00Z", "who": "bench", "action": "import",
                  "table": "bench_clients", "version": 1, "items": items}))
PY
    serve memory_table "$BIN/floodgate" memory "127.0.0.1:$rport" TABLES_PATH="$OUT/tables.log"
fi
if [[ " $STORES " == *" memory_lease "* ]]; then
    serve memory_lease "$BIN/floodgate" memory "127.0.0.1:$rport"
    [[ -z $BASELINE ]] || serve memory_lease_base "$BASELINE" memory "127.0.0.1:$rport"
fi
if [[ " $STORES " == *" wan_lease "* ]]; then
    # A global Redis a WAN away: the bench's redis-server behind the delay
    # proxy, named `global` in a stores file, and the `leased` rule on it.
    wport=$(free_port)
    start python3 bench/wan_proxy.py "$wport" "127.0.0.1:$rport" "$WAN_DELAY_MS"
    wait_for redis-cli -p "$wport" PING
    cat >"$OUT/stores.yaml" <<YAML
global:
  type: redis
  url: 127.0.0.1:$wport
  timeout: 2s
YAML
    mkdir -p "$OUT/config-wan"
    sed '/^  - key: leased$/,/rate_limit:/ s/lease: true}/lease: true, store: global}/' \
        bench/config/bench.yaml >"$OUT/config-wan/bench.yaml"
    grep -q 'lease: true, store: global}' "$OUT/config-wan/bench.yaml" ||
        { echo "bench/config/bench.yaml: no leased rule to put on store global" >&2; exit 1; }
    CONFIG_DIR="$OUT/config-wan" serve wan_lease "$BIN/floodgate" memory "127.0.0.1:$rport" \
        STORES_FILE="$OUT/stores.yaml"
    [[ -z $BASELINE ]] || CONFIG_DIR="$OUT/config-wan" serve wan_lease_base "$BASELINE" memory \
        "127.0.0.1:$rport" STORES_FILE="$OUT/stores.yaml"
fi
if [[ $SNAPSHOT == 1 ]]; then
    serve memory_snap "$BIN/floodgate" memory "127.0.0.1:$rport" \
        MEMORY_STORE_SNAPSHOT_PATH="$OUT/memory.snap"
fi
if [[ $CLUSTER == 1 ]]; then
    start_cluster "$SERVER_CPU" "$OUT"
    STORE_PIDS+=("${CLUSTER_PIDS[@]}")
    seeds=$(IFS=,; echo "${CLUSTER_NODES[*]}")
    if [[ " $STORES " == *" cluster "* ]]; then
        serve cluster "$BIN/floodgate" redis "$seeds" REDIS_TYPE=cluster
        [[ -z $BASELINE ]] || serve cluster_base "$BASELINE" redis "$seeds" REDIS_TYPE=cluster
    fi
    if [[ " $STORES " == *" cluster_lease "* ]]; then
        serve cluster_lease "$BIN/floodgate" redis "$seeds" REDIS_TYPE=cluster
        [[ -z $BASELINE ]] || serve cluster_lease_base "$BASELINE" redis "$seeds" REDIS_TYPE=cluster
    fi
fi
for s in "${SERVERS[@]}"; do wait_for grpc_ok "${PORT[$s]}"; done

if [[ $FILL == 1 ]]; then
    # Every embedded store to its budget: wide keys on the hour-long `fill`
    # rule, until ratelimit_memory_store_bytes is within 2 % of the budget.
    for s in "${SERVERS[@]}"; do
        [[ $s == memory* ]] || continue
        for pass in $(seq 30); do
            taskset -c "$LOAD_CPU" "$BIN/examples/wide_load" "127.0.0.1:${PORT[$s]}" "$CONNS" "$STREAMS" \
                2 300000 "fill-$pass-" fill >/dev/null
            full=$(curl -s "http://127.0.0.1:${HTTP[$s]}/metrics" | awk '
                /^ratelimit_memory_store_bytes / { b = $2 } /^ratelimit_memory_store_max_bytes / { m = $2 }
                END { print (m > 0 && b >= 0.98 * m) ? 1 : 0 }')
            [[ $full == 1 ]] && break
        done
        echo "==> $s filled: $(curl -s "http://127.0.0.1:${HTTP[$s]}/metrics" | grep -E '^ratelimit_memory_store_(bytes|counters) ' | tr '\n' ' ')"
    done
fi

TICK=$(getconf CLK_TCK)
echo "==> profile $PROFILE: $ROUNDS rounds, ${WARMUP}s warm-up + ${DURATION}s each, $PROCS x $CONNS x $STREAMS streams; logs in $OUT"
calls() { # calls SERVER: script calls it has sent to Redis so far (0 for others)
    [[ -n ${HTTP[$1]:-} ]] || { echo 0; return; }
    if [[ $1 == wan* ]]; then
        # A named store's calls: what the bench's redis-server processed
        # (only the server measured uses it during its round).
        redis-cli -p "$rport" INFO stats | tr -d '\r' | awk -F: '/^total_commands_processed:/ { print $2 + 0 }'
        return
    fi
    # Summed over the series, one per named store when a server has several.
    curl -s "http://127.0.0.1:${HTTP[$1]}/metrics" | awk '/^ratelimit_redis_calls_total[ {]/ { c += $2 } END { print c + 0 }'
}
printf 'round\tserver\treq/s\tp99_ms\tcpu_us_per_req\tcpu_us_per_req_with_redis\tcalls_per_100\n' | tee "$OUT/rounds.tsv"
for round in $(seq "$ROUNDS"); do
    # Every other round in reverse order: a server measured right after
    # another on the same redis-server finds its keyspace grown and still
    # expiring, and one measured after the no-op servers finds it empty, so
    # a fixed order favours one of two builds compared.
    order=("${SERVERS[@]}")
    if ((round % 2 == 0)); then
        order=()
        for ((i = ${#SERVERS[@]} - 1; i >= 0; i--)); do order+=("${SERVERS[i]}"); done
    fi
    for s in "${order[@]}"; do
        h2 "${PORT[$s]}" "warm-$s" "$WARMUP" >/dev/null
        k0=$(calls "$s")
        c0=$(cpu_ticks "${PIDOF[$s]}") r0=$(cpu_ticks "${STORE_PIDS[@]}")
        read -r rate p99 done_ < <(h2 "${PORT[$s]}" "$s-$round" "$DURATION")
        c1=$(cpu_ticks "${PIDOF[$s]}") r1=$(cpu_ticks "${STORE_PIDS[@]}")
        k1=$(calls "$s")
        per100=$(awk -v k=$((k1 - k0)) -v n="$done_" 'BEGIN { printf "%.2f", k * 100 / n }')
        per=$(awk -v c=$((c1 - c0)) -v n="$done_" -v t="$TICK" 'BEGIN { printf "%.1f", c / t * 1e6 / n }')
        with=$(awk -v c=$((c1 - c0 + r1 - r0)) -v n="$done_" -v t="$TICK" 'BEGIN { printf "%.1f", c / t * 1e6 / n }')
        [[ $s == redis* || $s == cluster* || $s == wan* ]] || { with=-; per100=-; }
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$s" "$rate" "$p99" "$per" "$with" "$per100" | tee -a "$OUT/rounds.tsv"
    done
done

echo "==> medians"
python3 - "$OUT/rounds.tsv" "${SERVERS[@]}" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
med = {}
servers = sys.argv[2:]
for s in servers:
    r = [x for x in rows if x[1] == s]
    med[s] = [statistics.median(float(x[i]) for x in r) for i in (2, 3, 4)]
    if s.startswith(("redis", "cluster", "wan")):
        med[s].append(statistics.median(float(x[5]) for x in r))
        med[s].append(statistics.median(float(x[6]) for x in r))
best = max(med["ceiling"][0], med["ceiling_tuned"][0])
print("server\treq/s\tratio_to_better_noop\tp99_ms\tcpu_us_per_req\tscript_calls_per_100")
for s in servers:
    rate, p99, cpu = med[s][:3]
    extra = f" ({med[s][3]:.1f} with redis-server)" if s.startswith(("redis", "cluster", "wan")) else ""
    calls = f"{med[s][4]:.2f}" if s.startswith(("redis", "cluster", "wan")) else "-"
    print(f"{s}\t{rate:.0f}\t{rate / best:.2f}"
          f"\t{p99:.2f}\t{cpu:.1f}{extra}\t{calls}")
EOF
