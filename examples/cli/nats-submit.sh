#!/usr/bin/env bash
# Submit one job through the NATS door with the nats CLI.
#
#   examples/cli/nats-submit.sh QUEUE PAYLOAD [HEADER:VALUE]...
#   examples/cli/nats-submit.sh email 'hello' 'X-Client-Id:tenant-a'
#
# NATS_URL is the server (default nats://127.0.0.1:4222); NATS is the nats
# CLI to run (default: nats on PATH). IDEMPOTENCY_KEY as for submit.sh.
# Prints the door's JSON answer; its status is admitted, queued, rejected
# (with retry_after_ms) or error.
#
# The one-liner it runs:
#   nats request spillway.submit.email 'hello' -H 'X-Client-Id:tenant-a' -H 'Idempotency-Key:k1'
set -euo pipefail

if [ $# -lt 2 ]; then
	echo "usage: $0 QUEUE PAYLOAD ['HEADER:VALUE']..." >&2
	exit 2
fi
queue=$1 payload=$2
shift 2
idem=${IDEMPOTENCY_KEY:-$(cat /proc/sys/kernel/random/uuid 2>/dev/null || date +%s%N)}

args=(request --server "${NATS_URL:-nats://127.0.0.1:4222}" --raw --timeout 10s
	"spillway.submit.$queue" "$payload" -H "Idempotency-Key:$idem")
for h in "$@"; do args+=(-H "$h"); done
# NATS may hold a command with its arguments (go run ... for instance).
# shellcheck disable=SC2086
${NATS:-nats} "${args[@]}"
echo
