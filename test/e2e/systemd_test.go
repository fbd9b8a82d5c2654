package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
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
	t.Parallel()
	c := newCluster(t, []string{"b1"})
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The reader queues every datagram without bound and never waits on
	// the test: a reader stalled on a full channel stops reading, the
	// socket's queue (net.unix.max_dgram_qlen, 10 by default) fills, and
	// botctl's notify writes block; after a failure it stayed blocked
	// for good. It ends when the deferred conn.Close ends its Read.
	var (
		mu     sync.Mutex
		queue  []string
		closed bool
	)
	arrived := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			mu.Lock()
			if err != nil {
				closed = true
			} else {
				queue = append(queue, string(buf[:n]))
			}
			mu.Unlock()
			select {
			case arrived <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	next := func(want string) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			mu.Lock()
			for len(queue) > 0 {
				s := queue[0]
				queue = queue[1:]
				if s == want {
					mu.Unlock()
					return
				}
				if want == "READY=1" {
					mu.Unlock()
					t.Fatalf("first datagram %q, want READY=1", s)
				}
			}
			gone := closed
			mu.Unlock()
			if gone {
				t.Fatalf("notify socket closed before %s", want)
			}
			select {
			case <-arrived:
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
