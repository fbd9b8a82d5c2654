package scripts

import (
	"os/exec"
	"strings"
	"testing"
)

func runBeside(t *testing.T, args ...string) (string, int) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	out, err := exec.Command(bash, append([]string{"beside.sh"}, args...)...).CombinedOutput()
	return string(out), exitCode(t, err)
}

// Every background command runs while the foreground one does (the
// foreground waits for a file the last background command writes), each
// one's output is printed after the foreground's under its header, in
// the order given, and the exit status is the first failure's: the
// foreground's, else the first failed background command's.
func TestBesideRunsEveryCommandAtOnceAndHidesNoFailure(t *testing.T) {
	dir := t.TempDir()
	waitFor := "for i in $(seq 100); do [ -e " + dir + "/ready ] && exit 0; sleep 0.1; done; exit 9"
	out, code := runBeside(t, "echo first; exit 3", "echo second; touch "+dir+"/ready", "--", "bash", "-c", "echo fg; "+waitFor)
	if code != 3 {
		t.Fatalf("exit %d, want 3 (the failed background command's):\n%s", code, out)
	}
	fg, first, second := strings.Index(out, "fg\n"), strings.Index(out, "==== beside: echo first; exit 3 (exit 3, "), strings.Index(out, "==== beside: echo second;")
	if fg < 0 || first < fg || second < first || !strings.Contains(out[first:second], "first\n") || !strings.Contains(out[second:], "second\n") {
		t.Fatalf("output not in order (foreground, then each background command under its header):\n%s", out)
	}

	if out, code := runBeside(t, "exit 4", "--", "bash", "-c", "exit 5"); code != 5 {
		t.Fatalf("exit %d, want the foreground's 5:\n%s", code, out)
	}
	if out, code := runBeside(t, "true", "true", "--", "true"); code != 0 {
		t.Fatalf("exit %d with nothing failed:\n%s", code, out)
	}
	for _, args := range [][]string{{"--", "true"}, {"true", "--"}, {"true"}} {
		if out, code := runBeside(t, args...); code != 2 || !strings.Contains(out, "usage:") {
			t.Fatalf("beside.sh %q: exit %d, want 2 with its usage:\n%s", args, code, out)
		}
	}
}
