#!/usr/bin/env bash
# A job's status over HTTP: queued, admitted, running, retrying,
# succeeded, dead, expired or cancelled.
#
#   examples/cli/status.sh JOB_ID
#
# SPILLWAY_URL and SPILLWAY_API_KEY as for submit.sh. Exit status 0 when
# the job is known, 1 otherwise (404: no such job, or its record expired).
set -euo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 JOB_ID" >&2
	exit 2
fi
url=${SPILLWAY_URL:-http://127.0.0.1:8080}
args=(-sS --fail-with-body)
[ -n "${SPILLWAY_API_KEY:-}" ] && args+=(-H "Authorization: Bearer $SPILLWAY_API_KEY")
curl "${args[@]}" "$url/v1/jobs/$1"
echo
