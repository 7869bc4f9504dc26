# Helpers shared by bench/compare.sh and bench/cluster_calls.sh (sourced,
# not run). Every process a script starts goes in PIDS and is stopped on
# exit.

PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

low_free_port() { # a free port whose +10000 (a cluster node's bus port) is valid and free
    python3 -c '
import socket
for _ in range(1000):
    a = socket.socket(); a.bind(("127.0.0.1", 0)); p = a.getsockname()[1]
    if p + 10000 > 65535: continue
    try:
        b = socket.socket(); b.bind(("127.0.0.1", p + 10000)); print(p); break
    except OSError: continue
'
}

stop() { # stop PID: SIGINT, then SIGKILL after 30 s; returns once it is gone
    kill -INT "$1" 2>/dev/null || true
    for _ in $(seq 300); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

wait_for() { # wait_for COMMAND…: retry for up to 10 s
    for _ in $(seq 200); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.05
    done
    echo "timed out: $*" >&2
    exit 1
}

# start_redis DIR [CPU]: a standalone redis-server without persistence on a
# free port, pinned to CPU when given, its files under DIR; sets REDIS_PORT
# and REDIS_PID.
start_redis() {
    local dir=$1 cpu=${2:-}
    local pin=()
    [[ -n $cpu ]] && pin=(taskset -c "$cpu")
    REDIS_PORT=$(free_port)
    mkdir -p "$dir"
    "${pin[@]}" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$dir" --logfile "$dir/redis.log" &
    REDIS_PID=$!
    PIDS+=("$REDIS_PID")
    wait_for redis-cli -p "$REDIS_PORT" PING
}

# start_cluster CPU DIR: a 3-master Redis Cluster pinned to CPU, its files
# under DIR; sets CLUSTER_NODES (host:port each) and CLUSTER_PIDS.
start_cluster() {
    local cpu=$1 dir=$2 n p
    CLUSTER_NODES=() CLUSTER_PIDS=()
    for n in 0 1 2; do
        p=$(low_free_port)
        # A node config left by an earlier run in the same OUT would make
        # the node rejoin that cluster and `--cluster create` refuse it.
        rm -rf "${dir:?}/cluster-$n"
        mkdir -p "$dir/cluster-$n"
        taskset -c "$cpu" redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no \
            --cluster-enabled yes --cluster-config-file "$dir/cluster-$n/nodes.conf" \
            --dir "$dir/cluster-$n" --logfile "$dir/cluster-$n/redis.log" &
        PIDS+=($!)
        CLUSTER_PIDS+=($!)
        wait_for redis-cli -p "$p" PING
        CLUSTER_NODES+=("127.0.0.1:$p")
    done
    redis-cli --cluster create "${CLUSTER_NODES[@]}" --cluster-replicas 0 --cluster-yes \
        >"$dir/cluster-create.log"
    wait_for bash -c "redis-cli -p ${CLUSTER_NODES[0]#*:} CLUSTER INFO | grep -q cluster_state:ok"
}
