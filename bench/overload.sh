#!/usr/bin/env bash
# Goodput under overload (not part of CI): floodgate on the embedded store
# and the no-op server, each pinned to SERVER_CPU, under open-loop load
# (examples/overload.rs, pinned to LOAD_CPU: requests sent on a schedule
# whatever the answers, each with a DEADLINE_MS grpc-timeout as Envoy
# sends it) at 0.5x, 1x, 2x and 4x the capacity first measured closed-loop
# with h2load (CONNS x STREAMS, CAP_SECS, the median of CAP_RUNS runs).
#
# Prints, per server and load: the rate asked, the rate the generator sent
# (one core cannot always send 4x another core's capacity: read the
# achieved load), goodput (decisions within the deadline) per second, and
# the shares within the deadline and shed, and for floodgate the calls shed
# by admission's queue rule and by a passed deadline
# (`ratelimit_shed_total{reason}` read after each load); per load, the
# share of its core the server used (`server_cpu`) and the share the host
# took from that core (`steal`, /proc/stat), and for floodgate its
# capacity measured again after the load (`capacity_after/s`): this host's
# speed moves by a third within minutes, and a load is a multiple of the
# capacity measured before it; then for floodgate one line per load, for
# other tools:
#   overload load=2.0x goodput_ratio=0.83 within_deadline=0.995 shed=0.31
# goodput_ratio: goodput per second over the capacity measured at 1x;
# within_deadline: answered (decision or shed) within the deadline, over
# all requests sent; shed: shed answers over all requests sent.
#
# Settings (environment): SECS (5 per load), CAP_SECS (5), CAP_RUNS (3:
# the capacity is their median), CONNS (4),
# STREAMS (128), GEN_CONNS (8), DEADLINE_MS (20), LOADS ("0.5 1 2 4"),
# SERVER_CPU (1), LOAD_CPU (0), FLOODGATE_ENV (settings for floodgate, e.g.
# "GRPC_MAX_CONCURRENT_STREAMS=4"), OUT (a new temporary directory). Needs
# h2load, curl, python3, taskset and 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

SECS=${SECS:-5}
CAP_SECS=${CAP_SECS:-5}
CAP_RUNS=${CAP_RUNS:-3}
CONNS=${CONNS:-4}
STREAMS=${STREAMS:-128}
# 8 connections, as Envoy opens about one per worker: with 64, the generator
# core spends most of its time in the kernel sending (a write per connection
# per millisecond) and its own lateness swamps the server's.
GEN_CONNS=${GEN_CONNS:-8}
DEADLINE_MS=${DEADLINE_MS:-20}
LOADS=${LOADS:-0.5 1 2 4}
SERVER_CPU=${SERVER_CPU:-1}
LOAD_CPU=${LOAD_CPU:-0}
OUT=${OUT:-$(mktemp -d -t floodgate-overload.XXXXXX)}
mkdir -p "$OUT"
BIN=target/release
METHOD=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit

echo "==> building release binaries"
cargo build --release --locked --bin floodgate --example grpc_body --example ceiling --example overload
"$BIN/examples/grpc_body" encode bench "client=c0" >"$OUT/body.bin"

# capacity PORT: closed-loop req/s, the median of CAP_RUNS runs (one run
# on this shared host measured anywhere from 38,000 to 60,000 req/s for
# the same binary minutes apart, and every load is a multiple of it).
capacity() {
    local i
    for i in $(seq "$CAP_RUNS"); do
        taskset -c "$LOAD_CPU" h2load -D "$CAP_SECS" -c "$CONNS" -m "$STREAMS" -t 1 \
            -H 'content-type: application/grpc' -H 'te: trailers' -d "$OUT/body.bin" \
            "http://127.0.0.1:$1$METHOD" >"$OUT/capacity-$1-$i.txt" 2>&1
        awk '/^finished in/ { sub(",", "", $4); printf "%.0f\n", $4 }' "$OUT/capacity-$1-$i.txt"
    done | sort -n | awk '{ v[NR] = $1 } END { printf "%d", v[int((NR + 1) / 2)] }'
}

# cpu_now PID: the server's CPU time and its core's steal time, in clock
# ticks, and the wall time in ms, space-separated.
cpu_now() {
    local stat steal
    stat=$(cut -d' ' -f14,15 "/proc/$1/stat")
    steal=$(awk -v cpu="cpu$SERVER_CPU" '$1 == cpu { print $9 }' /proc/stat)
    echo "$((${stat% *} + ${stat#* })) $steal $(date +%s%3N)"
}

