package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/infra"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
)

// runMainEnv, set in a child's environment, makes this test binary run
// botctl's main instead of the tests: the real command path, from flag
// parsing to main's last error line and the exit code, writing to real
// stderr, without a separate build.
const runMainEnv = "BOTCTL_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// botctlProcess is botctl's main run as a child process.
type botctlProcess struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer // stdout and stderr, as they come
	exited chan struct{}
	err    error // Wait's, once exited is closed
}

func startBotctl(t *testing.T, env []string, args ...string) *botctlProcess {
	t.Helper()
	p := &botctlProcess{exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], args...)
	p.cmd.Env = append(append(os.Environ(), runMainEnv+"=1"), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

func (p *botctlProcess) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *botctlProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// closedAddr is a loopback address nothing listens on: a port below the
// ephemeral range (infra.FreeAddr), so no listen on port 0 and no
// outgoing connection's source port is given it after it is closed.
func closedAddr(t *testing.T) string {
	t.Helper()
	addr, err := infra.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// The password is the one string that must never come out.
const leaked = "hunter2"

// A credential in a URL given to serve (etcd, NATS, WeCom, history) is in
// no line botctl writes, log or error, when the start fails: serve refuses
// credentials in the etcd and NATS URLs (they go in etcd.username and
// nats.user with a password file), and main's last line names both keys
// and URLs with the credential masked.
func TestServeRedactsURLCredentialsWhenItFails(t *testing.T) {
	dead := closedAddr(t)
	p := startBotctl(t, []string{"BOTCTL_BOT_B1_SECRET=s1"}, "serve", "--log-format", "json", "--log-level", "debug",
		"--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--bot", "b1",
		"--etcd", "http://u:"+leaked+"@"+dead, "--etcd-dial-timeout", "2s",
		"--nats", "nats://u:"+leaked+"@"+dead,
		"--wecom-url", "ws://u:"+leaked+"@"+dead+"/",
		"--backfill-history-url", "http://u:"+leaked+"@"+dead)
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("serve with an unreachable etcd still running after 60 s:\n%s", p.output())
	}
	out := p.output()
	var exit *exec.ExitError
	if !errors.As(p.err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("exit: %v, want code 2 (a configuration refused)\n%s", p.err, out)
	}
	if strings.Contains(out, leaked) {
		t.Fatalf("the password is in botctl's output:\n%s", out)
	}
	for _, want := range []string{"botctl: config key etcd.endpoints[0]: http://<redacted>@" + dead, "config key nats.url: ", "(nats://<redacted>@" + dead + ")"} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in the output (the key and URL named, the credential masked):\n%s", want, out)
		}
	}
}

// A WeCom URL with credentials is refused at start (WeCom takes none in
// the URL), with the URL masked in the refusal.
func TestServeRefusesWeComURLCredentialsMasked(t *testing.T) {
	ep := startEtcd(t)
	dead := closedAddr(t)
	p := startBotctl(t, []string{"BOTCTL_BOT_B1_SECRET=s1"}, "serve", "--listen", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--bot", "b1", "--etcd", ep, "--wecom-url", "ws://u:"+leaked+"@"+dead+"/")
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("serve still running 60 s after a refused wecom.url:\n%s", p.output())
	}
	out := p.output()
	if p.err == nil || !strings.Contains(out, "config key wecom.url") || !strings.Contains(out, "<redacted>@"+dead) || strings.Contains(out, leaked) {
		t.Fatalf("want an exit naming wecom.url with the URL masked and no password (exit %v):\n%s", p.err, out)
	}
}

// The same while a node runs: its logs name a URL it cannot reach, the
// history URL of the gap backfill (its read at the term's start fails),
// with the credential masked, and the password is in no line, through a
// graceful stop.
func TestServeRedactsURLCredentialsWhileRunning(t *testing.T) {
	ep := startEtcd(t)
	sim := wecomsim.New(wecomsim.Config{Logger: zerolog.Nop()})
	if err := sim.AddBot("b1", "s1"); err != nil {
		t.Fatal(err)
	}
	simSrv := httptest.NewServer(sim.Handler())
	t.Cleanup(func() { sim.Close(); simSrv.Close() })
	simURL := "ws" + strings.TrimPrefix(simSrv.URL, "http") + "/"
	dead := closedAddr(t)
	for _, c := range []struct{ name, wecom, history string }{
		{"history URL", simURL, "http://u:" + leaked + "@" + dead},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"serve", "--log-format", "json", "--log-level", "debug", "--listen", "127.0.0.1:0",
				"--data-dir", t.TempDir(), "--bot", "b1", "--etcd", ep, "--wecom-url", c.wecom}
			if c.history != "" {
				args = append(args, "--backfill-history-url", c.history)
			}
			p := startBotctl(t, []string{"BOTCTL_BOT_B1_SECRET=s1"}, args...)
			masked := "<redacted>@" + dead
			deadline := time.After(60 * time.Second)
			for !strings.Contains(p.output(), masked) {
				if strings.Contains(p.output(), leaked) {
					t.Fatalf("the password is in botctl's output:\n%s", p.output())
				}
				select {
				case <-p.exited:
					t.Fatalf("serve exited (%v) before logging the unreachable URL:\n%s", p.err, p.output())
				case <-deadline:
					t.Fatalf("no line names the unreachable URL (%s) within 60 s:\n%s", masked, p.output())
				case <-time.After(100 * time.Millisecond): // polling interval, not an assertion
				}
			}
			p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(60 * time.Second):
				t.Fatalf("serve still running 60 s after SIGTERM:\n%s", p.output())
			}
			out := p.output()
			if strings.Contains(out, leaked) {
				t.Fatalf("the password is in botctl's output:\n%s", out)
			}
			t.Logf("lines naming the unreachable URL:\n%s", grepLines(out, masked))
		})
	}
}

func grepLines(s, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			fmt.Fprintln(&b, l)
		}
	}
	return b.String()
}
