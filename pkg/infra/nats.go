package infra

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// DefaultNATSStartTimeout bounds how long StartNATS waits for the server to
// accept clients when NATSConfig.StartTimeout is zero.
const DefaultNATSStartTimeout = 30 * time.Second

// NATSConfig configures an embedded NATS server with JetStream.
type NATSConfig struct {
	// DataDir holds JetStream's store under DataDir/jetstream. Required.
	DataDir string
	// Addr is the client "host:port", e.g. "127.0.0.1:4222". Port 0 or -1
	// picks a free port; ClientURL reports it.
	Addr string
	// StartTimeout bounds the wait for the server to accept clients.
	// Default DefaultNATSStartTimeout.
	StartTimeout time.Duration
	// CertFile and KeyFile, if set, make the server require TLS of every
	// client; CAFile, if set too, makes it require and verify a client
	// certificate signed by that CA (nats-server's tls.verify).
	CertFile, KeyFile, CAFile string
	// Users (name → password) and NKeys (users' public keys), if any, are
	// the only clients let in; none: no authentication.
	Users map[string]string
	NKeys []string
	// SyncInterval is how often JetStream fsyncs its files. Zero, botctl's
	// default, is nats-server's "sync_interval: always": every write is on
	// disk before it is acknowledged, so an acknowledged task or answer
	// survives a power cut of the machine. nats-server's own default is 2
	// minutes (acknowledged writes of the last 2 minutes can be lost when
	// the machine loses power); a positive value chooses such an interval.
	SyncInterval time.Duration
	// Logger receives the server's notices, warnings and errors.
	Logger zerolog.Logger
}

// NATS is a running embedded NATS server with JetStream enabled.
type NATS struct {
	s *server.Server
}

// StartNATS starts the server and returns once it accepts clients.
func StartNATS(cfg NATSConfig) (*NATS, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("start nats: DataDir is required")
	}
	host, port, err := splitAddr(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("start nats: Addr %q: %w", cfg.Addr, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT // nats-server reads 0 as "the default, 4222"
	}
	timeout := cfg.StartTimeout
	if timeout == 0 {
		timeout = DefaultNATSStartTimeout
	}
	storeDir := filepath.Join(cfg.DataDir, "jetstream")
	if err := os.MkdirAll(storeDir, 0o700); err != nil {
		return nil, fmt.Errorf("start nats: %w", err)
	}
	opts := &server.Options{
		ServerName: "botctl",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   storeDir,
		NoSigs:     true, // the botctl process owns signals
		// No HTTP monitoring, no cluster: a single embedded server.
	}
	if cfg.SyncInterval > 0 {
		opts.SyncInterval = cfg.SyncInterval
	} else {
		opts.SyncAlways = true
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" || cfg.CAFile != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, CaFile: cfg.CAFile, Verify: cfg.CAFile != ""})
		if err != nil {
			return nil, fmt.Errorf("start nats: TLS: %w", err)
		}
		opts.TLS, opts.TLSConfig, opts.TLSVerify = true, tc, cfg.CAFile != ""
	}
	for name, pw := range cfg.Users {
		opts.Users = append(opts.Users, &server.User{Username: name, Password: pw})
	}
	for _, pub := range cfg.NKeys {
		opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: pub})
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("start nats on %s: %w", cfg.Addr, err)
	}
	s.SetLogger(natsLogger{cfg.Logger.With().Str("component", "nats").Logger()}, false, false)
	s.Start()
	if !s.ReadyForConnections(timeout) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("start nats on %s: not accepting clients after %s (port taken? see the log)", cfg.Addr, timeout)
	}
	if !s.JetStreamEnabled() {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("start nats on %s: JetStream did not start (store dir %s)", cfg.Addr, storeDir)
	}
	return &NATS{s: s}, nil
}

// ParseSync reads a sync interval as flags give it: "always" is 0
// (NATSConfig.SyncInterval's fsync-every-write), else a positive duration.
func ParseSync(v string) (time.Duration, error) {
	if v == "always" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, errors.New(`want "always" or a positive interval such as 2m`)
	}
	return d, nil
}

// SyncAlways reports whether JetStream fsyncs every write (see
// NATSConfig.SyncInterval).
func (n *NATS) SyncAlways() bool { return n.s.JetStreamConfig().SyncAlways }

// ClientURL is the URL clients connect to, e.g. "nats://127.0.0.1:4222".
func (n *NATS) ClientURL() string { return n.s.ClientURL() }

// Close shuts the server down and waits until it has. Safe to call twice.
func (n *NATS) Close() {
	n.s.Shutdown()
	n.s.WaitForShutdown()
}

// natsLogger writes nats-server's log lines to zerolog. Notices are logged
// at debug: the server announces a lot at start that an operator of the
// embedded default does not need.
type natsLogger struct{ log zerolog.Logger }

func (l natsLogger) Noticef(format string, v ...any) { l.log.Debug().Msgf(format, v...) }
func (l natsLogger) Warnf(format string, v ...any)   { l.log.Warn().Msgf(format, v...) }
func (l natsLogger) Fatalf(format string, v ...any)  { l.log.Error().Msgf(format, v...) }
func (l natsLogger) Errorf(format string, v ...any)  { l.log.Error().Msgf(format, v...) }
func (l natsLogger) Debugf(format string, v ...any)  { l.log.Trace().Msgf(format, v...) }
func (l natsLogger) Tracef(format string, v ...any)  { l.log.Trace().Msgf(format, v...) }
