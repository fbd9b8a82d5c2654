// Package release tests scripts/release.sh (make release, make image):
// two release builds of one commit are the same bytes, the tarball, the
// .deb and the SBOM hold what they should, the .deb installs, checks,
// removes and purges for real on this machine (as root, with dpkg), and
// the OCI image has a non-root user, the entrypoint, the volume and the
// labels (and runs under podman where podman can run containers).
//
// go test builds linux/amd64 only; BOTCTL_RELEASE_ALL_ARCH=1 (make
// release-check) adds the arm64 cross builds.
package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The version the tests release: any vMAJOR.MINOR.PATCH no tag has.
const (
	version = "v9.8.7"
	v       = "9.8.7"
)

func repo(t *testing.T) string {
	t.Helper()
	// go test runs a test in its package's directory (two below the
	// root); runtime.Caller's file names carry no directory under -trimpath.
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func arches() []string {
	if os.Getenv("BOTCTL_RELEASE_ALL_ARCH") == "1" {
		return []string{"amd64", "arm64"}
	}
	return []string{"amd64"}
}

// script runs scripts/release.sh MODE with args on the work tree as it is
// (--allow-dirty: a test runs on uncommitted changes too).
func script(t *testing.T, mode, out string, args ...string) (string, error) {
	t.Helper()
	args = append([]string{filepath.Join(repo(t), "scripts", "release.sh"), mode, "--out", out,
		"--arch", strings.Join(arches(), " "), "--allow-dirty"}, args...)
	cmd := exec.Command("bash", args...)
	cmd.Dir = repo(t)
	out2, err := cmd.CombinedOutput()
	return string(out2), err
}

// cleanups are the directories of the builds shared between tests,
// removed when the test binary exits.
var cleanups []string

func goarch() string { return runtime.GOARCH }

var (
	firstOnce sync.Once
	firstDir  string
	firstErr  error
	firstOut  string
)

// first is one release build, shared by the tests that read it; the
// directory lives until the test binary exits.
func first(t *testing.T) string {
	t.Helper()
	firstOnce.Do(func() {
		firstDir, firstErr = os.MkdirTemp("", "botctl-release")
		if firstErr == nil {
			cleanups = append(cleanups, firstDir)
			firstOut, firstErr = script(t, "release", firstDir, "--version", version)
		}
	})
	if firstErr != nil {
		t.Fatalf("release.sh release: %v\n%s", firstErr, firstOut)
	}
	return firstDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range cleanups {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// Two release builds of the work tree are the same bytes: SHA256SUMS
// (over every artifact) is equal, and each file is what it lists.
func TestReleaseReproducible(t *testing.T) {
	a := first(t)
	b := t.TempDir()
	if out, err := script(t, "release", b, "--version", version); err != nil {
		t.Fatalf("second release.sh release: %v\n%s", err, out)
	}
	sumsA, err := os.ReadFile(filepath.Join(a, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	sumsB, err := os.ReadFile(filepath.Join(b, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, arch := range arches() {
		want = append(want, "botctl_"+v+"_linux_"+arch+".tar.gz", "botctl_"+v+"_"+arch+".deb")
	}
	want = append(want, "botctl_"+v+"_sbom.cdx.json")
	var listed []string
	for _, line := range strings.Split(strings.TrimSpace(string(sumsA)), "\n") {
		_, name, _ := strings.Cut(line, "  ")
		listed = append(listed, name)
	}
	slices.Sort(want)
	slices.Sort(listed)
	if !slices.Equal(listed, want) {
		t.Errorf("SHA256SUMS lists %v, want %v", listed, want)
	}
	if !bytes.Equal(sumsA, sumsB) {
		t.Errorf("two release builds differ:\n%s\n%s", sumsA, sumsB)
	}
	for _, dir := range []string{a, b} {
		cmd := exec.Command("sha256sum", "--check", "--quiet", "SHA256SUMS")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum --check in %s: %v\n%s", dir, err, out)
		}
	}
}

// make release refuses a VERSION that is not vMAJOR.MINOR.PATCH, naming
// it, before it builds anything.
func TestReleaseRefusesBadVersion(t *testing.T) {
	for _, bad := range []string{"", "0.5.0", "v0.5", "v0.5.0-rc1", "v00.5.0", "latest"} {
		out, err := script(t, "release", t.TempDir(), "--version", bad)
		if err == nil || !strings.Contains(out, "VERSION="+bad+" is not vMAJOR.MINOR.PATCH") {
			t.Errorf("--version %q: %v\n%s", bad, err, out)
		}
	}
}

// The tarball holds the static binary with the version stamped, and
// LICENSE, README.md, docs/ and deploy/ as the tree has them; the SBOM is
// CycloneDX for this version with no timestamp (a time would differ
// between builds).
func TestReleaseContents(t *testing.T) {
	dir := first(t)
	for _, arch := range arches() {
		name := "botctl_" + v + "_linux_" + arch
		files := untar(t, filepath.Join(dir, name+".tar.gz"))
		for _, f := range []string{"LICENSE", "README.md", "CHANGELOG.md", "THIRD_PARTY_NOTICES.md", "docs/operations.md", "deploy/botctl.service",
			"deploy/botctl.example.yaml", "deploy/compose/compose.yaml"} {
			want, err := os.ReadFile(filepath.Join(repo(t), f))
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := files[name+"/"+f]; !ok || !bytes.Equal(got, want) {
				t.Errorf("%s.tar.gz: %s missing or not as the tree has it", name, f)
			}
		}
		bin, ok := files[name+"/botctl"]
		if !ok {
			t.Fatalf("%s.tar.gz has no botctl", name)
		}
		checkStatic(t, bin, arch)
		if !bytes.Contains(bin, []byte(version)) {
			t.Errorf("%s: the binary does not carry %s", name, version)
		}
	}

	raw, err := os.ReadFile(filepath.Join(dir, "botctl_"+v+"_sbom.cdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	var bom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Timestamp string `json:"timestamp"`
			Component struct {
				Name    string `json:"name"`
				Version string `json:"version"`
			} `json:"component"`
		} `json:"metadata"`
		Components []struct {
			Name string `json:"name"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &bom); err != nil {
		t.Fatalf("SBOM: %v", err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Version != version || bom.Metadata.Timestamp != "" {
		t.Errorf("SBOM: format %q, component %s %s, timestamp %q", bom.BOMFormat, bom.Metadata.Component.Name, bom.Metadata.Component.Version, bom.Metadata.Timestamp)
	}
	var names []string
	for _, c := range bom.Components {
		names = append(names, c.Name)
	}
	for _, dep := range []string{"go.etcd.io/etcd/client/v3", "github.com/nats-io/nats.go"} {
		if !slices.Contains(names, dep) {
			t.Errorf("SBOM lists no %s among its %d components", dep, len(names))
		}
	}
}

// untar is a .tar.gz's regular files by name.
func untar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: %s is owned by %d:%d, not root", path, h.Name, h.Uid, h.Gid)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
}

// checkStatic: an ELF for arch with no interpreter (CGO off, static).
func checkStatic(t *testing.T, bin []byte, arch string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("botctl (%s) is not an ELF: %v", arch, err)
	}
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != machine {
		t.Errorf("botctl (%s) is for %v", arch, f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("botctl (%s) asks for a dynamic loader: not static", arch)
		}
	}
}

func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := run(t, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}
