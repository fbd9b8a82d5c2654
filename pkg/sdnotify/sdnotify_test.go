package sdnotify_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/sdnotify"
)

// listen is what systemd does: a unixgram socket the service writes to.
func listen(t *testing.T) (string, *net.UnixConn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return path, conn
}

func read(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no datagram: %v", err)
	}
	return string(buf[:n])
}

func TestNotifySendsOneDatagram(t *testing.T) {
	path, conn := listen(t)
	t.Setenv("NOTIFY_SOCKET", path)
	sent, err := sdnotify.Notify(sdnotify.Ready)
	if !sent || err != nil {
		t.Fatalf("Notify = %v, %v; want true, nil", sent, err)
	}
	if got := read(t, conn); got != "READY=1" {
		t.Fatalf("got %q, want READY=1", got)
	}
}

func TestNotifyWithoutSocketIsNoop(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	sent, err := sdnotify.Notify(sdnotify.Ready)
	if sent || err != nil {
		t.Fatalf("Notify = %v, %v; want false, nil", sent, err)
	}
}

func TestNotifyMissingSocketErrs(t *testing.T) {
	if _, err := sdnotify.NotifySocket(filepath.Join(t.TempDir(), "none"), sdnotify.Ready); err == nil {
		t.Fatal("want an error for a socket nobody listens on")
	}
}

func TestWatchdogPings(t *testing.T) {
	path, conn := listen(t)
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "40000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	iv := sdnotify.WatchdogInterval()
	if iv != 20*time.Millisecond {
		t.Fatalf("WatchdogInterval = %s, want half of WATCHDOG_USEC (20ms)", iv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sdnotify.RunWatchdog(ctx, nil, iv, func() bool { return true }) }()
	for range 2 {
		if got := read(t, conn); got != "WATCHDOG=1" {
			t.Fatalf("got %q, want WATCHDOG=1", got)
		}
	}
	cancel()
	<-done
}

func TestWatchdogForAnotherProcess(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "40000")
	t.Setenv("WATCHDOG_PID", "1")
	if iv := sdnotify.WatchdogInterval(); iv != 0 {
		t.Fatalf("WatchdogInterval = %s for another pid, want 0", iv)
	}
}
