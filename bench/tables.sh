#!/usr/bin/env bash
# Limit tables at scale (not part of CI): a table of N entries (1,000,000)
# imported through the API, on the embedded store (TABLES_PATH) and on Redis
# with two instances. Prints, per store: the import's wall time (the
# API's answer, all checks and the durable write included), the server's
# resident memory per entry (RSS after the import less RSS before, over N),
# and for Redis the time until the second instance lists every entry, and
# Redis's own time in the change script (INFO commandstats). Then the embedded
# store restarted: the time until it answers health with the table read
# back from its log, and its resident memory per entry then (against a
# process with no table).
#
# Settings (environment): N (1000000), OUT (a new temporary directory).
# Needs curl, python3, redis-server and redis-cli.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

N=${N:-1000000}
OUT=${OUT:-$(mktemp -d -t floodgate-tables.XXXXXX)}
mkdir -p "$OUT/config"
BIN=target/release

echo "==> building release binary"
cargo build --release --locked --bin floodgate

cat >"$OUT/config/tables.yaml" <<'EOF'
domain: bench
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 60, table: plans}
EOF
python3 - "$N" >"$OUT/import.jsonl" <<'EOF'
import sys
n = int(sys.argv[1])
out = sys.stdout
for i in range(n):
    out.write('{"key":"tenant-%07d","entry":{"requests_per_unit":%d,"name":"plan-%d"}}\n' % (i, 100 + i % 1000, i % 7))
EOF
echo "==> $N entries, $(du -h "$OUT/import.jsonl" | cut -f1) of import body"

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# serve NAME [ENV…]: a floodgate on free ports; sets PORT_HTTP and PID.
serve() {
    local name=$1
    shift
    PORT_HTTP=$(free_port)
    env "$@" "$BIN/floodgate" serve --config-dir "$OUT/config" \
        --grpc-addr "127.0.0.1:$(free_port)" --http-addr "127.0.0.1:$PORT_HTTP" \
        --log-level warn >"$OUT/$name.log" 2>&1 &
    PID=$!
    PIDS+=("$PID")
    wait_for curl -sf "http://127.0.0.1:$PORT_HTTP/healthcheck"
}

entries_of() { # entries_of PORT: entries of table plans there
    curl -s "http://127.0.0.1:$1/v1/tables" | python3 -c '
import json, sys
print(next((t["entries"] for t in json.load(sys.stdin) if t["table"] == "plans"), 0))'
}

import() { # import PORT: POSTs the body, prints seconds and checks 200
    local t0 code
    t0=$(now)
    code=$(curl -s -o "$OUT/import-answer.json" -w '%{http_code}' -X POST \
        --data-binary @"$OUT/import.jsonl" "http://127.0.0.1:$1/v1/tables/plans/import")
    [[ $code == 200 ]] || { echo "import answered $code: $(cat "$OUT/import-answer.json")" >&2; exit 1; }
    since "$t0"
}

# Embedded store.
serve memory BACKEND_TYPE=memory TABLES_PATH="$OUT/tables.log"
sleep 1
before=$(rss_kib "$PID")
empty=$before
secs=$(import "$PORT_HTTP")
after=$(rss_kib "$PID")
[[ $(entries_of "$PORT_HTTP") == "$N" ]] || { echo "embedded: entries missing" >&2; exit 1; }
per=$(awk -v a="$after" -v b="$before" -v n="$N" 'BEGIN { printf "%.0f", (a - b) * 1024 / n }')
echo "tables store=memory entries=$N import_s=$secs rss_bytes_per_entry=$per log_bytes=$(stat -c %s "$OUT/tables.log")"
kill "$PID"
wait "$PID" 2>/dev/null || true
t0=$(now)
serve memory-restart BACKEND_TYPE=memory TABLES_PATH="$OUT/tables.log"
healthy=$(since "$t0")
sleep 2
per=$(awk -v a="$(rss_kib "$PID")" -v b="$empty" -v n="$N" 'BEGIN { printf "%.0f", (a - b) * 1024 / n }')
echo "tables store=memory restart_to_healthy_s=$healthy entries=$(entries_of "$PORT_HTTP") rss_bytes_per_entry=$per"
kill "$PID"

# Redis, two instances.
start_redis "$OUT/redis"
serve redis-a BACKEND_TYPE=redis REDIS_URL="127.0.0.1:$REDIS_PORT"
a_port=$PORT_HTTP a_pid=$PID
serve redis-b BACKEND_TYPE=redis REDIS_URL="127.0.0.1:$REDIS_PORT"
b_port=$PORT_HTTP b_pid=$PID
before=$(rss_kib "$b_pid")
redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
t0=$(now)
secs=$(import "$a_port")
for _ in $(seq 600); do
    [[ $(entries_of "$b_port") == "$N" ]] && break
    sleep 0.05
done
seen=$(since "$t0")
[[ $(entries_of "$b_port") == "$N" ]] || { echo "redis: b never listed every entry" >&2; exit 1; }
after=$(rss_kib "$b_pid")
per=$(awk -v a="$after" -v b="$before" -v n="$N" 'BEGIN { printf "%.0f", (a - b) * 1024 / n }')
# Table changes are the only EVAL calls (decisions use EVALSHA).
script_us=$(redis-cli -p "$REDIS_PORT" INFO commandstats | tr -d '\r' |
    sed -n 's/^cmdstat_eval:calls=\([0-9]*\),usec=\([0-9]*\),.*/\2/p')
echo "tables store=redis entries=$N import_s=$secs other_instance_serving_s=$seen rss_bytes_per_entry_other=$per redis_script_us=$script_us redis_used_memory=$(redis-cli -p "$REDIS_PORT" INFO memory | awk -F: '/^used_memory:/ { print $2 }' | tr -d '\r')"
