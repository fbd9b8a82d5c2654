package deploy

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/botctl/botctl/test/e2e/cluster"
)

// The exec backend's sandbox units (deploy/botctl-exec.socket and
// botctl-exec@.service) run for real: systemd boots as init in a container
// (systemd-nspawn over this machine's own root, every write in a tmpfs),
// installs the shipped units with only ExecStart's program changed, and
// the node's relay, run as the botctl user, sends a task with a file. The
// program is a probe. The same probe run as the botctl user without the
// sandbox is the control: it reads the data dir and the token and reaches
// loopback, so each "could not" of the sandboxed run is the unit's doing.
//
// It needs root and systemd-nspawn (Debian's systemd-container, which
// make test installs: scripts/ensure-nspawn.sh). Without them, or where
// this machine cannot boot a container, it skips, unless
// BOTCTL_REQUIRE_SANDBOX=1.
func TestExecSandboxUnitsIsolateTheProgram(t *testing.T) {
	nspawn, why := sandboxPrereqs()
	if why != "" {
		skipOrFail(t, why)
	}
	if testing.Short() {
		t.Skip("boots a container (about 10 s)")
	}
	opt := t.TempDir() // /opt/botctl in the container, read-only
	out := t.TempDir() // /out in the container: the runs' outputs
	for _, d := range []string{opt, out} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cluster.Build(opt); err != nil {
		t.Fatal(err)
	}

	// Loopback as the container sees it (it shares this machine's network):
	// where the node API, etcd and NATS listen.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dials atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	writeSandboxFiles(t, opt, port)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The container's root is a tmpfs with this machine's /usr (read-only)
	// and a copy of its /etc: nothing the container writes reaches the host.
	etc := filepath.Join(t.TempDir(), "etc")
	if b, err := exec.Command("cp", "-a", "/etc", etc).CombinedOutput(); err != nil {
		t.Fatalf("copy /etc: %v: %s", err, b)
	}
	machine := fmt.Sprintf("botctl-sbx-%d", os.Getpid())
	cmd := exec.CommandContext(ctx, nspawn, "--quiet", "-D", "/", "--volatile=yes",
		"--register=no", "--keep-unit", "-M", machine, "--capability=CAP_NET_ADMIN",
		"--bind="+etc+":/etc", "--bind-ro="+opt+":/opt/botctl", "--bind="+out+":/out",
		"--bind-ro="+filepath.Join(opt, "units")+":/run/systemd/system",
		"-b", "systemd.unit=botctl-probe.service", "systemd.firstboot=off")
	// Past the deadline, stop the container as a shutdown does (nspawn
	// passes SIGTERM on to its init); a kill of nspawn alone would leave
	// the container's processes running.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	start := time.Now()
	log, err := cmd.CombinedOutput()
	t.Logf("the container ran %v: %v\n%s", time.Since(start), err, tail(string(log), 30))
	done, _ := os.ReadFile(filepath.Join(out, "done"))
	if strings.TrimSpace(string(done)) != "ok" {
		trace, _ := os.ReadFile(filepath.Join(out, "trace"))
		why := fmt.Sprintf("the container's driver did not finish (nspawn: %v; done %q)\ndriver:\n%s\nnspawn:\n%s", err, done, trace, tail(string(log), 40))
		if len(done) != 0 || len(trace) != 0 {
			t.Fatal(why) // it booted: a failure of the units or the relay
		}
		skipOrFail(t, "this machine could not boot a container: "+why)
	}

	plain := probeResult(t, out, "plain")
	sandboxed := probeResult(t, out, "sandboxed")
	// The control: as the node's user, each is open.
	for key, want := range map[string]string{"datadir": "read", "token": "read", "loopback": "reached"} {
		if plain[key] != want {
			t.Fatalf("the probe as the botctl user, unsandboxed: %s = %q, want %q (the control does not show the test can fail)\n%v", key, plain[key], want, plain)
		}
	}
	for key, want := range map[string]string{"datadir": "denied", "token": "denied", "loopback": "refused",
		"file": "the attachment's bytes", "exit": "0"} {
		if sandboxed[key] != want {
			t.Fatalf("the probe in the sandbox unit: %s = %q, want %q\n%v", key, sandboxed[key], want, sandboxed)
		}
	}
	if sandboxed["uid"] == plain["uid"] || sandboxed["uid"] == "0" || sandboxed["uid"] == "" {
		t.Fatalf("the sandboxed program ran as uid %q; the node's user is %q: want a uid of its own", sandboxed["uid"], plain["uid"])
	}
	if p := sandboxed["filepath"]; p == "" || strings.HasPrefix(p, "/var/lib/botctl") {
		t.Fatalf("the sandboxed program was given the attachment's path %q: want a file of its own, never the node's", p)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("loopback was reached %d times; want once (the control alone)", n)
	}
}

