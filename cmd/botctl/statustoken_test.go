package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
	"github.com/botctl/botctl/pkg/config"
)

// botctl status reaches a node's API with the token the node generated in
// its data dir (--data-dir): the node's live fields (spool, worker) are
// shown. From another data dir, without the token, the node says 401 and
// status says how to give it.
func TestStatusSendsTheNodesGeneratedToken(t *testing.T) {
	dir := t.TempDir()
	serveUntilReady(t, "serve", "--demo", "--demo-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--data-dir", dir)
	if _, err := os.Stat(filepath.Join(dir, config.GeneratedTokenFile)); err != nil {
		t.Fatalf("no token in the data dir: %v", err)
	}

	type nodes struct {
		Nodes []struct {
			SpoolDepth  *int   `json:"spool_depth"`
			Unreachable string `json:"unreachable"`
		} `json:"nodes"`
	}
	status := func(dataDir string) nodes {
		t.Helper()
		// The node's embedded etcd is found through dir; the token through dataDir.
		ep, err := os.ReadFile(filepath.Join(dir, endpointFile))
		if err != nil {
			t.Fatal(err)
		}
		s, err := run(t, "status", "--etcd", strings.TrimSpace(string(ep)), "--data-dir", dataDir, "--json")
		if err != nil {
			t.Fatalf("status: %v\n%s", err, s)
		}
		s = s[strings.Index(s, "{"):] // after what stderr said about health
		var st nodes
		if err := json.NewDecoder(strings.NewReader(s)).Decode(&st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, s)
		}
		return st
	}
	var st nodes
	testwait.Eventually(t, 30*time.Second, "the node registered", func() bool { st = status(dir); return len(st.Nodes) == 1 })
	if n := st.Nodes[0]; n.SpoolDepth == nil || n.Unreachable != "" {
		t.Fatalf("status with the node's data dir: %+v, want its spool depth and no unreachable", n)
	}
	st = status(t.TempDir())
	if n := st.Nodes[0]; n.SpoolDepth != nil || !strings.Contains(n.Unreachable, "401") || !strings.Contains(n.Unreachable, "api.token_file") {
		t.Fatalf("status without the token: %+v, want a 401 that says to give api.token_file or the data dir", n)
	}
}
