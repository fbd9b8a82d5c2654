package release

import (
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Where the package puts things, and where its scripts and units make
// state: what is left of botctl under these after a purge is compared
// with what was there before the install.
var debRoots = []string{"/etc", "/usr/bin", "/usr/lib/systemd", "/usr/share/doc", "/var/lib"}

// The .deb installed for real on this machine: dpkg -i; the installed
// botctl prints the version; nothing is enabled or started; the units
// pass systemd-analyze verify and their Documentation= pages are there;
// the botctl user owns /var/lib/botctl; the config is a conffile that
// botctl config check finds unfinished, naming what to fill in. dpkg -r
// keeps the conffile and the node's state; dpkg -P leaves nothing of
// botctl but the botctl user (Debian policy keeps system users).
//
// It changes this machine's system: it runs only as root with dpkg, not
// when a botctl package is installed already, and purges (and removes the
// user it created) whatever happens.
func TestDebInstallRemovePurge(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: the .deb is not installed (this test runs dpkg -i on the machine; CI runs as root)")
	}
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("no dpkg: not a Debian machine, the .deb is not installed")
	}
	if out, err := run(t, "dpkg-query", "-W", "-f=${db:Status-Status}", "botctl"); err == nil && strings.TrimSpace(out) != "not-installed" {
		t.Skipf("a botctl package is on this machine already (%s): not touched", strings.TrimSpace(out))
	}
	for _, p := range []string{"/etc/botctl", "/var/lib/botctl", "/var/lib/botctl-infra"} {
		if _, err := os.Lstat(p); err == nil {
			t.Skipf("%s exists: a botctl installed without the package (scripts/install.sh?) is on this machine, not touched", p)
		}
	}
	if !slices.Contains(arches(), runtime.GOARCH) {
		t.Skipf("no .deb is built for this machine's %s", runtime.GOARCH)
	}
	deb := filepath.Join(first(t), "botctl_"+v+"_"+runtime.GOARCH+".deb")
	_, userErr := user.Lookup("botctl")
	before := botctlPaths(t)
	t.Cleanup(func() {
		if out, err := run(t, "dpkg", "-P", "botctl"); err != nil {
			t.Logf("cleanup: dpkg -P botctl: %v\n%s", err, out)
		}
		if userErr != nil { // the install made it
			run(t, "userdel", "botctl")
			run(t, "groupdel", "botctl")
		}
	})

	out := mustRun(t, "dpkg", "-i", deb)
	if !strings.Contains(out, "fill in /etc/botctl/botctl.yaml") {
		t.Errorf("dpkg -i does not say what to do next:\n%s", out)
	}
	if got := mustRun(t, "/usr/bin/botctl", "version"); !strings.HasPrefix(got, "botctl "+v+" (commit ") {
		t.Errorf("installed botctl version: %q, want botctl %s (commit …)", got, v)
	}

	// Nothing enabled: no unit of the package is wanted by a target.
	links, _ := filepath.Glob("/etc/systemd/system/*/botctl*")
	if len(links) > 0 {
		t.Errorf("the install enabled units: %v", links)
	}

	u, err := user.Lookup("botctl")
	if err != nil {
		t.Fatalf("no botctl user after the install: %v", err)
	}
	if fi, err := os.Stat("/var/lib/botctl"); err != nil {
		t.Errorf("/var/lib/botctl: %v", err)
	} else if st := fi.Sys().(*syscall.Stat_t); strconv.FormatUint(uint64(st.Uid), 10) != u.Uid || fi.Mode().Perm() != 0o700 {
		t.Errorf("/var/lib/botctl is uid %d mode %v, want the botctl user's (%s), 0700", st.Uid, fi.Mode().Perm(), u.Uid)
	}
	if fi, err := os.Stat("/etc/botctl/botctl.yaml"); err != nil {
		t.Errorf("/etc/botctl/botctl.yaml: %v", err)
	} else if st := fi.Sys().(*syscall.Stat_t); strconv.FormatUint(uint64(st.Gid), 10) != u.Gid || fi.Mode().Perm() != 0o640 {
		t.Errorf("/etc/botctl/botctl.yaml is gid %d mode %v, want group botctl, 0640", st.Gid, fi.Mode().Perm())
	}
	if out := mustRun(t, "dpkg-query", "-W", "-f=${Conffiles}", "botctl"); !strings.Contains(out, "/etc/botctl/botctl.yaml ") {
		t.Errorf("/etc/botctl/botctl.yaml is not a conffile: %q", out)
	}

	units := []string{"botctl.service", "botctl-infra.service", "botctl-exec.socket", "botctl-exec@.service"}
	verifyInstalledUnits(t, units)

	// The example config, unfinished: check names what is left.
	out, err = run(t, "/usr/bin/botctl", "config", "check", "/etc/botctl/botctl.yaml")
	if err == nil || strings.Contains(out, "ok: node") {
		t.Errorf("botctl config check passes the unfilled example config: %v\n%s", err, out)
	}
	for _, key := range []string{"bots[0].secret_file", "etcd.ca_file", "api.token_file"} {
		if !strings.Contains(out, "config key "+key+":") {
			t.Errorf("botctl config check does not name %s as left to fill in:\n%s", key, out)
		}
	}

	mustRun(t, "dpkg", "-r", "botctl")
	for _, p := range []string{"/usr/bin/botctl", "/lib/systemd/system/botctl.service", "/usr/share/doc/botctl"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("dpkg -r left %s", p)
		}
	}
	for _, p := range []string{"/etc/botctl/botctl.yaml", "/var/lib/botctl"} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("dpkg -r removed %s, which a reinstall needs (%v)", p, err)
		}
	}
	if out := mustRun(t, "dpkg-query", "-W", "-f=${db:Status-Status}", "botctl"); out != "config-files" {
		t.Errorf("after dpkg -r the package is %q, want config-files", out)
	}

	mustRun(t, "dpkg", "-P", "botctl")
	after := botctlPaths(t)
	var left []string
	for _, p := range after {
		if !slices.Contains(before, p) {
			left = append(left, p)
		}
	}
	if len(left) > 0 {
		t.Errorf("dpkg -P left: %v", left)
	}
	if _, err := user.Lookup("botctl"); err != nil {
		t.Errorf("dpkg -P removed the botctl user (Debian policy keeps it: files may still carry its uid): %v", err)
	}
}

