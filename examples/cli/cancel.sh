#!/usr/bin/env bash
# Cancel a queued job over HTTP: it leaves the backlog and never runs.
#
#   examples/cli/cancel.sh JOB_ID
#
# SPILLWAY_URL and SPILLWAY_API_KEY as for submit.sh. A job that already
# left the backlog answers 409 with its state; exit status 0 only when the
# job was cancelled.
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 JOB_ID" >&2
	exit 2
fi
url=${SPILLWAY_URL:-http://127.0.0.1:8080}
args=(-sS --fail-with-body -X DELETE)
[ -n "${SPILLWAY_API_KEY:-}" ] && args+=(-H "Authorization: Bearer $SPILLWAY_API_KEY")
curl "${args[@]}" "$url/v1/jobs/$1"
echo