# run NAME PORT PID: capacity, then each load; rows to $OUT/NAME.tsv.
run() {
    local name=$1 port=$2 pid=$3 cap load rate line before after again
    cap=$(capacity "$port")
    echo "$name capacity $cap req/s (closed loop, $CONNS x $STREAMS streams)"
    for load in $LOADS; do
        rate=$(python3 -c "print(int($cap * $load))")
        # The server's use of its core is sampled over the SECS of sending
        # (the generator then waits up to a second for late answers).
        taskset -c "$LOAD_CPU" "$BIN/examples/overload" "127.0.0.1:$port" "$OUT/body.bin" \
            "$rate" "$SECS" "$GEN_CONNS" "$DEADLINE_MS" >"$OUT/$name-$load.txt" &
        before=$(cpu_now "$pid")
        sleep "$SECS"
        after=$(cpu_now "$pid")
        wait $!
        line=$(grep '^total' "$OUT/$name-$load.txt")
        again=-
        if [ -n "${METRICS:-}" ]; then
            curl -sf "$METRICS" | grep '^ratelimit_shed_total' >"$OUT/$name-$load-shed.txt" || true
            again=$(CAP_RUNS=1 capacity "$port")
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$load" "$cap" "$rate" "$before" "$after" "$again" \
            "$line" >>"$OUT/$name.tsv"
    done
}

start() { # start COMMAND…: pinned to SERVER_CPU; sets PID
    taskset -c "$SERVER_CPU" "$@" >"$OUT/server-${#PIDS[@]}.log" 2>&1 &
    PID=$!
    PIDS+=("$PID")
}

port=$(free_port)
start "$BIN/examples/ceiling" "127.0.0.1:$port" --no-lifo
wait_for python3 -c "import socket; socket.create_connection(('127.0.0.1', $port))"
run noop "$port" "$PID"
# Gone before floodgate starts on the same core: a server past capacity
# still runs its backlog after the generator stops, and one left draining
# took most of the core from floodgate's capacity measure (19,549 req/s
# against 74,716 decided a second at 4x in the same run).
stop "$PID"

port=$(free_port)
http=$(free_port)
start env ${FLOODGATE_ENV:-} "$BIN/floodgate" serve --config-dir bench/config --store memory \
    --grpc-addr "127.0.0.1:$port" --http-addr "127.0.0.1:$http" --log-level warn
wait_for curl -sf "http://127.0.0.1:$http/healthcheck"
# Read after each load: what was shed by admission's queue rule and what
# by a passed deadline (a call whose caller gave up before it started).
METRICS="http://127.0.0.1:$http/metrics"
run floodgate "$port" "$PID"
curl -sf "http://127.0.0.1:$http/metrics" | grep '^ratelimit_shed_total' >"$OUT/shed-metric.txt" || true

python3 - "$OUT" "$SECS" <<'EOF'
import sys, re, os
out, secs = sys.argv[1], int(sys.argv[2])
print()
print("server\tload\tcapacity/s\tasked/s\tsent/s\tgoodput/s\twithin_deadline\tshed\tlate\terrors\tshed_queue\tshed_deadline\tserver_cpu\tsteal\tcapacity_after/s")
tick = os.sysconf("SC_CLK_TCK")
lines = []
def shed_by_reason(name, load):
    path = os.path.join(out, f"{name}-{load}-shed.txt")
    if not os.path.exists(path):
        return None
    return dict((r, int(float(v))) for r, v in re.findall(r'reason="(\w+)"\} (\S+)', open(path).read()))
for name in ("noop", "floodgate"):
    path = os.path.join(out, name + ".tsv")
    if not os.path.exists(path):
        continue
    sheds = {}
    for row in open(path):
        server, load, cap, rate, before, after, again, total = row.rstrip("\n").split("\t", 7)
        (cpu0, steal0, ms0), (cpu1, steal1, ms1) = (map(int, x.split()) for x in (before, after))
        wall = max(ms1 - ms0, 1) / 1000 * tick
        usage = f"{(cpu1 - cpu0) / wall:.2f}\t{(steal1 - steal0) / wall:.2f}\t{again}"
        f = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", total))
        sent = max(f["sent"], 1)
        within = (f["goodput"] + f["shed"]) / sent
        print(f"{server}\t{load}x\t{cap}\t{rate}\t{f['sent'] // secs}\t{f['goodput'] // secs}\t"
              f"{within:.3f}\t{f['shed'] / sent:.3f}\t{f['late'] / sent:.3f}\t{f['errors'] / sent:.3f}\t"
              + ("\t".join(str(shed.get(r, 0) - sheds.get(r, 0)) for r in ("queue", "deadline"))
                 if (shed := shed_by_reason(server, load)) is not None else "-\t-")
              + "\t" + usage)
        sheds = shed or sheds
        if server == "floodgate":
            lines.append(f"overload load={float(load):.1f}x goodput_ratio={f['goodput'] / secs / max(int(cap), 1):.2f} "
                         f"within_deadline={within:.3f} shed={f['shed'] / sent:.2f}")
print()
print("\n".join(lines))
EOF
echo "files in $OUT"
