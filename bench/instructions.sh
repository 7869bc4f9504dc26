#!/usr/bin/env bash
# Instructions per request, counted by valgrind's callgrind: a figure that
# does not move with the machine's noise, unlike req/s on a shared host
# (not part of CI).
#
#   Each server in SERVERS runs under callgrind with counting off; after
#   a warm-up, counting is switched on for the measured load and off
#   again. PROFILE=hot (default): h2load, C connections x M streams, the
#   hot profile's request (one descriptor, a rule never reached), WARM
#   requests then N. PROFILE=wide: examples/wide_load as compare.sh's wide
#   profile (a new descriptor value per request), 2 s then SECS seconds,
#   divided by the requests it counted. Prints the user-space instructions per
#   request of each server and the no-op's share of them (what req/s
#   would show if every instruction cost the same: kernel time, cache
#   misses and waits are not counted). The callgrind files stay in OUT
#   (`callgrind_annotate --inclusive=yes OUT/<server>.out.1` reads them).
#   HEADER adds one request header to h2load's calls (hot profile):
#   HEADER='grpc-timeout: 1n' sends every request with a deadline already
#   passed, so floodgate sheds each one (answered by FAILURE_MODE,
#   uncounted); the `shed` column, read from floodgate's /metrics
#   (ratelimit_shed_total) after the run, says how many were (warm-up
#   included: WARM + N when all were).
#
#   Servers: ceiling (the no-op, `--no-lifo` as compare.sh's better one),
#   memory (floodgate, embedded store), redis and redis_lease (floodgate
#   on a redis-server of its own, the hot key plain or leased; a 10 s
#   REDIS_TIMEOUT, as callgrind slows floodgate some fifty times). Two runs
#   of the no-op or the embedded store agree within about 0.5 %; on Redis
#   within about 1.5 %, as how many requests share a call to Redis depends
#   on timing.
#
# Settings (environment): SERVERS ("ceiling memory"), PROFILE (hot), N
# (20000), WARM (2000), SECS (10, wide), C (4), M (8), HEADER (none), OUT
# (a new temporary directory). Needs valgrind, h2load, curl, redis-server,
# python3.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

SERVERS=${SERVERS:-ceiling memory}
PROFILE=${PROFILE:-hot}
SECS=${SECS:-10}
N=${N:-20000}
WARM=${WARM:-2000}
C=${C:-4}
M=${M:-8}
HEADER=${HEADER:-}
OUT=${OUT:-$(mktemp -d -t floodgate-instructions.XXXXXX)}
mkdir -p "$OUT"
BIN=target/release
METHOD=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit

echo "==> building release binaries"
cargo build --release --locked --bin floodgate --example grpc_body --example ceiling --example wide_load
"$BIN/examples/grpc_body" encode bench "client=c0" >"$OUT/body.bin"
"$BIN/examples/grpc_body" encode bench "leased=c0" >"$OUT/body-lease.bin"

# measure NAME BODY PORT COMMAND…: runs COMMAND under callgrind and prints
# its instructions per request. METRICS_PORT, when set, is the server's
# HTTP port: its ratelimit_shed_total is read after the run.
measure() {
    local name=$1 body=$2 port=$3 vpid total
    shift 3
    rm -f "$OUT/$name.out"*
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/$name.out" \
        "$@" >"$OUT/$name.log" 2>&1 &
    vpid=$!
    PIDS+=("$vpid")
    # Under callgrind a start takes seconds: up to 60 s for the port.
    for _ in $(seq 600); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
        sleep 0.1
    done
    local requests=$N
    if [[ $PROFILE == wide ]]; then
        local load=("$BIN/examples/wide_load" "127.0.0.1:$port" "$C" "$M")
        "${load[@]}" 2 250000 warm- >"$OUT/$name-warm.txt" 2>&1
        callgrind_control -i on "$vpid" >/dev/null
        "${load[@]}" "$SECS" 250000 w- >"$OUT/$name-load.txt" 2>&1
        callgrind_control -i off "$vpid" >/dev/null
        # `req/s p99_ms requests errors`
        read -r _ _ requests errors <"$OUT/$name-load.txt"
        if [[ $errors != 0 || $requests == 0 ]]; then
            echo "error: $name answered $errors errors of $requests (see $OUT/$name-load.txt)" >&2
            exit 1
        fi
    else
        local load=(h2load -c "$C" -m "$M" -t 1 -H 'content-type: application/grpc' -H 'te: trailers')
        if [[ -n $HEADER ]]; then load+=(-H "$HEADER"); fi
        load+=(-d "$body" "http://127.0.0.1:$port$METHOD")
        "${load[@]}" -n "$WARM" >"$OUT/$name-warm.txt" 2>&1
        callgrind_control -i on "$vpid" >/dev/null
        "${load[@]}" -n "$N" >"$OUT/$name-load.txt" 2>&1
        callgrind_control -i off "$vpid" >/dev/null
        if ! grep -q "status codes: $N 2xx" "$OUT/$name-load.txt"; then
            echo "error: $name did not answer all $N requests (see $OUT/$name-load.txt)" >&2
            exit 1
        fi
    fi
    callgrind_control -d "$vpid" >/dev/null
    local shed=-
    if [[ -n ${METRICS_PORT:-} ]]; then
        curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" >"$OUT/$name-metrics.txt"
        shed=$(awk '/^ratelimit_shed_total/ {s += $2} END {print s + 0}' "$OUT/$name-metrics.txt")
    fi
    kill -INT "$vpid" 2>/dev/null || true
    wait "$vpid" 2>/dev/null || true
    total=$(callgrind_annotate --auto=no "$OUT/$name.out.1" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    echo "$name $((total / requests)) $shed" >>"$OUT/results.txt"
}

: >"$OUT/results.txt"
for server in $SERVERS; do
    port=$(free_port)
    http=$(free_port)
    METRICS_PORT=$http
    case $server in
    ceiling)
        METRICS_PORT=
        measure ceiling "$OUT/body.bin" "$port" "$BIN/examples/ceiling" "127.0.0.1:$port" --no-lifo
        ;;
    memory)
        measure memory "$OUT/body.bin" "$port" "$BIN/floodgate" serve --config-dir bench/config \
            --store memory --grpc-addr "127.0.0.1:$port" --http-addr "127.0.0.1:$http" --log-level warn
        ;;
    redis | redis_lease)
        start_redis "$OUT/redis-$server"
        body="$OUT/body.bin"
        [[ $server == redis_lease ]] && body="$OUT/body-lease.bin"
        measure "$server" "$body" "$port" "$BIN/floodgate" serve --config-dir bench/config \
            --store redis --redis-url "127.0.0.1:$REDIS_PORT" --redis-timeout 10s \
            --grpc-addr "127.0.0.1:$port" --http-addr "127.0.0.1:$http" --log-level warn
        kill -INT "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
        ;;
    *)
        echo "error: unknown server $server" >&2
        exit 1
        ;;
    esac
done

echo "==> instructions per request ($PROFILE profile, $C x $M streams${HEADER:+, header $HEADER}); files in $OUT"
python3 - "$OUT/results.txt" <<'EOF'
import sys
rows = [line.split() for line in open(sys.argv[1]) if line.strip()]
noop = next((int(n) for name, n, _ in rows if name == "ceiling"), None)
print("server\tinstructions_per_request\tno-op_share\tshed")
for name, n, shed in rows:
    share = f"{noop / int(n):.3f}" if noop else "-"
    print(f"{name}\t{n}\t{share}\t{shed}")
EOF
