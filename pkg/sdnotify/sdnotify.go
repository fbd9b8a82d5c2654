// Package sdnotify speaks systemd's notify protocol (sd_notify(3)): one
// datagram per state change on the unix socket named by $NOTIFY_SOCKET.
//
// It guarantees only what the protocol does: a datagram handed to the
// socket. Outside systemd (no $NOTIFY_SOCKET) every call is a no-op that
// reports false, so a node behaves the same under any supervisor.
package sdnotify

import (
	"context"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/botctl/botctl/pkg/clock"
)

// States a service sends (sd_notify(3)).
const (
	Ready     = "READY=1"
	Stopping  = "STOPPING=1"
	Watchdog  = "WATCHDOG=1"
	Reloading = "RELOADING=1"
)

// Notify sends state (e.g. Ready, or "STATUS=…") to $NOTIFY_SOCKET. It
// reports whether a datagram was sent; false with a nil error means no
// socket is configured (not run by systemd with Type=notify).
func Notify(state string) (bool, error) {
	return NotifySocket(os.Getenv("NOTIFY_SOCKET"), state)
}

// NotifySocket sends state to the socket at path ("" : none). A path
// starting with '@' is an abstract socket, as systemd allows.
func NotifySocket(path, state string) (bool, error) {
	if path == "" {
		return false, nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, err
	}
	return true, nil
}

// WatchdogInterval is how often to send Watchdog: half of $WATCHDOG_USEC
// (systemd's advice), or 0 when no watchdog is set for this process
// ($WATCHDOG_PID names another one, or the variable is absent).
func WatchdogInterval() time.Duration {
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0
	}
	usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 {
		return 0
	}
	return time.Duration(usec) * time.Microsecond / 2
}

// RunWatchdog sends Watchdog every interval of clk (nil: clock.Real) while alive reports true,
// until ctx ends. A node that stops answering (alive false, or the
// process hung) stops pinging, and systemd restarts it after WatchdogSec.
// interval <= 0: returns at once.
func RunWatchdog(ctx context.Context, clk clock.Clock, interval time.Duration, alive func() bool) {
	if interval <= 0 {
		return
	}
	t := clock.Or(clk).NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if alive == nil || alive() {
				Notify(Watchdog)
			}
		}
	}
}
