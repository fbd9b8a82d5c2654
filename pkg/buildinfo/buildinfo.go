// Package buildinfo holds the version stamped into the binary at build time.
package buildinfo

import "runtime/debug"

// Version is set with -ldflags "-X github.com/botctl/botctl/pkg/buildinfo.Version=…";
// otherwise it is read from the module's build info.
var Version = ""

// Commit is set like Version; otherwise the VCS revision, when known.
var Commit = ""

// String is "VERSION (COMMIT)" as best known.
func String() string {
	v, c := Version, Commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && c == "" {
				c = s.Value
			}
		}
	}
	if v == "" {
		v = "dev"
	}
	if c == "" {
		return v
	}
	if len(c) > 12 {
		c = c[:12]
	}
	return v + " (" + c + ")"
}
