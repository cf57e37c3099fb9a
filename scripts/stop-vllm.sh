#!/usr/bin/env bash
# Stops engines started by scripts/start-vllm.sh: sends SIGTERM to the process group named in each
# PID_FILE, waits up to 20 s for it to end, then sends SIGKILL. Removes the pid file.
#
#   scripts/stop-vllm.sh RUN_DIR/vllm-PORT.pid [more pid files...]
set -euo pipefail

[ "$#" -ge 1 ] || { echo "usage: scripts/stop-vllm.sh PID_FILE..." >&2; exit 1; }

# Whether any process of session $1 (start-vllm.sh runs each engine in its own session, whose id
# is its process group id) is still running (zombies, which this machine's init may
# never reap, do not count).
group_alive() {
  ps -o stat= -s "$1" 2>/dev/null | grep -qv "^Z"
}

status=0
for pid_file in "$@"; do
  if [ ! -f "$pid_file" ]; then
    echo "stop-vllm: no pid file $pid_file" >&2
    status=1
    continue
  fi
  pid=$(cat "$pid_file")
  if ! [[ "$pid" =~ ^[0-9]+$ ]]; then
    echo "stop-vllm: $pid_file does not hold a pid ('$pid')" >&2
    status=1
    continue
  fi
  if group_alive "$pid" && kill -TERM -- "-$pid" 2>/dev/null; then
    for _ in $(seq 1 40); do
      group_alive "$pid" || break
      sleep 0.5
    done
    if group_alive "$pid"; then
      echo "stop-vllm: process group $pid ignored SIGTERM for 20 s; sending SIGKILL" >&2
      kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    echo "stop-vllm: stopped process group $pid ($pid_file)"
  else
    echo "stop-vllm: process group $pid ($pid_file) was not running"
  fi
  rm -f "$pid_file"
done
exit "$status"
