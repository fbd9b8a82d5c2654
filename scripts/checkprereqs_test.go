// Package scripts holds the repository's shell scripts; its tests run
// them against stand-in tools.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeTools makes a PATH of the coreutils the script uses and a stub for
// each of tools, a name and what it prints.
func fakeTools(t *testing.T, tools map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"awk", "sed", "sort", "head", "id", "dirname", "cat"} {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("%s: %v", name, err)
		}
		if err := os.Symlink(p, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for name, script := range tools {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runCheck(t *testing.T, path string, args ...string) (string, int) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	cmd := exec.Command(bash, append([]string{"check-prereqs.sh"}, args...)...)
	cmd.Env = []string{"PATH=" + path, "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	return string(out), exitCode(t, err)
}

// exitCode is the exit status of a script run that ended with err; a
// run that could not start fails the test.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

// goStub answers `go env GOVERSION` and `go env CGO_ENABLED`.
func goStub(version, cgo string) string {
	return `case "$2" in GOVERSION) echo ` + version + `;; CGO_ENABLED) echo ` + cgo + `;; esac`
}

// Everything missing or too old is listed, each with its install
// command, and the exit status is 1.
func TestCheckPrereqsListsEveryMissingTool(t *testing.T) {
	path := fakeTools(t, map[string]string{"go": goStub("go1.19.8", "1"), "node": "echo v12.22.12"})
	out, code := runCheck(t, path)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	for _, want := range []string{
		"go: 1.19.8 is older than go.mod's 1.26.0; install Go 1.26.0 or later from https://go.dev/dl/",
		"node: 12.22.12 is older than 18; install Node.js 18 or later: apt-get install nodejs",
		"npm: not on PATH (the conformance suite installs the WeCom SDK with it); install it: apt-get install npm",
		"chromium: not on PATH (the browser test drives it headless); install it: apt-get install chromium",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

// make test builds with CGO off: no C compiler needed. make race
// (--race) needs gcc and cgo on, each named when missing.
func TestCheckPrereqsRaceNeedsGccAndCgo(t *testing.T) {
	tools := map[string]string{"go": goStub("go1.26.8", "1"), "node": "echo v18.19.0", "npm": "echo 9.2.0", "chromium": ""}
	if out, code := runCheck(t, fakeTools(t, tools)); code != 0 {
		t.Fatalf("make test without gcc: exit %d, want 0:\n%s", code, out)
	}
	out, code := runCheck(t, fakeTools(t, tools), "--race")
	if code != 1 || !strings.Contains(out, "make race cannot run") || !strings.Contains(out, "gcc: not on PATH (go test -race needs a C compiler); install it: apt-get install gcc") {
		t.Fatalf("--race without gcc: exit %d, want 1 naming gcc:\n%s", code, out)
	}
	tools["gcc"] = ""
	tools["go"] = goStub("go1.26.8", "0")
	out, code = runCheck(t, fakeTools(t, tools), "--race")
	if code != 1 || !strings.Contains(out, "cgo: CGO_ENABLED is not 1") {
		t.Fatalf("--race with cgo off: exit %d, want 1 naming cgo:\n%s", code, out)
	}
	tools["go"] = goStub("go1.26.8", "1")
	if out, code := runCheck(t, fakeTools(t, tools), "--race"); code != 0 || !strings.Contains(out, "gcc, node") {
		t.Fatalf("--race with gcc and cgo: exit %d, want 0 naming gcc:\n%s", code, out)
	}
}

// With every tool there (Node.js 18, what Debian 12 ships), it passes.
func TestCheckPrereqsPasses(t *testing.T) {
	path := fakeTools(t, map[string]string{"go": goStub("go1.26.0", "1"), "gcc": "", "node": "echo v18.19.0", "npm": "echo 9.2.0", "chromium": ""})
	out, code := runCheck(t, path)
	if code != 0 || !strings.Contains(out, ": ok") {
		t.Fatalf("exit %d, want 0:\n%s", code, out)
	}
}
