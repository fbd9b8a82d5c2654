package config

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/botctl/botctl/pkg/redact"
	"github.com/nats-io/nats.go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// API is the node's HTTP API (status, health, and tier 2's POST /v1/exec).
type API struct {
	// TokenFile holds the bearer token every caller of the node API must
	// send (Authorization: Bearer <token>; GET /healthz, /readyz and
	// /metrics excepted), compared in constant time; the dispatcher's
	// tier-2 calls send it, so every node of a cluster uses the same file.
	// At least 16 bytes (e.g. `openssl rand -hex 32`); the file must not be
	// readable by every user. Required when listen is not a loopback
	// address and when dispatch.fixed_worker is set. "": the node uses the
	// token it generated in its data dir (GeneratedTokenFile), which only
	// this machine's botctl commands, given the data dir, know.
	TokenFile string `yaml:"token_file"`
	// CertFile and KeyFile, if set, serve the API over HTTPS (the node
	// registers https://HOST:PORT), so that the token and the tasks cannot
	// be read off the network. Both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// CAFile is the PEM CA that signed the other nodes' API certificates,
	// for tier-2 calls and `botctl status` ("": the system's roots).
	CAFile string `yaml:"ca_file"`
	// Pprof mounts Go's profiler (net/http/pprof) under /debug/pprof/ on
	// the node API, behind the token like every path but /healthz,
	// /readyz and /metrics: CPU, allocation, heap and goroutine profiles
	// of a running node, for `go tool pprof` (test/load's ramp takes them
	// this way). Off by default: a profile names the code and shows how
	// busy the node is, and a CPU profile costs a little while it runs.
	Pprof bool `yaml:"pprof"`
	// AgentTokensFile, if set, names the agents that may call the WeCom
	// MCP gateway (/v1/bots/{bot}/mcp/{biz_type}) with a token of their
	// own instead of the node's: one "NAME TOKEN" a line (# comments),
	// the name what the audit records. Such a token opens the gateway
	// only, no other endpoint. Same rules as api.token_file: not readable
	// by every user, each token at least MinTokenBytes. Read at start.
	AgentTokensFile string `yaml:"agent_tokens_file"`
	// ForwardPeers are the hosts, or host:port, of the other nodes' APIs a
	// standby may forward a send to (with the node's token) when
	// api.ca_file is not set: without one of the two, a standby forwards
	// only to a leader on this machine (forward.go). Empty by default.
	ForwardPeers []string `yaml:"forward_peers"`
}

func (a API) tlsFiles() tlsFiles {
	return tlsFiles{section: "api", caFile: a.CAFile, certFile: a.CertFile, keyFile: a.KeyFile}
}

// ServerTLS is the API's server TLS configuration (nil: plain HTTP).
func (a API) ServerTLS() (*tls.Config, error) {
	if a.CertFile == "" && a.KeyFile == "" {
		return nil, nil
	}
	f := a.tlsFiles()
	f.caFile = "" // a client CA: the API authenticates callers by token, not certificate
	tc, err := f.load()
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: tc.Certificates}, nil
}

// ClientTLS is what a caller of other nodes' APIs trusts: api.ca_file's CA
// (nil: the system's roots).
func (a API) ClientTLS() (*tls.Config, error) {
	if a.CAFile == "" {
		return nil, nil
	}
	return tlsFiles{section: "api", caFile: a.CAFile}.load()
}

// MinTokenBytes is the shortest api.token_file accepted.
const MinTokenBytes = 16

// GeneratedTokenFile is where, in the data dir, a node without
// api.token_file keeps the API token it generated at its first start
// (mode 0600, reused on every later start).
const GeneratedTokenFile = "api.token"

// Token reads the API token of api.token_file ("" when it is unset).
func (a API) Token() (string, error) {
	if a.TokenFile == "" {
		return "", nil
	}
	return readToken("api.token_file", a.TokenFile)
}

func readToken(key, path string) (string, error) {
	tok, err := readSecretFile(key, path)
	if err != nil {
		return "", err
	}
	if len(tok) < MinTokenBytes {
		return "", fmt.Errorf("config key %s: %s holds %d bytes, want at least %d (make one with: openssl rand -hex 32 > %s)", key, path, len(tok), MinTokenBytes, path)
	}
	return tok, nil
}

