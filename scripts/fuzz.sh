#!/usr/bin/env bash
# Runs every fuzz target of the repo (func FuzzXxx in a _test.go file) for
# FUZZTIME each (default 30s), one after the other; stops at the first
# failure, whose input go test saves under that package's
# testdata/fuzz/FuzzXxx/ (commit it: it then runs in make test as a seed).
# Their seeds alone run in every `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-30s}"
go="${GO:-go}"
mapfile -t files < <(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | sort)
n=0
for f in "${files[@]}"; do
	pkg="./$(dirname "$f")"
	for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$f"); do
		n=$((n + 1))
		echo "fuzz: $pkg $target for $fuzztime"
		"$go" test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
	done
done
echo "fuzz: $n targets, none failed"
