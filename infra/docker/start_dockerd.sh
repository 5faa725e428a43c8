#!/usr/bin/env bash
# Start a Docker daemon on this machine if none answers, installing docker.io when dockerd is
# missing. Idempotent: when `docker info` already works it does nothing. Needs root.
#
# Usage: bash infra/docker/start_dockerd.sh
# Env:   RLRUN_DOCKERD_LOG (default /var/log/rlrun-dockerd.log), RLRUN_DOCKERD_WAIT_S (default 60)
set -euo pipefail

log_file="${RLRUN_DOCKERD_LOG:-/var/log/rlrun-dockerd.log}"
wait_s="${RLRUN_DOCKERD_WAIT_S:-60}"

if docker info >/dev/null 2>&1; then
    echo "start_dockerd: docker daemon already running"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "start_dockerd: no docker daemon answers and starting one needs root; run as root" >&2
    exit 1
fi

if ! command -v dockerd >/dev/null 2>&1; then
    echo "start_dockerd: installing docker.io"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq docker.io >/dev/null
fi

# A socket or pid file left by a daemon that died would make the new one refuse to start.
if ! pgrep -x dockerd >/dev/null 2>&1; then
    rm -f /var/run/docker.pid /var/run/docker.sock
    nohup dockerd >"$log_file" 2>&1 &
fi

for _ in $(seq "$wait_s"); do
    if docker info >/dev/null 2>&1; then
        echo "start_dockerd: docker daemon ready"
        exit 0
    fi
    sleep 1
done
echo "start_dockerd: dockerd did not answer within ${wait_s}s; last lines of $log_file:" >&2
tail -n 20 "$log_file" >&2 || true
exit 1
