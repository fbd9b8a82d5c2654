#!/usr/bin/env bash
# Conformance against the official WeCom Node SDK: installs it from npm,
# starts botctl sim on a free loopback port, runs conformance.mjs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${BOTCTL:-$root/bin/botctl}"
command -v node >/dev/null || { echo "conformance: node is not installed (apt-get install nodejs npm)" >&2; exit 1; }
[ -x "$bin" ] || (cd "$root" && go build -o "$bin" ./cmd/botctl)
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)

out="$(mktemp)"
"$bin" sim --listen 127.0.0.1:0 --bot conf-bot:conf-secret --log-level warn >"$out" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$out"' EXIT
url=""
for _ in $(seq 1 200); do
  url="$(grep -o 'ws://[^ ]*/' "$out" | head -n1 || true)"
  [ -n "$url" ] && break
  kill -0 $pid 2>/dev/null || { cat "$out" >&2; echo "conformance: botctl sim exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { cat "$out" >&2; echo "conformance: botctl sim did not report its address" >&2; exit 1; }
echo "conformance: official SDK against botctl sim at $url"
node "$here/conformance.mjs" "$url"
