#!/usr/bin/env bash
# release.sh: botctl's release artifacts, the same bytes from every run on
# one commit (same Go toolchain, same pinned tools).
#
#   scripts/release.sh release --version v0.5.0 [--out dist] [--arch "amd64 arm64"] [--allow-dirty]
#   scripts/release.sh image   --version v0.5.0 [--out dist] [--arch "amd64 arm64"] [--allow-dirty]
#
# release writes into --out, for each --arch:
#   botctl_<V>_linux_<arch>.tar.gz   static binary (CGO off), LICENSE,
#                                    THIRD_PARTY_NOTICES.md, CHANGELOG.md,
#                                    README.md, docs/, deploy/
#   botctl_<V>_<arch>.deb            deploy/debian/nfpm.yaml (nfpm, pinned)
# and once:
#   botctl_<V>_sbom.cdx.json         CycloneDX SBOM of the first --arch's
#                                    binary (cyclonedx-gomod, pinned; no
#                                    timestamp, no serial number)
#   SHA256SUMS                       over all of the above
# image writes botctl_<V>_oci.tar: an OCI image layout archive, one image per
# --arch under one index (scripts/ociimage; nothing is pulled).
#
# <V> is --version without its "v". release takes vMAJOR.MINOR.PATCH only;
# image also takes a pre-release (v0.5.0-3-gabc1234, as git describe says).
# A v* tag of that name, if there is one, must point at HEAD. A tree with
# uncommitted changes is refused (the artifacts would not be the commit
# they name) unless --allow-dirty (tests).
#
# Reproducible: every timestamp is the commit's time (SOURCE_DATE_EPOCH),
# the build is -trimpath -buildvcs=false with fixed -ldflags and GOAMD64 /
# GOARM64, archives are sorted with numeric root ownership and normalized
# modes, gzip stores no name or time.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"

NFPM=github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.48.0
CYCLONEDX=github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0
GO=${GO:-go}

die() {
	echo "release.sh: $*" >&2
	exit 1
}

mode=${1:-}
case $mode in
release | image) shift ;;
-h | --help) sed -n '2,30p' "$0"; exit 0 ;;
*) die "first argument: release or image (see --help)" ;;
esac
version=
out=dist
arches="amd64 arm64"
allow_dirty=0
while [ $# -gt 0 ]; do
	case $1 in
	--version) version=${2:-}; shift ;;
	--out) out=${2:?--out needs a directory}; shift ;;
	--arch) arches=${2:?--arch needs a list such as "amd64 arm64"}; shift ;;
	--allow-dirty) allow_dirty=1 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
	shift
done

semver='^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)'
if [ "$mode" = release ]; then
	[[ $version =~ $semver$ ]] || die "VERSION=$version is not vMAJOR.MINOR.PATCH (e.g. make release VERSION=v0.5.0)"
else
	[[ $version =~ $semver(-[0-9A-Za-z.-]+)?$ ]] || die "VERSION=$version is not vMAJOR.MINOR.PATCH[-PRERELEASE] (e.g. make image VERSION=v0.5.0)"
fi
for a in $arches; do
	case $a in amd64 | arm64) ;; *) die "--arch $a: only amd64 and arm64 are built" ;; esac
done
v=${version#v}

commit=$(git rev-parse HEAD)
if tagged=$(git rev-parse -q --verify "refs/tags/$version^{commit}"); then
	[ "$tagged" = "$commit" ] || die "tag $version is commit $tagged, not HEAD ($commit): check out $version to build it"
fi
if [ "$allow_dirty" != 1 ] && [ -n "$(git status --porcelain --untracked-files=no)" ]; then
	die "the tree has uncommitted changes: commit or stash them (a release is one commit)"
fi
# Every timestamp in every artifact: the commit's.
export SOURCE_DATE_EPOCH
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct HEAD)
date=$(TZ=UTC git log -1 --date=format-local:%Y-%m-%d --format=%cd HEAD)

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

buildinfo=github.com/botctl/botctl/pkg/buildinfo
ldflags="-s -w -X $buildinfo.Version=$version -X $buildinfo.Commit=$commit -X $buildinfo.Date=$date"

