#!/usr/bin/env bash
# Submit one job over HTTP with curl.
#
#   examples/cli/submit.sh QUEUE PAYLOAD [HEADER: VALUE]...
#   examples/cli/submit.sh email 'hello' 'X-Client-Id: tenant-a'
#
# SPILLWAY_URL is the admitter (default http://127.0.0.1:8080);
# SPILLWAY_API_KEY, when set, is sent as Authorization: Bearer.
# IDEMPOTENCY_KEY (default: a new random one) names the job: send the
# same key again and the admitter answers with the first verdict
# ("duplicate": true) instead of taking the job twice.
#
# Prints the HTTP status, Spillway-Status, Retry-After and the JSON
# answer. Exit status: 0 admitted or queued (202), 3 rejected (429: try
# again after Retry-After seconds), 1 anything else.
set -euo pipefail

if [ $# -lt 2 ]; then
	echo "usage: $0 QUEUE PAYLOAD ['HEADER: VALUE']..." >&2
	exit 2
fi
url=${SPILLWAY_URL:-http://127.0.0.1:8080}
queue=$1 payload=$2
shift 2
idem=${IDEMPOTENCY_KEY:-$(cat /proc/sys/kernel/random/uuid 2>/dev/null || date +%s%N)}

args=(-sS -X POST --data-binary "$payload" -H "Idempotency-Key: $idem")
for h in "$@"; do args+=(-H "$h"); done
[ -n "${SPILLWAY_API_KEY:-}" ] && args+=(-H "Authorization: Bearer $SPILLWAY_API_KEY")

headers=$(mktemp)
trap 'rm -f "$headers"' EXIT
body=$(curl "${args[@]}" -D "$headers" "$url/v1/queues/$queue/jobs")
code=$(awk 'NR == 1 {print $2}' "$headers")
# header VALUE: the value of a response header, without the CR.
header() { awk -v h="$1" 'tolower($1) == tolower(h ":") {sub(/\r$/, ""); print $2}' "$headers"; }

echo "http $code  spillway-status: $(header Spillway-Status)  retry-after: $(header Retry-After)  idempotency-key: $idem"
echo "$body"
case $code in
202) exit 0 ;;
429) exit 3 ;;
*) exit 1 ;;
esac
