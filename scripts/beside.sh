#!/usr/bin/env bash
# beside.sh "BACKGROUND COMMAND"... -- FOREGROUND COMMAND...
#
# Runs each background command (a shell string) beside the foreground one,
# all at once; each background command's output is kept in a file of its
# own and printed, under a header with its exit status and time, once all
# have ended, in the order given. The exit status is the foreground's if it
# failed, else the first failed background command's: no failure is
# hidden. make test runs the conformance suite, the chaos smoke and
# staticcheck beside the package tests this way: the tests and the two
# suites mostly wait (on the SDK's frames, on time windows), so the
# machine's two cores serve them all.
set -uo pipefail
bgs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
	bgs+=("$1")
	shift
done
[ ${#bgs[@]} -ge 1 ] && [ $# -ge 2 ] || { echo "usage: beside.sh \"BACKGROUND COMMAND\"... -- FOREGROUND COMMAND..." >&2; exit 2; }
shift
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
pids=()
for i in "${!bgs[@]}"; do
	(
		start=$SECONDS
		bash -c "${bgs[$i]}"
		status=$?
		echo "$((SECONDS - start))" >"$dir/took$i"
		exit "$status"
	) >"$dir/log$i" 2>&1 &
	pids+=($!)
done
"$@"
fg_status=$?
bg_status=0
for i in "${!bgs[@]}"; do
	wait "${pids[$i]}"
	status=$?
	echo "==== beside: ${bgs[$i]} (exit $status, $(cat "$dir/took$i" 2>/dev/null || echo '?') s)"
	cat "$dir/log$i"
	if [ "$bg_status" -eq 0 ]; then
		bg_status=$status
	fi
done
if [ "$fg_status" -ne 0 ]; then
	exit "$fg_status"
fi
exit "$bg_status"
