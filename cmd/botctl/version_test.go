package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/pkg/buildinfo"
)

// A binary stamped as make build and make release stamp it says so, in
// the line and in JSON.
func TestVersionOfAStampedBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("links a binary")
	}
	bin := filepath.Join(t.TempDir(), "botctl")
	const pkg = "github.com/botctl/botctl/pkg/buildinfo."
	ldflags := "-X " + pkg + "Version=v0.5.0 -X " + pkg + "Commit=abc1234def5678901234 -X " + pkg + "Date=2026-12-08"
	build := testenv.GoBuild(".", "-ldflags", ldflags, "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "botctl 0.5.0 (commit abc1234def56, built 2026-12-08, " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	if string(out) != want {
		t.Fatalf("botctl version: %q, want %q", out, want)
	}
	out, err = exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var in buildinfo.Info
	if err := json.Unmarshal(out, &in); err != nil {
		t.Fatalf("botctl version --json: %v\n%s", err, out)
	}
	if in != (buildinfo.Info{Version: "0.5.0", Commit: "abc1234def56", Built: "2026-12-08", Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}) {
		t.Fatalf("botctl version --json: %+v", in)
	}
	for _, k := range []string{`"version"`, `"commit"`, `"built"`, `"go"`, `"os"`, `"arch"`} {
		if !strings.Contains(string(out), k) {
			t.Errorf("botctl version --json lacks %s: %s", k, out)
		}
	}
}

// A development build says dev.
func TestVersionOfADevelopmentBuild(t *testing.T) {
	out, _, code := runBotctl(t, "version")
	if code != 0 || !strings.HasPrefix(out, "botctl dev (") || !strings.Contains(out, runtime.Version()) {
		t.Fatalf("botctl version (exit %d): %q", code, out)
	}
}
