#!/bin/sh
# install.sh: place botctl's binary, systemd units, configuration and
# documentation (README.md and docs/*.md in /usr/share/doc/botctl, where
# the units' Documentation= lines point, as a package puts them) on
# this machine. Idempotent: running it again changes nothing that is
# already in place; a configuration that differs from the one given is
# never overwritten without --force (the old one is then kept as .bak).
#
#   scripts/install.sh [--binary bin/botctl] [--config FILE] [--cluster]
#                      [--root DIR] [--no-systemctl] [--force]
#
#   --binary FILE   the botctl binary (default: bin/botctl; make build)
#   --config FILE   the node's configuration (default: deploy/botctl.example.yaml)
#   --cluster       also place the example cluster's units for etcd and
#                   nats-server and botctl's cluster drop-in
#   --root DIR      install under DIR instead of / (packaging, tests); no
#                   user is created and systemctl is not run
#   --no-systemctl  do not run systemctl daemon-reload
#   --force         replace a configuration that differs (kept as FILE.bak)
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
binary=$here/bin/botctl
config=$here/deploy/botctl.example.yaml
root=
cluster=0
systemctl=1
force=0
while [ $# -gt 0 ]; do
	case $1 in
	--binary) binary=${2:?--binary needs a file}; shift ;;
	--config) config=${2:?--config needs a file}; shift ;;
	--root) root=${2:?--root needs a directory}; shift; systemctl=0 ;;
	--cluster) cluster=1 ;;
	--no-systemctl) systemctl=0 ;;
	--force) force=1 ;;
	-h|--help) sed -n '2,19p' "$0"; exit 0 ;;
	*) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
	shift
done
[ -x "$binary" ] || { echo "install.sh: no executable $binary (run 'make build', or give --binary)" >&2; exit 1; }
[ -f "$config" ] || { echo "install.sh: no config $config (give --config)" >&2; exit 1; }

changed=0
# place SRC DEST MODE: copy when absent or different; report what was done.
place() {
	if [ -f "$2" ] && cmp -s "$1" "$2"; then
		echo "unchanged  $2"
		return 0
	fi
	mkdir -p "$(dirname "$2")"
	install -m "$3" "$1" "$2.new"
	mv -f "$2.new" "$2"
	echo "installed  $2"
	changed=1
}

if [ -z "$root" ] && ! id botctl >/dev/null 2>&1; then
	useradd --system --home-dir /var/lib/botctl --no-create-home --shell /usr/sbin/nologin botctl
	echo "created    user botctl"
fi

place "$binary" "$root/usr/local/bin/botctl" 0755
place "$here/deploy/botctl.service" "$root/etc/systemd/system/botctl.service" 0644
if [ "$cluster" = 1 ]; then
	place "$here/deploy/example-cluster/etcd.service" "$root/etc/systemd/system/etcd.service" 0644
	place "$here/deploy/example-cluster/nats-server.service" "$root/etc/systemd/system/nats-server.service" 0644
	place "$here/deploy/example-cluster/botctl.service.d/cluster.conf" "$root/etc/systemd/system/botctl.service.d/cluster.conf" 0644
fi
for doc in "$here/README.md" "$here"/docs/*.md; do
	place "$doc" "$root/usr/share/doc/botctl/$(basename "$doc")" 0644
done

# The configuration is the operator's: never silently replaced.
dest=$root/etc/botctl/botctl.yaml
if [ -f "$dest" ] && ! cmp -s "$config" "$dest"; then
	if [ "$force" != 1 ]; then
		echo "install.sh: $dest differs from $config; not overwritten (diff them, or rerun with --force to replace it, keeping $dest.bak)" >&2
		exit 1
	fi
	cp -p "$dest" "$dest.bak"
	echo "kept       $dest.bak"
fi
mkdir -p "$root/etc/botctl/secrets"
chmod 0700 "$root/etc/botctl/secrets"
place "$config" "$dest" 0640
if [ -z "$root" ]; then
	chgrp botctl "$dest"
fi

# Check it as the node will (secrets and certificates may not be in place
# yet: then this says which, and the install still stands).
if ! "$root/usr/local/bin/botctl" config check "$dest"; then
	echo "install.sh: $dest does not pass 'botctl config check' yet; fix it before 'systemctl start botctl'" >&2
fi

if [ "$systemctl" = 1 ] && [ "$changed" = 1 ]; then
	systemctl daemon-reload
	echo "ran        systemctl daemon-reload"
fi
[ "$changed" = 1 ] || echo "nothing to do: everything already in place"
echo "next: systemctl enable --now botctl; journalctl -u botctl -f"
