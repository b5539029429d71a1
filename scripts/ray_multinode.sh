#!/usr/bin/env bash
# Simulate a two-node Ray cluster on this machine and run `janus train` on it:
#
#   bash scripts/ray_multinode.sh [extra janus train args]        # from anywhere in the repo
#
# 1. `ray start --head` (node-0: Trainer, TrajectoryManager, Orchestrator, proxy-0, worker-0/1);
# 2. `ray start --address=...` a second node (node-1: proxy-1, worker-2/3);
# 3. `janus train --backend ray --address 127.0.0.1:PORT --num_workers 4 --workers_per_node 2 --quick`;
# 4. a summary from results.json: the Ray node of every component, one WorkerProxy per node, the
#    workers beside their proxy, and the parameter fetches per node (at most one per version);
# 5. both nodes stopped, always (also on error or Ctrl-C).
#
# Settings (environment variables, with defaults):
#   JANUS_VENV  virtual environment with janus and ray (default .venv; `pip install -e .[ray]`)
#   JANUS_OUT   output directory (default runs/ray-multinode-<date>-<time>)
#   RAY_PORT    GCS port of the head (default: a free port)
#
# Both nodes run on this machine with their own raylets (ports chosen by Ray). On Linux Ray replaces
# the loopback address given to --node-ip-address with the machine's IP, so the nodes listen on it:
# token authentication is on (a fresh random token for this cluster, shared with the nodes and the
# driver through RAY_AUTH_TOKEN). The nodes are stopped by killing the process groups this script
# started; `ray stop` is not used because it stops every Ray process on the machine, other users'
# and other clusters' included.

set -euo pipefail

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$script_dir/.." && pwd)"
cd "$ROOT"
VENV="${JANUS_VENV:-.venv}"
[[ -x "$VENV/bin/janus" && -x "$VENV/bin/ray" ]] || { echo "need janus and ray in $VENV (pip install -e '.[ray]')" >&2; exit 2; }
export PATH="$ROOT/$VENV/bin:$PATH"
OUT="${JANUS_OUT:-runs/ray-multinode-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
PORT="${RAY_PORT:-$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
export RAY_AUTH_MODE=token
export RAY_AUTH_TOKEN="${RAY_AUTH_TOKEN:-$(python -c 'import secrets; print(secrets.token_hex(32))')}"

PIDS=()
stop_nodes() {
    for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -KILL -- "-$pid" 2>/dev/null || true
    done
    PIDS=()
}
trap stop_nodes EXIT
trap 'exit 130' INT TERM

start_node() {  # start_node LOG ARGS...: `ray start --block` in its own process group, wait until up
    local log="$1"; shift
    setsid ray start --block --disable-usage-stats "$@" >"$log" 2>&1 &
    PIDS+=("$!")
    for _ in $(seq 180); do
        grep -q "block forever" "$log" && return 0
        kill -0 "$!" 2>/dev/null || break
        sleep 0.5
    done
    echo "ray start failed, see $log:" >&2; tail -20 "$log" >&2; exit 1
}

echo "head node on 127.0.0.1:$PORT (logs in $OUT)"
start_node "$OUT/head.log" --head --node-ip-address=127.0.0.1 --port="$PORT" --num-cpus=2 --include-dashboard=false
echo "second node"
start_node "$OUT/node.log" --address="127.0.0.1:$PORT" --num-cpus=2

janus train --backend ray --address "127.0.0.1:$PORT" --num_workers 4 --workers_per_node 2 --quick \
    --out "$OUT/train" "$@"  # a folder of its own: janus refuses an --out that holds files (the node logs)

python - "$OUT/train/results.json" <<'EOF'
import json, sys
from collections import defaultdict

run = json.load(open(sys.argv[1]))["runs"][0]
rt = run["runtime"]
by_node = defaultdict(list)
for name, node in rt["nodes"].items():
    by_node[node].append(name)
print(f"\n{len(by_node)} Ray node(s)")
for i, (node, names) in enumerate(sorted(by_node.items(), key=lambda kv: "trainer" not in kv[1])):
    proxies = [n for n in names if n.startswith("proxy-")]
    workers = [n for n in names if n.startswith("worker-")]
    print(f"  node {node[:12]}: proxies {proxies}, workers {workers}, others {sorted(set(names) - set(proxies) - set(workers))}")
print(f"parameter versions published: {rt['param_versions_published']}")
for proxy, n in sorted(rt["param_fetches_per_node"].items()):
    print(f"  {proxy}: {n} parameter fetches (one per version at most)")
ok = all(len([n for n in names if n.startswith("proxy-")]) == 1 for names in by_node.values())
print("one WorkerProxy per node:", "yes" if ok else "NO")
EOF