// NodeToken is the token the node API asks for: api.token_file's, else
// the one generated in dataDir (GeneratedTokenFile), made now (32 random
// bytes, hex, mode 0600) when there is none yet. Path is the file it is
// in, for messages. The data dir must exist.
func (a API) NodeToken(dataDir string) (token, path string, err error) {
	if a.TokenFile != "" {
		tok, err := a.Token()
		return tok, a.TokenFile, err
	}
	path = filepath.Join(dataDir, GeneratedTokenFile)
	if tok, err := a.CallerToken(dataDir); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return tok, path, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", path, fmt.Errorf("config key api.token_file: unset, and no token could be generated: %w", err)
	}
	tok := hex.EncodeToString(raw)
	// Written under another name, then linked: a reader never sees half a
	// token, and of two starts racing on one data dir the second reads the
	// first's.
	tmp, err := os.CreateTemp(dataDir, GeneratedTokenFile+".*")
	if err != nil {
		return "", path, fmt.Errorf("config key api.token_file: unset, and the generated token cannot be written to the data dir: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(tok + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil { // CreateTemp made it 0600
		err = os.Link(tmp.Name(), path)
	}
	if errors.Is(err, fs.ErrExist) {
		tok, err := a.CallerToken(dataDir)
		return tok, path, err
	}
	if err != nil {
		return "", path, fmt.Errorf("config key api.token_file: unset, and the generated token cannot be written to %s: %w", path, err)
	}
	return tok, path, nil
}

// CallerToken is the token a caller on this machine (botctl status, the
// load and chaos tools) sends to the node API: api.token_file's, else the
// one its node generated in dataDir. An error wrapping fs.ErrNotExist
// when neither exists (the node never started with that data dir).
func (a API) CallerToken(dataDir string) (string, error) {
	if a.TokenFile != "" {
		return a.Token()
	}
	path := filepath.Join(dataDir, GeneratedTokenFile)
	tok, err := readToken("api.token_file", path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("config key api.token_file: unset, and %s does not exist (a node generates it there at its first start): give --config with api.token_file, or the --data-dir of the node: %w", path, err)
	}
	return tok, err
}

// readSecretFile reads a file holding one secret, trimmed. A file every user
// may read is refused: the secret is not one any more.
func readSecretFile(key, path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("config key %s: %w", key, err)
	}
	if fi.Mode().Perm()&0o004 != 0 {
		return "", fmt.Errorf("config key %s: %s is readable by every user (mode %s): chmod 600 it", key, path, fi.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("config key %s: %w", key, err)
	}
	s := strings.TrimSpace(string(raw))
	if s == "" {
		return "", fmt.Errorf("config key %s: %s is empty", key, path)
	}
	return s, nil
}

// tlsFiles names a section's TLS keys, for errors.
type tlsFiles struct {
	section                   string // "etcd" or "nats"
	caFile, certFile, keyFile string
}

func (f tlsFiles) set() bool { return f.caFile != "" || f.certFile != "" || f.keyFile != "" }

