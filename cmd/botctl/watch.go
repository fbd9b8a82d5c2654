package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/botctl/botctl/pkg/clock"
)

// watchStatus runs once every interval of clk until ctx ends (Ctrl-C), which is
// a normal end, not an error. On a terminal the table is redrawn in
// place; elsewhere (a pipe, a file) each round follows the last under a
// timestamp line, and --json writes one object per line. A round that
// fails (etcd unreachable) is reported and the next one tried.
func watchStatus(ctx context.Context, clk clock.Clock, w, errW io.Writer, interval time.Duration, asJSON bool, once func() error) error {
	tty := isTerminal(w)
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		if !asJSON {
			if tty {
				fmt.Fprint(w, "\x1b[H\x1b[2J") // home, clear screen
			}
			fmt.Fprintf(w, "%s  (every %s; Ctrl-C to stop)\n\n", clk.Now().Format(time.RFC3339), interval)
		}
		if err := once(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if asJSON {
				fmt.Fprintf(errW, "botctl status: %v\n", err)
			} else {
				fmt.Fprintf(w, "status unavailable: %v\n", err)
			}
		}
		if !asJSON && !tty {
			fmt.Fprintln(w)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