// verifyInstalledUnits runs systemd-analyze verify on the installed units
// (an instance of a template), and checks that every file:// page their
// Documentation= names is installed.
func verifyInstalledUnits(t *testing.T, units []string) {
	t.Helper()
	var paths []string
	for _, u := range units {
		p := filepath.Join("/lib/systemd/system", u)
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("unit not installed: %v", err)
			continue
		}
		if strings.Contains(string(raw), "/usr/local/bin/botctl") {
			t.Errorf("%s runs /usr/local/bin/botctl; the package's binary is /usr/bin/botctl", u)
		}
		for _, m := range regexp.MustCompile(`(?m)^Documentation=(.*)$`).FindAllStringSubmatch(string(raw), -1) {
			for _, uri := range strings.Fields(m[1]) {
				if page, ok := strings.CutPrefix(uri, "file://"); ok {
					if _, err := os.Stat(page); err != nil {
						t.Errorf("%s: Documentation=%s is not installed", u, uri)
					}
				}
			}
		}
		paths = append(paths, strings.Replace(p, "@.", "@1.", 1))
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("no systemd-analyze: the installed units are not verified")
		return
	}
	out, err := run(t, analyze, append([]string{"verify", "--man=no"}, paths...)...)
	if err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify of the installed units: %v\n%s", err, out)
	}
}

// botctlPaths is every path under debRoots whose name holds "botctl"
// (dpkg's own records aside).
func botctlPaths(t *testing.T) []string {
	t.Helper()
	var paths []string
	for _, root := range debRoots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() && (p == "/var/lib/dpkg" || p == "/var/lib/containers" || p == "/var/lib/apt") {
				return filepath.SkipDir
			}
			if strings.Contains(d.Name(), "botctl") {
				paths = append(paths, p)
			}
			return nil
		})
	}
	return paths
}
