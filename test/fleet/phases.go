package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/botctl/botctl/test/e2e/cluster"
)

// depositions reads, from the log files in logDir of the nodes named,
// when each of bots was deposed after t0 ("deposed the leader", logged by
// the standby whose deposition succeeded): the kill's detection and
// deposition, apart from what follows (the new term's campaign, records
// and subscribe). A bot deposed twice counts its first.
func depositions(logDir string, nodes []string, bots map[string]bool, t0 time.Time) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, n := range nodes {
		// One file per start of the node ("node n1 (start 1)").
		files, _ := filepath.Glob(filepath.Join(logDir, strings.TrimSuffix(cluster.LogFileName("node "+n+" (start "), ".log")+"*.log"))
		for _, file := range files {
			readDepositions(file, bots, t0, out)
		}
	}
	return out
}

// readDepositions adds the depositions of bots after t0 in the log file
// to out, keeping each bot's first.
func readDepositions(file string, bots map[string]bool, t0 time.Time, out map[string]time.Duration) {
	f, err := os.Open(file)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "deposed the leader") {
			continue
		}
		at, bot, ok := deposedLine(line)
		if !ok || !bots[bot] || at.Before(t0) {
			continue
		}
		if d, seen := out[bot]; !seen || at.Sub(t0) < d {
			out[bot] = at.Sub(t0)
		}
	}
}

// deposedLine is a deposition's time (the logger's own timestamp) and
// bot (from its election key, /botctl/elect/<bot>/<lease>).
func deposedLine(line string) (time.Time, string, bool) {
	var (
		at  time.Time
		bot string
	)
	for _, f := range strings.Fields(line) {
		if t, err := time.Parse(time.RFC3339Nano, f); err == nil && at.IsZero() {
			at = t
		}
		if k, ok := strings.CutPrefix(f, "key="); ok {
			parts := strings.Split(strings.Trim(k, `"`), "/")
			if len(parts) >= 4 && parts[1] == "botctl" && parts[2] == "elect" {
				bot = parts[3]
			}
		}
	}
	return at, bot, !at.IsZero() && bot != ""
}
