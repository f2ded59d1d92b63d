# Three release replicas on loopback for the benchmark scripts (sourced).
#
#   start_replicas DIR PORT [FLAG...]   replicas 1-3 on PORT+1..PORT+3, data
#                                       and logs in DIR, extra coordinator
#                                       flags after PORT; returns once one
#                                       is the leader (or after 20 s)
#   stop_replicas                       stops them and waits (also at exit)
#
# Sets `pids` (the replicas, in id order) and `urls` (their base URLs,
# comma-separated). Needs `gpumon`, the binary's path. Raises the open-file
# limit: one connection per simulated agent, and a few per replica.

ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

pids=()
urls=""

stop_replicas() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
}
trap 'stop_replicas' EXIT

start_replicas() {
    local dir=$1 port=$2 peers="" i
    shift 2
    urls=""
    for i in 1 2 3; do
        peers+="${peers:+,}$i=127.0.0.1:$((port + i))"
        urls+="${urls:+,}http://127.0.0.1:$((port + i))"
    done
    for i in 1 2 3; do
        "$gpumon" coordinator --id "$i" --peers "$peers" --data-dir "$dir/d$i" "$@" \
            >"$dir/replica$i.log" 2>&1 &
        pids+=("$!")
    done
    for _ in $(seq 1 100); do
        if curl -sf "http://127.0.0.1:$((port + 1))/api/v1/raft" 2>/dev/null | grep -q '"leader":[0-9]'; then
            return 0
        fi
        sleep 0.2
    done
}
