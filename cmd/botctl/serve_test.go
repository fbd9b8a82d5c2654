package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testenv"
	"github.com/botctl/botctl/pkg/config"
)

// With api.cert_file the ready line names the API as https://, the
// scheme it is really served with (an operator copies that URL), and so
// does the demo page's line.
func TestServeReadyLineNamesHTTPS(t *testing.T) {
	ca := testenv.NewCA(t)
	cert, key := ca.Issue(t, "node-a")
	out := &lines{seen: make(chan string, 64)}
	root := newRootCmd()
	dataDir := t.TempDir()
	root.SetArgs([]string{"serve", "--demo", "--demo-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0",
		"--data-dir", dataDir, "--api-cert-file", cert, "--api-key-file", key})
	root.SetOut(out)
	root.SetErr(out)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Error("serve did not return within 60 s of its context's end")
		}
	}()

	ready := regexp.MustCompile(`API (\S+)/status`)
	var api string
	demoLine := false
	deadline := time.After(60 * time.Second)
	for api == "" || !demoLine {
		select {
		case l := <-out.seen:
			if m := ready.FindStringSubmatch(l); m != nil {
				if !strings.HasPrefix(m[1], "https://") {
					t.Fatalf("ready line %q: the API is HTTPS (api.cert_file), the line says otherwise", l)
				}
				api = m[1]
			}
			if strings.HasPrefix(l, "demo page: open ") {
				if !strings.HasPrefix(l, `demo page: open https://`) {
					t.Fatalf("demo line %q, want https://", l)
				}
				// The link opens as printed: the token the node generated
				// in its data dir is in its fragment.
				tok, err := os.ReadFile(filepath.Join(dataDir, "api.token"))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(l, "/demo/#token="+strings.TrimSpace(string(tok))+" ") || strings.Contains(l, "$(") {
					t.Fatalf("demo line %q, want a link with the data dir's token in its fragment", l)
				}
				demoLine = true
			}
		case err := <-done:
			t.Fatalf("serve returned before its ready line: %v", err)
		case <-deadline:
			t.Fatal("no ready line within 60 s")
		}
	}

	// The URL printed is one a client trusting the CA reaches.
	pemCA, err := os.ReadFile(ca.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pemCA)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	resp, err := c.Get(api + "/healthz")
	if err != nil {
		t.Fatalf("GET %s/healthz: %v", api, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/healthz: %s", api, resp.Status)
	}
}

// The demo page's link opens as printed with the token the node
// generated; an operator's api.token_file is never printed, the link
// reads it in the shell.
func TestDemoPageLine(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api.token"), []byte("0123abcd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Defaults()
	cfg.DataDir = dir
	got := demoPageLine(cfg, "http://127.0.0.1:8391/demo/")
	if want := "demo page: open http://127.0.0.1:8391/demo/#token=0123abcd to chat"; !strings.HasPrefix(got, want) {
		t.Fatalf("line %q, want it to start %q", got, want)
	}
	own := filepath.Join(dir, "operator.token")
	if err := os.WriteFile(own, []byte("operator-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.API.TokenFile = own
	got = demoPageLine(cfg, "http://127.0.0.1:8391/demo/")
	if strings.Contains(got, "operator-secret") || !strings.Contains(got, `#token=$(cat `+own+`)"`) {
		t.Fatalf("line %q: want the operator's token read from its file, never printed", got)
	}
}
