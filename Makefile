# botctl: every target works on a clean clone (Go 1.26 and, for conformance, Node.js 18+ and npm;
# make test checks what it needs first: scripts/check-prereqs.sh).
GO        ?= go
BIN       ?= bin/botctl
PKGS      ?= ./...
# Tests must pass on a loaded 2-core machine: generous timeout. make test
# compiles one configuration, the shipped binary's (CGO off, -trimpath):
# the test binaries, the binaries they start (testenv.GoBuild), the
# release test, vet and staticcheck share one compile of the dependencies.
# The race detector is a second configuration of every dependency (etcd's
# server and nats-server included), about 620 CPU-seconds cold: it runs in
# make race and in make chaos, the pre-release gate, not in make test.
# -p 4: most packages spend most of their time waiting on time windows
# (answers, quotas, TTLs, leases), and the long ones (test/pipeline,
# test/e2e, pkg/serve) each run four of their tests at once
# (testenv.Parallel): a package run takes on average under half a core of
# the static build, so four test binaries at once, with the chaos smoke,
# the conformance suite and staticcheck beside them, keep two cores busy
# without starving a test. A server that cannot listen on port 0 (etcd) is
# started again on other ports when another binary took its port first
# (EADDRINUSE), or given ports from below the kernel's ephemeral range
# (infra.FreeAddrs), where no connection's source port lands. The tests
# pass at any -p; -p only sets how long the run takes.
TESTFLAGS ?= -trimpath -count=1 -timeout 20m -p 4
# The static configuration of make build (CGO off), exported to every go
# command make test runs.
STATIC    := CGO_ENABLED=0
# make race: every package under the race detector (needs cgo and gcc).
RACEFLAGS ?= -race -count=1 -timeout 30m -p 3
# go test starts test binaries in the order given: the longest packages
# first, so the run does not end waiting on one of them alone (each about
# 100–330 s on a loaded machine).
TESTPKGS  ?= $(if $(filter ./...,$(PKGS)),./test/e2e ./test/pipeline ./pkg/serve ./election ./test/release ./test/load ./pkg/heal/health ./pkg/node ./jetstream) $(PKGS)

# The build stamps the version (the latest v* tag reachable, as git describe
# says it: v0.5.0 on a tagged commit, v0.5.0-3-gabc1234 after it; "dev"
# without a tag), the commit and the commit's date (UTC), so two builds of
# one commit carry the same bytes. `botctl version` prints them.
VERSION   ?= $(shell git describe --tags --match 'v[0-9]*' 2>/dev/null)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null)
DATE      ?= $(shell TZ=UTC git log -1 --date=format-local:%Y-%m-%d --format=%cd 2>/dev/null)
BUILDINFO := github.com/botctl/botctl/pkg/buildinfo
LDFLAGS   ?= -s -w -X $(BUILDINFO).Version=$(VERSION) -X $(BUILDINFO).Commit=$(COMMIT) -X $(BUILDINFO).Date=$(DATE)

.PHONY: all build test race run bench ramp chaos chaos-smoke lint vet staticcheck conformance clean install fuzz release release-check image

all: build

# Static (CGO off) and -trimpath, as scripts/release.sh builds a release and
# the tests build the binaries they run (cluster.GoBuild): one compile of
# the dependencies serves them all.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/botctl

# The test command of README.md and .ci/run. The browser test
# (test/browser) needs Chromium: installed here when missing (Debian's
# package), and required, so a machine without it fails instead of
# skipping the demo page's test. First, scripts/check-prereqs.sh: Go,
# Node.js and npm (conformance) and Chromium, each missing one named with
# its install command; then scripts/check-tracked.sh: no tracked file over
# 2 MB or executable binary.
#
# On a cold build cache most of a run is compiling: the one static
# configuration (STATIC, -trimpath) is compiled by make build beside go vet,
# before any test starts (several test packages building the same binary at
# once would each compile it). Then the package tests run with, beside
# them, the conformance suite (the official SDK against botctl sim), the
# chaos smoke (one round of each fault family) and staticcheck: all but
# staticcheck mostly wait, so the two cores serve them at once; each one's
# output is printed after the tests', in that order (scripts/beside.sh).
test:
	bash scripts/check-prereqs.sh
	bash scripts/check-tracked.sh
	bash scripts/beside.sh 'make build GO=$(GO)' -- $(MAKE) vet LINTFLAGS=-trimpath LINTENV=$(STATIC)
	bash scripts/ensure-chromium.sh
	bash scripts/ensure-nspawn.sh
	bash scripts/beside.sh 'make conformance GO=$(GO)' 'make chaos-smoke GO=$(GO)' 'make staticcheck LINTFLAGS=-trimpath LINTENV=$(STATIC) GO=$(GO)' -- \
		env $(STATIC) BOTCTL_REQUIRE_BROWSER=1 $(GO) test $(TESTFLAGS) $(TESTPKGS)

# Every package under the race detector (gcc and cgo; scripts/check-prereqs.sh
# --race checks them), the longest packages first as in make test.
race:
	bash scripts/check-prereqs.sh --race
	env BOTCTL_REQUIRE_BROWSER=1 $(GO) test $(RACEFLAGS) $(TESTPKGS)