// load builds the client TLS configuration: the CA's certificates as the
// only roots when ca_file is set (else the system's), the client
// certificate when cert_file and key_file are. nil when nothing is set.
func (f tlsFiles) load() (*tls.Config, error) {
	if !f.set() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.caFile != "" {
		pem, err := os.ReadFile(f.caFile)
		if err != nil {
			return nil, fmt.Errorf("config key %s.ca_file: %w", f.section, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("config key %s.ca_file: %s holds no PEM certificate", f.section, f.caFile)
		}
		tc.RootCAs = pool
	}
	switch {
	case f.certFile == "" && f.keyFile == "":
	case f.certFile == "":
		return nil, fmt.Errorf("config key %s.cert_file: %s.key_file is set without it: give both, or neither", f.section, f.section)
	case f.keyFile == "":
		return nil, fmt.Errorf("config key %s.key_file: %s.cert_file is set without it: give both, or neither", f.section, f.section)
	default:
		if _, err := readSecretFile(f.section+".key_file", f.keyFile); err != nil {
			return nil, err
		}
		pair, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
		if err != nil {
			return nil, fmt.Errorf("config keys %s.cert_file / %s.key_file: %w", f.section, f.section, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

func (e Etcd) tlsFiles() tlsFiles {
	return tlsFiles{section: "etcd", caFile: e.CAFile, certFile: e.CertFile, keyFile: e.KeyFile}
}

// The etcd client's gRPC keepalive: a connection quiet for
// EtcdKeepAliveTime is pinged, and closed when the ping is not answered
// within EtcdKeepAliveTimeout, so the client leaves a frozen member (a
// stopped process, a link that drops packets without a reset) for another
// within about 15 s instead of waiting on it for as long as TCP does.
// Pings go only while an RPC or stream is open (a node always has its
// lease's keep-alive stream): etcd servers refuse pings without one, and
// pings closer than their --grpc-keepalive-min-time (5 s by default), as
// abuse.
const (
	EtcdKeepAliveTime    = 10 * time.Second
	EtcdKeepAliveTimeout = 5 * time.Second
)

// ClientConfig is the etcd client configuration for endpoints (normally
// e.Endpoints; the embedded etcd's when they are empty): TLS from ca_file,
// cert_file and key_file, and username with the password read from
// password_file. Every error names its key.
func (e Etcd) ClientConfig(endpoints []string) (clientv3.Config, error) {
	cc := clientv3.Config{Endpoints: endpoints, DialTimeout: e.DialTimeout, Logger: zap.NewNop(),
		DialKeepAliveTime: EtcdKeepAliveTime, DialKeepAliveTimeout: EtcdKeepAliveTimeout}
	tc, err := e.tlsFiles().load()
	if err != nil {
		return cc, err
	}
	cc.TLS = tc
	switch {
	case e.Username != "" && e.PasswordFile == "":
		return cc, errors.New("config key etcd.password_file: etcd.username is set without a password: give etcd.password_file")
	case e.Username == "" && e.PasswordFile != "":
		return cc, errors.New("config key etcd.username: etcd.password_file is set without a user name")
	case e.Username != "":
		pw, err := readSecretFile("etcd.password_file", e.PasswordFile)
		if err != nil {
			return cc, err
		}
		cc.Username, cc.Password = e.Username, pw
	}
	return cc, nil
}

func (n NATS) tlsFiles() tlsFiles {
	return tlsFiles{section: "nats", caFile: n.CAFile, certFile: n.CertFile, keyFile: n.KeyFile}
}

// Options are the NATS connection's TLS and credentials: one of creds_file
// (a JWT and seed, decentralised auth), nkey_file (an nkey seed) or user
// with password_file; TLS from ca_file, cert_file and key_file. Every error
// names its key.
func (n NATS) Options() ([]nats.Option, error) {
	var opts []nats.Option
	tc, err := n.tlsFiles().load()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, nats.Secure(tc))
	}
	var methods []string
	for _, kv := range []keyValue{{"nats.creds_file", n.CredsFile}, {"nats.nkey_file", n.NKeyFile}, {"nats.user", n.User}} {
		if kv.value != "" {
			methods = append(methods, kv.key)
		}
	}
	if len(methods) > 1 {
		return nil, fmt.Errorf("config keys %s: give one way to authenticate to NATS, not %d", strings.Join(methods, ", "), len(methods))
	}
	switch {
	case n.User != "" && n.PasswordFile == "":
		return nil, errors.New("config key nats.password_file: nats.user is set without a password: give nats.password_file")
	case n.PasswordFile != "" && n.User == "":
		return nil, errors.New("config key nats.user: nats.password_file is set without a user name")
	case n.User != "":
		pw, err := readSecretFile("nats.password_file", n.PasswordFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserInfo(n.User, pw))
	case n.NKeyFile != "":
		if _, err := readSecretFile("nats.nkey_file", n.NKeyFile); err != nil {
			return nil, err
		}
		o, err := nats.NkeyOptionFromSeed(n.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("config key nats.nkey_file: %w (want a user seed, SU…, e.g. from `nk -gen user`)", err)
		}
		opts = append(opts, o)
	case n.CredsFile != "":
		creds, err := readSecretFile("nats.creds_file", n.CredsFile)
		if err != nil {
			return nil, err
		}
		if !strings.Contains(creds, "BEGIN NATS USER JWT") || !strings.Contains(creds, "BEGIN USER NKEY SEED") {
			return nil, fmt.Errorf("config key nats.creds_file: %s is not a NATS credentials file (want a user JWT and seed, e.g. from `nsc generate creds`)", n.CredsFile)
		}
		opts = append(opts, nats.UserCredentials(n.CredsFile))
	}
	return opts, nil
}

// RefusedError, for an error connecting with these Options, is the error
// a reader acts on when the server refused the credentials (authorization
// violation, user or account expired or revoked): it names the key that
// holds them and what to check. nil when err is not a refusal (the server
// is away, TLS failed, …): the caller reports err as it is.
func (n NATS) RefusedError(err error) error {
	if err == nil || !(errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)) {
		return nil
	}
	switch {
	case n.CredsFile != "":
		return fmt.Errorf("config key nats.creds_file: NATS refused the user of %s: %w (is its account known to the servers' resolver (nsc push), signed by an operator they trust, and neither expired nor revoked?)", n.CredsFile, err)
	case n.NKeyFile != "":
		return fmt.Errorf("config key nats.nkey_file: NATS refused the nkey user of %s: %w (is its public key, nk -inkey FILE -pubout, among the servers' authorization users?)", n.NKeyFile, err)
	case n.User != "":
		return fmt.Errorf("config key nats.password_file: NATS refused user %s with the password in %s: %w", n.User, n.PasswordFile, err)
	default:
		return fmt.Errorf("config keys nats.creds_file, nats.nkey_file, nats.user: NATS asks for credentials and none is set: %w (give one of them)", err)
	}
}

// keyValue is a key and its value, in the order errors list them.
type keyValue struct{ key, value string }

// prefixKeyRE is nats.prefix: upper case, so that two prefixes never differ
// only in case (the task subjects are the prefix in lower case: BOTCTL and
// botctl would share them).
var prefixKeyRE = regexp.MustCompile(`^[A-Z0-9][A-Z0-9_-]{0,31}$`)

// LoopbackHost reports whether host (a name or an IP, without port) is
// this machine only: "localhost" or a loopback IP. "", 0.0.0.0 and :: are
// every interface, so not.
func LoopbackHost(host string) bool {
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// natsServer is the host of one server of nats.url and whether its URL
// asks for TLS (tls://; the other scheme allowed is nats://).
func natsServer(raw string) (host string, secure bool) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", false // refused with the URL checks
	}
	return u.Hostname(), u.Scheme == "tls"
}

// validateSecurity checks the secrets, etcd, nats and api keys, and the rules that
// keep secrets off the wire in clear text.
func (c *Config) validateSecurity(bad func(key, format string, args ...any), errs *[]error) {
	c.validateSecrets(errs)
	// etcd
	etls := c.Etcd.tlsFiles()
	if len(c.Etcd.Endpoints) == 0 {
		for _, kv := range []keyValue{{"etcd.ca_file", c.Etcd.CAFile}, {"etcd.cert_file", c.Etcd.CertFile}, {"etcd.key_file", c.Etcd.KeyFile}, {"etcd.username", c.Etcd.Username}, {"etcd.password_file", c.Etcd.PasswordFile}} {
			if kv.value != "" {
				bad(kv.key, "set, but etcd.endpoints is empty (the embedded etcd listens on loopback without TLS or users): give etcd.endpoints, or unset %s", kv.key)
			}
		}
	}
	for i, e := range c.Etcd.Endpoints {
		u, err := url.Parse(e)
		if err != nil {
			continue // reported with the endpoint checks
		}
		key := fmt.Sprintf("etcd.endpoints[%d]", i)
		if u.User != nil {
			bad(key, "%s holds credentials: use etcd.username and etcd.password_file", redact.URL(e))
		}
		if u.Scheme == "http" && etls.set() {
			bad(key, "%s is plain http but etcd.ca_file/cert_file/key_file are set: use https://", redact.URL(e))
		}
		if u.Scheme == "http" && c.Etcd.Username != "" && !LoopbackHost(u.Hostname()) {
			bad(key, "%s is plain http: etcd.username's password would cross the network in clear text; use https:// (with etcd.ca_file)", redact.URL(e))
		}
	}
	if len(c.Etcd.Endpoints) > 0 {
		if _, err := c.Etcd.ClientConfig(c.Etcd.Endpoints); err != nil {
			*errs = append(*errs, err)
		}
	}

	// nats
	if !prefixKeyRE.MatchString(c.NATS.Prefix) {
		bad("nats.prefix", "%q: want 1-32 upper-case letters, digits, '_' or '-', starting with a letter or digit (e.g. BOTCTL, BOTCTL_STAGING)", c.NATS.Prefix)
	}
	if c.NATS.URL == "" {
		for _, kv := range []keyValue{{"nats.ca_file", c.NATS.CAFile}, {"nats.cert_file", c.NATS.CertFile}, {"nats.key_file", c.NATS.KeyFile}, {"nats.user", c.NATS.User}, {"nats.password_file", c.NATS.PasswordFile}, {"nats.creds_file", c.NATS.CredsFile}, {"nats.nkey_file", c.NATS.NKeyFile}} {
			if kv.value != "" {
				bad(kv.key, "set, but nats.url is empty (the embedded NATS listens on loopback without TLS or users): give nats.url, or unset %s", kv.key)
			}
		}
	} else {
		for i, raw := range strings.Split(c.NATS.URL, ",") {
			if u, err := url.Parse(strings.TrimSpace(raw)); err == nil && u.User != nil {
				bad("nats.url", "server %d holds credentials (%s): use nats.user and nats.password_file, nats.nkey_file or nats.creds_file", i+1, redact.URL(raw))
			}
		}
		if _, err := c.NATS.Options(); err != nil {
			*errs = append(*errs, err)
		}
		if c.NATS.User != "" && !c.NATS.tlsFiles().set() {
			for i, raw := range strings.Split(c.NATS.URL, ",") {
				if host, secure := natsServer(raw); !secure && !LoopbackHost(host) {
					bad("nats.url", "server %d (%s) is not TLS: nats.user's password (nats.password_file) would cross the network in clear text; "+
						"use tls://HOST:4222 (with nats.ca_file for a private CA), or nats.nkey_file / nats.creds_file, which send no password", i+1, redact.URL(strings.TrimSpace(raw)))
				}
			}
		}
	}

	// api
	if host, _, err := net.SplitHostPort(c.Listen); err == nil && !LoopbackHost(host) && c.API.TokenFile == "" {
		bad("api.token_file", "listen is %s, not a loopback address, and the node API would have only the token generated in its data dir, which other nodes and machines cannot know: set api.token_file to the cluster's token file (see docs/security.md), or listen on 127.0.0.1", c.Listen)
	}
	token, err := c.API.Token()
	if err != nil {
		*errs = append(*errs, err)
	}
	if agents, err := c.API.AgentTokens(); err != nil {
		*errs = append(*errs, err)
	} else if name := agents[token]; token != "" && name != "" {
		bad("api.agent_tokens_file", "agent %s has the node API's token (api.token_file): give each agent a token of its own", name)
	}
	if _, err := c.API.ServerTLS(); err != nil {
		*errs = append(*errs, err)
	}
	if _, err := c.API.ClientTLS(); err != nil {
		*errs = append(*errs, err)
	}
	for i, p := range c.API.ForwardPeers {
		if err := validForwardPeer(p); err != nil {
			bad("api.forward_peers", "entry %d: %v", i+1, err)
		}
	}
	if u, err := url.Parse(c.Dispatch.FixedWorker); err == nil && c.Dispatch.FixedWorker != "" {
		if c.API.TokenFile == "" {
			bad("api.token_file", "dispatch.fixed_worker is %s, another node, whose API asks for the cluster's token (a node's generated one is its own): set api.token_file to the same file as on that node", redact.URL(c.Dispatch.FixedWorker))
		}
		if u.Scheme == "http" && !LoopbackHost(u.Hostname()) {
			bad("dispatch.fixed_worker", "%s is plain http to another machine: the API token (api.token_file) and the task would cross the network in clear text; "+
				"use https:// (api.cert_file and api.key_file on that node, api.ca_file here)", redact.URL(c.Dispatch.FixedWorker))
		}
	}

	// wecom: the bot secret crosses this connection.
	if u, err := url.Parse(c.WeCom.URL); err == nil && u.Scheme == "ws" && !LoopbackHost(u.Hostname()) {
		bad("wecom.url", "%s is plain ws:// to another machine: the bot secrets would cross the network in clear text; use wss:// (ws:// is allowed only to a loopback simulator)", redact.URL(c.WeCom.URL))
	}
}
