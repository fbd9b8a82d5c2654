#!/usr/bin/env bash
# Installs Debian's chromium when no Chromium is on PATH: the browser test
# (test/browser) drives it headless, and make test requires it
# (BOTCTL_REQUIRE_BROWSER=1). Idempotent; uses sudo when not root.
# Nothing is downloaded but the distribution's package.
set -euo pipefail

for b in "${BOTCTL_CHROMIUM:-}" chromium chromium-browser google-chrome; do
	if [ -n "$b" ] && command -v "$b" >/dev/null 2>&1; then
		exit 0
	fi
done

if ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-chromium: no Chromium on PATH and no apt-get to install it: install chromium (or set BOTCTL_CHROMIUM to a Chromium binary)" >&2
	exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "ensure-chromium: chromium missing, and installing it needs root or sudo: run 'apt-get install chromium' as root" >&2
		exit 1
	fi
	sudo="sudo"
fi
echo "ensure-chromium: installing Debian's chromium for the browser test (test/browser)" >&2
export DEBIAN_FRONTEND=noninteractive
# An old or empty package list (a fresh machine) finds no chromium: update first.
$sudo apt-get update -q >/dev/null
$sudo apt-get install -y -q chromium >/dev/null
command -v chromium >/dev/null
echo "ensure-chromium: $(chromium --version 2>/dev/null | tail -1)" >&2