# The release artifacts of this commit in dist/ (scripts/release.sh):
# botctl_<V>_linux_{amd64,arm64}.tar.gz, botctl_<V>_{amd64,arm64}.deb, the
# SBOM botctl_<V>_sbom.cdx.json and SHA256SUMS, the same bytes from every
# build of the commit. VERSION must be vMAJOR.MINOR.PATCH; the tree must be
# committed. Tag the commit with VERSION (git tag v0.5.0) and add its
# CHANGELOG.md entry first.
release:
	bash scripts/release.sh release --version '$(VERSION)' --out dist

# The OCI image (both architectures, one index) in dist/botctl_<V>_oci.tar,
# built without a daemon and without pulling anything; load it with
# podman load -i, push it with crane push or skopeo copy.
IMAGE_VERSION ?= $(or $(VERSION),v0.0.0-dev)
image:
	bash scripts/release.sh image --version '$(IMAGE_VERSION)' --out dist

# The release tests with the arm64 cross builds (make test does amd64 only):
# two release builds of this commit are byte-identical, the .deb installs
# and purges on this machine (as root), the image is what it should be.
release-check:
	BOTCTL_RELEASE_ALL_ARCH=1 $(GO) test -count=1 -timeout 30m -v ./test/release

# Every fuzz target for FUZZTIME each (default 30s; scripts/fuzz.sh); a
# failing input is saved under the package's testdata/fuzz/, where make
# test runs it as a seed from then on.
fuzz:
	bash scripts/fuzz.sh

# Binary, systemd unit and config on this machine (scripts/install.sh;
# idempotent; a changed config is kept unless INSTALL_FLAGS=--force).
install: build
	sudo scripts/install.sh --binary $(BIN) $(INSTALL_FLAGS)

# A node with embedded etcd, NATS and a WeCom simulator.
run: build
	$(BIN) serve --demo

# Go benchmarks, then the failover benchmark (real processes; production TTL
# 20s, so about 8 minutes): writes bench/failover.md, fails if a target is missed.
# Then the in-process load benchmarks and the load ramp (`make ramp`).
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)
	$(GO) run ./test/failover -rounds 20 -out bench/failover.md
	$(GO) run ./test/load receipt -out bench/receipt.md
	$(GO) run ./test/load push -out bench/push.md
	$(GO) run ./test/load completion -out bench/completion.md
	$(MAKE) ramp

# The load ramp alone (real processes: etcd, NATS, botctl sim, three botctl
# serve nodes, the naive bot; about 15 minutes): bench/ramp.md, .csv and
# -*.png. RAMP_TOPOLOGY=r3 runs it on the topology production uses, 3 etcd
# members and 3 NATS servers with JetStream replicas 3 (six more processes on
# the same cores), into bench/ramp-r3.md; RAMP_STEPS picks the steps, e.g.
# RAMP_TOPOLOGY=r3 RAMP_STEPS=5000@500/30s,10000@500/30s+ make ramp.
RAMP_TOPOLOGY ?= single
RAMP_STEPS    ?=
RAMP_OUT      ?= $(if $(filter single,$(RAMP_TOPOLOGY)),bench/ramp.md,bench/ramp-$(RAMP_TOPOLOGY).md)
ramp:
	$(GO) run ./test/load ramp -topology $(RAMP_TOPOLOGY) $(if $(RAMP_STEPS),-steps $(RAMP_STEPS)) -out $(RAMP_OUT)

# Every package under the race detector (make race), the end-to-end
# partition tests repeated (race detector on), then the chaos matrix on 3 etcd members, 3 NATS servers (R3) and 3 nodes:
# writes bench/chaos.md (+ .csv, -violations.csv, -takeover.png); exits 1 if an
# invariant broke. The pre-release gate: `make chaos ROUNDS=3` on one commit.
# A round of every scenario takes about an hour and a half in one lane on 2
# cores with answers of 5–60 s (the three freeze-* scenarios hold their
# fault 5 minutes each; quorum-loss-etcd, disk-full-nats, ai-backend-faults
# and kill-leader-mid-download take 3–7 minutes a round; the others less);
# PARALLEL lanes (each a cluster of its own, no process shared) run
# disjoint scenarios side by side, so a round takes about its longest lane.
# CHAOS_ROUNDS is the older name of ROUNDS.
ROUNDS       ?= 3
CHAOS_ROUNDS ?= $(ROUNDS)
PARALLEL     ?= 3
chaos: race
	$(GO) test -race -count=5 -timeout 20m -run Partition -v ./test/e2e
	$(GO) run ./test/chaos -rounds $(CHAOS_ROUNDS) -parallel $(PARALLEL) -out bench/chaos.md

# One round of each smoke scenario (every fault family), small traffic,
# under 5 minutes on 2 cores.
# Built as testenv.GoBuild builds the binaries it runs (CGO off,
# -trimpath), so the test and the binaries share one compile.
chaos-smoke:
	BOTCTL_CHAOS=1 CGO_ENABLED=0 $(GO) test -trimpath -count=1 -timeout 10m -run TestChaosSmoke -v ./test/chaos

# go vet and staticcheck (a pinned version from the Go module proxy).
# LINTFLAGS are build flags and LINTENV environment both check the code
# under (make test: the static configuration, to share the test binaries'
# build).
LINTFLAGS ?=
LINTENV   ?=
lint: vet staticcheck
vet:
	env $(LINTENV) $(GO) vet $(LINTFLAGS) $(PKGS)
staticcheck:
	env $(LINTENV) GOFLAGS='$(LINTFLAGS)' $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

conformance: build
	bash test/conformance/run.sh

clean:
	rm -rf bin dist
