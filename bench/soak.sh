#!/usr/bin/env bash
# Soak: floodgate under load for MINUTES minutes, RSS and open fds printed
# every STEP seconds (not part of CI). The load is the two things that leak
# if anything does: new descriptors all the time (examples/wide_load, each
# step a new prefix, so the store keeps creating counters) and connections
# opened and closed (each step, h2load opens CHURN connections that send a
# few requests each and close).
#
#   STORE=memory|redis (memory), MINUTES (2), STEP (10), CHURN (200),
#   SNAPSHOT=1 (the embedded store writes its snapshot every second), OUT.
#
# Prints one row per step: seconds, RSS (KiB), open fds, requests in the
# step; then the first and last rows' RSS and fds side by side. Needs
# h2load, redis-server (STORE=redis), curl, python3.
set -euo pipefail
cd "$(dirname "$0")/.."

STORE=${STORE:-memory}
MINUTES=${MINUTES:-2}
STEP=${STEP:-10}
CHURN=${CHURN:-200}
SNAPSHOT=${SNAPSHOT:-0}
OUT=${OUT:-$(mktemp -d -t floodgate-soak.XXXXXX)}
mkdir -p "$OUT"
BIN=target/release
METHOD=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit

for tool in h2load curl python3; do
    command -v "$tool" >/dev/null || { echo "missing $tool" >&2; exit 1; }
done
source bench/lib.sh

cargo build --release --locked --bin floodgate --example grpc_body --example wide_load
"$BIN/examples/grpc_body" encode bench "client=soak" >"$OUT/body.bin"

args=(serve --config-dir bench/config --store "$STORE" --log-level warn)
if [[ $STORE == redis ]]; then
    start_redis "$OUT/redis"
    args+=(--redis-url "127.0.0.1:$REDIS_PORT")
fi
env_args=()
[[ $SNAPSHOT == 1 ]] && env_args+=(MEMORY_STORE_SNAPSHOT_PATH="$OUT/memory.snap")
port=$(free_port)
http=$(free_port)
env "${env_args[@]}" "$BIN/floodgate" "${args[@]}" --grpc-addr "127.0.0.1:$port" \
    --http-addr "127.0.0.1:$http" >"$OUT/floodgate.log" 2>&1 &
PID=$!
PIDS+=("$PID")
wait_for curl -sf "http://127.0.0.1:$http/healthcheck"

rss() { awk '/^VmRSS/ { print $2 }' "/proc/$PID/status"; }
fds() { ls "/proc/$PID/fd" | wc -l; }

steps=$((MINUTES * 60 / STEP))
echo "==> $STORE store, $MINUTES min, a row every ${STEP}s; logs in $OUT"
printf 'seconds\trss_kib\tfds\trequests\n' | tee "$OUT/soak.tsv"
printf '0\t%s\t%s\t0\n' "$(rss)" "$(fds)" | tee -a "$OUT/soak.tsv"
for step in $(seq "$steps"); do
    "$BIN/examples/wide_load" "127.0.0.1:$port" 8 8 "$STEP" 20000 "s$step-" >"$OUT/wide-$step.txt" 2>&1 &
    wide=$!
    # Connections opened and closed: CHURN clients, 5 requests each.
    h2load -n $((CHURN * 5)) -c "$CHURN" -m 1 -t 1 \
        -H 'content-type: application/grpc' -H 'te: trailers' -d "$OUT/body.bin" \
        "http://127.0.0.1:$port$METHOD" >"$OUT/churn-$step.txt" 2>&1 || true
    wait "$wide"
    done_=$(awk '{ print $3 }' "$OUT/wide-$step.txt")
    printf '%s\t%s\t%s\t%s\n' $((step * STEP)) "$(rss)" "$(fds)" "$done_" | tee -a "$OUT/soak.tsv"
done
python3 - "$OUT/soak.tsv" <<'PY'
import sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()[1:]]
# The first row after one step: the store and the allocator have warmed up.
first, last = rows[1], rows[-1]
rss = (int(last[1]) - int(first[1])) / int(first[1]) * 100
print(f"RSS {first[1]} KiB -> {last[1]} KiB ({rss:+.1f} %), fds {first[2]} -> {last[2]}, "
      f"{sum(int(r[3]) for r in rows)} requests")
PY