// sandboxPrereqs is systemd-nspawn's path, or why the test cannot run.
func sandboxPrereqs() (string, string) {
	if os.Geteuid() != 0 {
		return "", "booting a container needs root"
	}
	nspawn, err := exec.LookPath("systemd-nspawn")
	if err != nil {
		return "", "systemd-nspawn not installed (apt-get install systemd-container; make test does: scripts/ensure-nspawn.sh)"
	}
	if _, err := os.Stat("/lib/systemd/systemd"); err != nil {
		return "", "no systemd to boot (/lib/systemd/systemd)"
	}
	return nspawn, ""
}

func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("BOTCTL_REQUIRE_SANDBOX") == "1" {
		t.Fatal("BOTCTL_REQUIRE_SANDBOX=1 but " + why)
	}
	t.Skip(why)
}

// writeSandboxFiles writes into opt the probe, the driver and the units:
// the shipped two with ExecStart's program the probe, and the driver's.
func writeSandboxFiles(t *testing.T, opt string, port int) {
	t.Helper()
	units := filepath.Join(opt, "units")
	if err := os.Mkdir(units, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(path, body string, mode os.FileMode) {
		if err := os.WriteFile(path, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"botctl-exec.socket", "botctl-exec@.service"} {
		raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", name))
		if err != nil {
			t.Fatal(err)
		}
		unit := string(raw)
		if name == "botctl-exec@.service" {
			const shipped = "ExecStart=/usr/local/bin/botctl exec-sandbox serve -- /usr/local/bin/answer"
			if !strings.Contains(unit, shipped) {
				t.Fatalf("%s has no %q: the test's swap of the program needs updating", name, shipped)
			}
			unit = strings.Replace(unit, shipped, "ExecStart=/opt/botctl/botctl exec-sandbox serve -- /opt/botctl/probe", 1)
		}
		write(filepath.Join(units, name), unit, 0o644)
	}
	write(filepath.Join(units, "botctl-probe.service"), `[Unit]
Description=botctl sandbox probe driver
SuccessAction=exit-force
FailureAction=exit-force
[Service]
Type=oneshot
ExecStart=/opt/botctl/driver
StandardOutput=append:/out/trace
StandardError=append:/out/trace
`, 0o644)

	// The probe: one "key: value" line per check, and the task's file.
	write(filepath.Join(opt, "probe"), `#!/bin/bash
task=$(cat)
echo "uid: $(id -u)"
if cat /var/lib/botctl/secret >/dev/null 2>&1; then echo "datadir: read"; else echo "datadir: denied"; fi
if cat /etc/botctl/api.token >/dev/null 2>&1; then echo "token: read"; else echo "token: denied"; fi
if (exec 3<>/dev/tcp/127.0.0.1/`+strconv.Itoa(port)+`) 2>/dev/null; then echo "loopback: reached"; else echo "loopback: refused"; fi
p=$(printf '%s' "$task" | grep -o '"path":"[^"]*"' | head -n1 | sed 's/^"path":"//; s/"$//')
echo "filepath: $p"
if [ -n "$p" ]; then echo "file: $(cat "$p" 2>&1)"; fi
`, 0o755)

	// The driver, as root in the container: the node's user, data dir,
	// token and a task's file (the botctl user's, as a node's are), then
	// the control and the sandboxed run of the probe.
	write(filepath.Join(opt, "driver"), `#!/bin/bash
set -euxo pipefail
useradd --system --no-create-home --shell /usr/sbin/nologin botctl
mkdir -p /var/lib/botctl/media /etc/botctl
echo the-secret > /var/lib/botctl/secret
echo the-token > /etc/botctl/api.token
printf "the attachment's bytes" > /var/lib/botctl/media/a.txt
chown -R botctl:botctl /var/lib/botctl /etc/botctl
chmod 0644 /var/lib/botctl/secret /etc/botctl/api.token /var/lib/botctl/media/a.txt
task='{"task_id":"t1","messages":[{"role":"user","content":"q"}],"attachments":[{"kind":"file","name":"a.txt","size":22,"path":"/var/lib/botctl/media/a.txt"}]}'
printf '%s' "$task" | runuser -u botctl -- /opt/botctl/probe > /out/plain
systemctl start botctl-exec.socket
set +e
printf '%s' "$task" | runuser -u botctl -- /opt/botctl/botctl exec-sandbox relay /run/botctl-exec.sock > /out/sandboxed 2>/out/sandboxed.stderr
echo "exit: $?" >> /out/sandboxed
set -e
journalctl --no-pager -u 'botctl-exec@*' > /out/journal 2>&1 || true
echo ok > /out/done
`, 0o755)
}

// probeResult reads a probe's "key: value" lines from dir/name.
func probeResult(t *testing.T, dir, name string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			m[k] = v
		}
	}
	if len(m) == 0 {
		stderr, _ := os.ReadFile(filepath.Join(dir, name+".stderr"))
		journal, _ := os.ReadFile(filepath.Join(dir, "journal"))
		t.Fatalf("the %s probe printed nothing: %q\nstderr: %s\njournal:\n%s", name, raw, stderr, tail(string(journal), 30))
	}
	return m
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
