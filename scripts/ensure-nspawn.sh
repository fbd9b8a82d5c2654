#!/usr/bin/env bash
# Installs Debian's systemd-container (systemd-nspawn) where it is missing
# and this user may install it: test/deploy boots the exec backend's
# sandbox units in a container with it (TestExecSandboxUnitsIsolateTheProgram).
# That test needs root anyway, so without root nothing is installed and it
# skips, saying why. A failed install is reported, not fatal: the test
# then skips with the command to run (BOTCTL_REQUIRE_SANDBOX=1 makes it
# fail instead). Idempotent; nothing is downloaded but the distribution's
# package.
set -uo pipefail

command -v systemd-nspawn >/dev/null 2>&1 && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	exit 0
fi
echo "ensure-nspawn: installing Debian's systemd-container for the sandbox test (test/deploy)" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q systemd-container >/dev/null 2>&1; then
	# An old or empty package list (a fresh machine) finds nothing: update, then again.
	apt-get update -q >/dev/null 2>&1
	if ! apt-get install -y -q systemd-container >/dev/null; then
		echo "ensure-nspawn: could not install systemd-container; the sandbox test will skip (apt-get install systemd-container)" >&2
	fi
fi
exit 0
