#!/usr/bin/env bash
# beside.sh "BACKGROUND COMMAND" -- FOREGROUND COMMAND...
#
# Runs the background command (a shell string) beside the foreground one,
# its output kept in a file and printed, under a header, once both ended.
# The exit status is the foreground's if it failed, else the background's:
# neither failure is hidden. make test runs the conformance suite beside
# the package tests this way: both mostly wait (on the SDK's frames, on
# time windows), so the machine's two cores serve both.
set -uo pipefail
[ $# -ge 3 ] && [ "$2" = "--" ] || { echo "usage: beside.sh \"BACKGROUND COMMAND\" -- FOREGROUND COMMAND..." >&2; exit 2; }
bg="$1"
shift 2
log="$(mktemp)"
took="$(mktemp)"
trap 'rm -f "$log" "$took"' EXIT
(
	start=$SECONDS
	bash -c "$bg"
	status=$?
	echo "$((SECONDS - start))" >"$took"
	exit "$status"
) >"$log" 2>&1 &
pid=$!
"$@"
fg_status=$?
wait "$pid"
bg_status=$?
echo "==== beside: $bg (exit $bg_status, $(cat "$took") s)"
cat "$log"
if [ "$fg_status" -ne 0 ]; then
	exit "$fg_status"
fi
exit "$bg_status"
