package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestStampedBuild(t *testing.T) {
	in := get("v0.5.0", "abc1234def567890", "2026-12-08", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "ffffffffffff"}, {Key: "vcs.time", Value: "2020-01-01T00:00:00Z"}, {Key: "vcs.modified", Value: "true"}}})
	want := "botctl 0.5.0 (commit abc1234def56, built 2026-12-08, " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")"
	if got := in.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	if in.Dirty {
		t.Fatal("a stamped build is never reported modified: its commit was given")
	}
}

func TestDevelopmentBuild(t *testing.T) {
	in := get("", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.time", Value: "2026-12-05T10:11:12Z"}, {Key: "vcs.modified", Value: "true"}}})
	if in.Version != "dev" || in.Commit != "0123456789ab" || in.Built != "2026-12-05" || !in.Dirty {
		t.Fatalf("from go's VCS stamp: %+v", in)
	}
	want := "botctl dev (commit 0123456789ab, modified, built 2026-12-05, " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")"
	if got := in.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}

func TestNothingKnown(t *testing.T) {
	in := get("", "", "", nil)
	want := "botctl dev (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")"
	if got := in.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	// A module version (go install …@v0.5.0) is a version too.
	if in := get("", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.5.1"}}); in.Version != "0.5.1" {
		t.Fatalf("go install's module version: %+v", in)
	}
}
