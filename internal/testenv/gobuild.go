package testenv

import (
	"os"
	"os/exec"
)

// GoBuild is the go build command of every binary the tests run: built as
// scripts/release.sh builds a release (static, CGO off, -trimpath), so a
// test runs the kind of binary that ships, and every build of a test run
// (the e2e, chaos, deploy and version tests', the conformance suite's
// through make build, the release tests') shares one compile of the
// dependencies in the build cache. args follow "go build -trimpath"; the
// command runs in dir.
func GoBuild(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("go", append([]string{"build", "-trimpath"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return cmd
}