# build ARCH: the static binary at $work/bin/ARCH/botctl.
build() {
	mkdir -p "$work/bin/$1"
	CGO_ENABLED=0 GOOS=linux GOARCH=$1 GOAMD64=v1 GOARM64=v8.0 GOFLAGS=-mod=readonly \
		"$GO" build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$work/bin/$1/botctl" ./cmd/botctl
}

# tarball DIR NAME: $out/NAME.tar.gz of DIR's contents under NAME/.
tarball() {
	tar -C "$1" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
		--mode='u+rwX,go+rX,go-w' --format=gnu --transform="s,^\.,$2," -cf - . | gzip -9 -n >"$out/$2.tar.gz"
}

# The tracked files shipped beside the binary, as the tree has them.
shipped() {
	git ls-files -z -- LICENSE THIRD_PARTY_NOTICES.md CHANGELOG.md README.md docs deploy |
		tar --null -T - -cf - | tar -xf - -C "$1"
}

release() {
	for a in $arches; do
		build "$a"
		name=botctl_${v}_linux_$a
		mkdir -p "$work/tar/$a"
		shipped "$work/tar/$a"
		cp "$work/bin/$a/botctl" "$work/tar/$a/botctl"
		tarball "$work/tar/$a" "$name"
	done

	# The package's files: the units with the binary at /usr/bin, the
	# example config, the docs flat in /usr/share/doc/botctl (where the
	# units' Documentation= lines point).
	stage=$work/deb
	mkdir -p "$stage/units" "$stage/doc"
	for u in botctl.service botctl-infra.service botctl-exec.socket botctl-exec@.service; do
		sed 's,/usr/local/bin/botctl,/usr/bin/botctl,g' "deploy/$u" >"$stage/units/$u"
	done
	sed 's,/usr/local/bin/botctl,/usr/bin/botctl,g' deploy/botctl.example.yaml >"$stage/botctl.yaml"
	cp README.md CHANGELOG.md THIRD_PARTY_NOTICES.md docs/*.md "$stage/doc/"
	cp LICENSE "$stage/doc/copyright"
	for a in $arches; do
		cp "$work/bin/$a/botctl" "$stage/botctl"
		DEB_STAGE=$stage DEB_ARCH=$a DEB_VERSION=$version \
			"$GO" run "$NFPM" package --config deploy/debian/nfpm.yaml --packager deb --target "$out/botctl_${v}_$a.deb" >/dev/null
	done

	# From the amd64 binary's build information: the modules linked in,
	# with their go.sum hashes, and the Go standard library. (Licenses are
	# in THIRD_PARTY_NOTICES.md: cyclonedx-gomod's detection would fetch
	# the main module at this version from the module proxy.)
	sbom=$(set -- $arches; echo "$1")
	"$GO" run "$CYCLONEDX" bin -json -std -noserial -notimestamp -version "$version" \
		-output "$out/botctl_${v}_sbom.cdx.json" "$work/bin/$sbom/botctl" 2>"$work/sbom.log" || {
		cat "$work/sbom.log" >&2
		die "cyclonedx-gomod failed"
	}

	(
		cd "$out"
		files=()
		for a in $arches; do files+=("botctl_${v}_linux_$a.tar.gz" "botctl_${v}_$a.deb"); done
		files+=("botctl_${v}_sbom.cdx.json")
		sha256sum "${files[@]}" >SHA256SUMS
	)
	echo "release $version (commit $commit) in $out:"
	sed 's/^/  /' "$out/SHA256SUMS"
}

image() {
	args=()
	for a in $arches; do
		build "$a"
		args+=(--binary "$a=$work/bin/$a/botctl")
	done
	(cd scripts/ociimage && GOFLAGS=-mod=readonly CGO_ENABLED=0 "$GO" run . \
		--version "$version" --commit "$commit" --epoch "$SOURCE_DATE_EPOCH" \
		--ca-certs /etc/ssl/certs/ca-certificates.crt --license "$here/LICENSE" \
		--notices "$here/THIRD_PARTY_NOTICES.md" "${args[@]}" --out "$out/botctl_${v}_oci.tar")
	echo "image $version (commit $commit): $out/botctl_${v}_oci.tar"
}

"$mode"
