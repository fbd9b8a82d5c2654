#!/usr/bin/env bash
# The tools make test needs, checked before it starts: Go (at least
# go.mod's go line), Node.js 18 or later and npm (the conformance suite),
# and Chromium (the browser test). With --race (make race), gcc with cgo on
# too: the race detector needs them; make test builds with CGO off.
# Each missing one is named with the command that installs it on Debian;
# the exit status is 1 if any is missing, after listing them all.
# Chromium alone may be missing where apt-get can install it: make test
# then installs Debian's package itself (scripts/ensure-chromium.sh).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
race=0
[ "${1:-}" = "--race" ] && race=1
target="make test"
[ "$race" = 1 ] && target="make race"
missing=()
miss() { missing+=("$1"); }

# version_ge A B: A >= B, each a dotted version (1.26.0, 18.19.1).
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

want_go="$(awk '$1 == "go" { print $2; exit }' "$root/go.mod")"
if ! command -v go >/dev/null 2>&1; then
	miss "go: not on PATH; install Go $want_go or later from https://go.dev/dl/ (Debian 12's golang package is 1.19, too old) and put its bin/ on PATH"
else
	have_go="$(go env GOVERSION 2>/dev/null | sed 's/^go//; s/[^0-9.].*$//')"
	if [ -z "$have_go" ] || ! version_ge "$have_go" "$want_go"; then
		miss "go: ${have_go:-unknown version} is older than go.mod's $want_go; install Go $want_go or later from https://go.dev/dl/ (Debian 12's golang package is 1.19, too old)"
	fi
fi

cc="${CC:-gcc}"
have_cc=""
if [ "$race" = 1 ]; then
	if ! command -v "$cc" >/dev/null 2>&1; then
		miss "$cc: not on PATH (go test -race needs a C compiler); install it: apt-get install gcc"
	elif command -v go >/dev/null 2>&1 && [ "$(go env CGO_ENABLED 2>/dev/null)" != "1" ]; then
		miss "cgo: CGO_ENABLED is not 1 (go test -race needs it); unset CGO_ENABLED or set it to 1"
	else
		have_cc="$cc, "
	fi
fi

want_node=18
if ! command -v node >/dev/null 2>&1; then
	miss "node: not on PATH (the conformance suite runs the official WeCom SDK); install it: apt-get install nodejs (Debian 12: Node.js 18)"
else
	have_node="$(node --version 2>/dev/null | sed 's/^v//')"
	if [ -z "$have_node" ] || ! version_ge "$have_node" "$want_node"; then
		miss "node: ${have_node:-unknown version} is older than $want_node; install Node.js $want_node or later: apt-get install nodejs (Debian 12 and later)"
	fi
fi
if ! command -v npm >/dev/null 2>&1; then
	miss "npm: not on PATH (the conformance suite installs the WeCom SDK with it); install it: apt-get install npm"
fi

chromium=""
for b in "${BOTCTL_CHROMIUM:-}" chromium chromium-browser google-chrome; do
	if [ -n "$b" ] && command -v "$b" >/dev/null 2>&1; then
		chromium="$b"
		break
	fi
done
if [ -z "$chromium" ]; then
	if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null 2>&1; }; then
		echo "check-prereqs: chromium: not on PATH; make test installs Debian's package next (scripts/ensure-chromium.sh)" >&2
	else
		miss "chromium: not on PATH (the browser test drives it headless); install it: apt-get install chromium (or set BOTCTL_CHROMIUM to a Chromium binary)"
	fi
fi

if [ "${#missing[@]}" -gt 0 ]; then
	echo "check-prereqs: $target cannot run; missing:" >&2
	for m in "${missing[@]}"; do
		echo "  - $m" >&2
	done
	exit 1
fi
echo "check-prereqs: go $(go env GOVERSION | sed 's/^go//'), ${have_cc}node $(node --version), npm $(npm --version 2>/dev/null), ${chromium:-chromium (to be installed)}: ok" >&2
