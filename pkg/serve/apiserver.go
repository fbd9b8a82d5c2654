package serve

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/botctl/botctl/internal/httpjson"
	"github.com/botctl/botctl/pkg/config"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The node API's server timeouts. Every endpoint answers at once (exec
// accepts the task and runs it in the background) but a send, which waits
// at most sendapi.MaxWait for its budget and wecom.ack_timeout for WeCom's
// ack (a forwarded one: sendapi's forward timeout), so a minute bounds a slow client
// without cutting a real one; a client that holds a connection open
// without sending is dropped after ReadHeaderTimeout.
const (
	apiReadHeaderTimeout = 5 * time.Second
	apiReadTimeout       = 30 * time.Second
	apiWriteTimeout      = time.Minute
	apiIdleTimeout       = 2 * time.Minute
	apiMaxHeaderBytes    = 64 << 10
)

// apiServer is the node API's HTTP server: every timeout set.
func (n *Node) apiServer(ctx context.Context, wg *sync.WaitGroup, cli *clientv3.Client) *http.Server {
	return &http.Server{
		Handler:           n.api(ctx, wg, cli),
		ReadHeaderTimeout: apiReadHeaderTimeout,
		ReadTimeout:       apiReadTimeout,
		WriteTimeout:      apiWriteTimeout,
		IdleTimeout:       apiIdleTimeout,
		MaxHeaderBytes:    apiMaxHeaderBytes,
	}
}

// apiListener is ln, wrapped in TLS when api.cert_file is set, and the URL
// other nodes reach it at (registered in etcd).
func apiListener(ln net.Listener, a config.API) (net.Listener, string, error) {
	tc, err := a.ServerTLS()
	if err != nil {
		return nil, "", err
	}
	if tc == nil {
		return ln, "http://" + ln.Addr().String(), nil
	}
	return tls.NewListener(ln, tc), "https://" + ln.Addr().String(), nil
}

// apiClient calls other nodes' APIs (tier 2): api.ca_file's CA trusted.
func apiClient(a config.API) (*http.Client, error) {
	tc, err := a.ClientTLS()
	if err != nil {
		return nil, err
	}
	c := &http.Client{Timeout: 5 * time.Second}
	if tc != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = tc
		c.Transport = t
	}
	return c, nil
}

// nodeTokens are the token the node API asks for and the agents' of the
// MCP gateway (api.agent_tokens_file: token → agent).
func nodeTokens(cfg config.Config, log zerolog.Logger) (string, map[string]string, error) {
	agents, err := cfg.API.AgentTokens()
	if err != nil {
		return "", nil, err
	}
	token, err := nodeToken(cfg, log)
	return token, agents, err
}

// nodeToken is the token the node API asks for: api.token_file's, else the
// one generated in the data dir at the node's first start (made here). The
// data dir is made here too, once the token file is known to be good.
func nodeToken(cfg config.Config, log zerolog.Logger) (string, error) {
	token, err := cfg.API.Token()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	if token != "" {
		return token, nil
	}
	token, path, err := cfg.API.NodeToken(cfg.DataDir)
	if err == nil {
		log.Info().Str("token_file", path).Msg("node API token: api.token_file unset, using the one generated in the data dir (botctl commands given --data-dir send it)")
	}
	return token, err
}

// checkListener refuses a node API reachable from other machines with a
// token they cannot know: the one this node generated in its data dir.
// Other nodes (tier 2) and tools elsewhere need the cluster's shared
// api.token_file.
func checkListener(ln net.Listener, tokenFile string) error {
	if tokenFile != "" {
		return nil
	}
	addr := ln.Addr().String()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("node API listener %s: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("config key api.token_file: the node API listens on %s, not a loopback address, with only the token generated in this node's data dir "+
			"(other nodes and machines cannot know it): set api.token_file to the cluster's token file, or listen on 127.0.0.1", addr)
	}
	return nil
}

// requireToken lets a request through only with "Authorization: Bearer
// <token>". An empty token lets nothing through (Run always has one).
// The comparison takes the same time whatever the guess: both sides are
// hashed first, so not even the length leaks.
func requireToken(token string, h http.Handler) http.Handler {
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(got))
		if token == "" || !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="botctl node API"`)
			httpjson.WriteIndented(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong bearer token: send Authorization: Bearer <the token>, " +
				"the contents of api.token_file or, when that is unset, of the node's data_dir/" + config.GeneratedTokenFile})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// pprofRoutes mounts Go's profiler under /debug/pprof/ (api.pprof), every
// path behind the token: the index and the named profiles (allocs, heap,
// goroutine, …; ?debug=0 for the protobuf `go tool pprof` reads), a CPU
// profile (profile?seconds=N: the server's write timeout is stretched by
// N), the execution trace and symbol lookups. Not cmdline: a test's argv
// may hold a bot secret (--bot ID:SECRET), and no profile needs it. The
// handlers are mounted on the API's own mux, never http.DefaultServeMux
// (where the embedded nats-server's import registers them unguarded).
func pprofRoutes(mux *http.ServeMux, token string) {
	mux.Handle("GET /debug/pprof/", requireToken(token, http.HandlerFunc(pprof.Index)))
	mux.Handle("GET /debug/pprof/profile", requireToken(token, http.HandlerFunc(pprof.Profile)))
	mux.Handle("GET /debug/pprof/trace", requireToken(token, http.HandlerFunc(pprof.Trace)))
	mux.Handle("GET /debug/pprof/symbol", requireToken(token, http.HandlerFunc(pprof.Symbol)))
	mux.Handle("POST /debug/pprof/symbol", requireToken(token, http.HandlerFunc(pprof.Symbol)))
}
