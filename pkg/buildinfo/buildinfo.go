// Package buildinfo holds the version, commit and build date stamped into
// the binary at build time.
//
// A release build (make release, make build) sets all three with
//
//	-ldflags "-X github.com/botctl/botctl/pkg/buildinfo.Version=v0.5.0
//	          -X github.com/botctl/botctl/pkg/buildinfo.Commit=<full hash>
//	          -X github.com/botctl/botctl/pkg/buildinfo.Date=2026-12-08"
//
// where the date is the commit's (so two builds of one commit are the same
// bytes). A plain `go build` or `go run` leaves them empty: the version is
// then "dev", and the commit and date are read from the VCS information the
// go command records, when it recorded any.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version is the release's semantic version, with or without its "v"
// (set with -ldflags -X; empty in a development build).
var Version = ""

// Commit is the full commit hash the binary was built from (-ldflags -X).
var Commit = ""

// Date is the build date, YYYY-MM-DD: the commit's date in a release
// (-ldflags -X).
var Date = ""

// Info is what the binary knows of its own build.
type Info struct {
	// Version is the semantic version without its "v" ("0.5.0"), or "dev".
	Version string `json:"version"`
	// Commit is the commit hash, 12 hex digits at most; empty when unknown.
	Commit string `json:"commit"`
	// Dirty is true when the tree had changes the commit lacks (a
	// development build only).
	Dirty bool `json:"dirty,omitempty"`
	// Built is the build date, YYYY-MM-DD; empty when unknown.
	Built string `json:"built"`
	Go    string `json:"go"`
	OS    string `json:"os"`
	Arch  string `json:"arch"`
}

// Get returns this binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return get(Version, Commit, Date, bi)
}

func get(version, commit, date string, bi *debug.BuildInfo) Info {
	in := Info{Version: strings.TrimPrefix(version, "v"), Commit: commit, Built: date, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi != nil {
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = strings.TrimPrefix(bi.Main.Version, "v")
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if in.Commit == "" {
					in.Commit = s.Value
				}
			case "vcs.time":
				if in.Built == "" && len(s.Value) >= len("2006-01-02") {
					in.Built = s.Value[:len("2006-01-02")]
				}
			case "vcs.modified":
				in.Dirty = commit == "" && s.Value == "true"
			}
		}
	}
	if in.Version == "" {
		in.Version = "dev"
	}
	if len(in.Commit) > 12 {
		in.Commit = in.Commit[:12]
	}
	return in
}

// String is the one line `botctl version` prints:
// "botctl 0.5.0 (commit abc1234, built 2026-12-08, go1.26.8 linux/amd64)".
// A part not known is left out of the brackets.
func (in Info) String() string {
	var parts []string
	if in.Commit != "" {
		c := "commit " + in.Commit
		if in.Dirty {
			c += ", modified"
		}
		parts = append(parts, c)
	}
	if in.Built != "" {
		parts = append(parts, "built "+in.Built)
	}
	parts = append(parts, fmt.Sprintf("%s %s/%s", in.Go, in.OS, in.Arch))
	return "botctl " + in.Version + " (" + strings.Join(parts, ", ") + ")"
}

// String is "VERSION (COMMIT)" as best known: the version a node
// announces in the node registry and botctl status.
func String() string {
	in := Get()
	if in.Commit == "" {
		return in.Version
	}
	return in.Version + " (" + in.Commit + ")"
}
