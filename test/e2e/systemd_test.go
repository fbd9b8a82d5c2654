package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/test/e2e/cluster"
)

// A botctl process run as systemd runs a Type=notify service: READY=1 on
// the notify socket once it serves, WATCHDOG=1 every WATCHDOG_USEC/2, and
// STOPPING=1 on SIGTERM; meanwhile its /metrics (the real process's) say
// it leads the bot and /readyz says it is ready.
func TestSystemdNotifyAndMetrics(t *testing.T) {
	c := newCluster(t, []string{"b1"})
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := make(chan string, 64)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(got)
				return
			}
			got <- string(buf[:n])
		}
	}()
	next := func(want string) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case s, ok := <-got:
				if !ok {
					t.Fatalf("notify socket closed before %s", want)
				}
				if s == want {
					return
				}
				if want == "READY=1" {
					t.Fatalf("first datagram %q, want READY=1", s)
				}
			case <-deadline:
				t.Fatalf("no %s on the notify socket", want)
			}
		}
	}

	n, err := c.StartNodeWith("n1", cluster.NodeOptions{Env: []string{"NOTIFY_SOCKET=" + sock, "WATCHDOG_USEC=400000"}})
	if err != nil {
		t.Fatal(err)
	}
	next("READY=1")
	next("WATCHDOG=1")
	next("WATCHDOG=1")
	waitStable(t, c)

	testwait.NoError(t, 30*time.Second, testwait.Every, "n1 ready and leading in its metrics", func() error {
		r, err := n.Readiness()
		if err != nil || !r.Ready || r.Bots["b1"] != "subscribed" {
			return fmt.Errorf("readyz %+v %v", r, err)
		}
		body, err := get(n.API + "/metrics")
		if err != nil {
			return err
		}
		for _, line := range []string{`botctl_bot_leader{bot="b1"} 1`, `botctl_wecom_connected{bot="b1"} 1`, `botctl_leader_terms_total{bot="b1"} 1`} {
			if !strings.Contains(body, "\n"+line+"\n") {
				return fmt.Errorf("/metrics lacks %q", line)
			}
		}
		return nil
	})

	if err := n.Proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	next("STOPPING=1")
	if code, err := n.Proc.Wait(30 * time.Second); err != nil || code != 0 {
		t.Fatalf("after SIGTERM: exit %d, %v; want 0", code, err)
	}
}

func get(url string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	b.WriteString("\n")
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	return b.String(), sc.Err()
}
