package infra

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/rs/zerolog"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"
)

// DefaultEtcdStartTimeout bounds how long StartEtcd waits for the member to
// serve clients when EtcdConfig.StartTimeout is zero.
const DefaultEtcdStartTimeout = time.Minute

// EtcdConfig configures an embedded single-node etcd.
type EtcdConfig struct {
	// DataDir holds the member's data under DataDir/etcd. Required.
	DataDir string
	// ClientAddr is the "host:port" clients connect to, e.g.
	// "127.0.0.1:2379". Required; port 0 is refused because etcd cannot
	// report the port it got (StartEtcdOnFreePorts picks one).
	ClientAddr string
	// PeerAddr is the raft peer "host:port". A single node never talks to
	// peers, but etcd still listens there. Default: a free port of the
	// ephemeral range on the ClientAddr host, picked again (up to five
	// times) when another process takes it before etcd binds it.
	PeerAddr string
	// StartTimeout bounds the wait for the member to be ready. Default
	// DefaultEtcdStartTimeout; a slow disk needs more.
	StartTimeout time.Duration
	// CertFile and KeyFile, if set, make the member serve clients over TLS
	// (https://); ClientCAFile, if set too, makes it require and verify a
	// client certificate signed by that CA (etcd's --client-cert-auth).
	CertFile, KeyFile, ClientCAFile string
	// UnsafeNoFsync skips fsync: much faster, loses data on power failure.
	// For tests only.
	UnsafeNoFsync bool
	// Logger receives etcd's warnings and errors (its info lines are
	// dropped).
	Logger zerolog.Logger
	// Clock is what the wait for the member to be ready counts on.
	// Default clock.Real.
	Clock clock.Clock
}

// Etcd is a running embedded etcd member.
type Etcd struct {
	e         *embed.Etcd
	endpoints []string
	closing   *atomic.Bool
	closeOnce sync.Once
}

// StartEtcd starts a single-node etcd and returns once it serves clients.
// ctx bounds only the start; Close stops the member.
func StartEtcd(ctx context.Context, cfg EtcdConfig) (*Etcd, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("start etcd: DataDir is required")
	}
	host, port, err := splitAddr(cfg.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("start etcd: ClientAddr %q: %w", cfg.ClientAddr, err)
	}
	if port <= 0 {
		return nil, fmt.Errorf("start etcd: ClientAddr %q: need a fixed port (etcd cannot report a random one; see StartEtcdOnFreePorts)", cfg.ClientAddr)
	}
	if cfg.PeerAddr != "" {
		if _, _, err := splitAddr(cfg.PeerAddr); err != nil {
			return nil, fmt.Errorf("start etcd: PeerAddr %q: %w", cfg.PeerAddr, err)
		}
		return startEtcd(ctx, cfg, cfg.PeerAddr)
	}
	// A peer port of our own pick another process took before etcd bound
	// it (the ephemeral range is every connection's): pick again. A taken
	// ClientAddr is the caller's to fix, and is returned at once.
	return retryTaken(func() (*Etcd, string, error) {
		peer, err := pickPeer(host)
		if err != nil {
			return nil, "", fmt.Errorf("start etcd: %w", err)
		}
		e, err := startEtcd(ctx, cfg, peer)
		return e, peer, err
	})
}

// retryTaken calls start up to five times while it fails because another
// process holds one of the addresses it picked (ours; "" for any address):
// each call picks anew. Any other outcome is returned at once.
func retryTaken(start func() (e *Etcd, ours string, err error)) (*Etcd, error) {
	var err error
	for range 5 {
		var e *Etcd
		var ours string
		if e, ours, err = start(); err == nil || !addrTaken(err, ours) {
			return e, err
		}
	}
	return nil, err
}

// addrTaken reports whether err is a listen failing on EADDRINUSE, at addr
// unless addr is "".
func addrTaken(err error, addr string) bool {
	var op *net.OpError
	if !errors.Is(err, syscall.EADDRINUSE) || !errors.As(err, &op) {
		return false
	}
	return addr == "" || (op.Addr != nil && op.Addr.String() == addr)
}

// pickPeer picks StartEtcd's peer address when the config gives none (a
// variable for the test that takes the first pick).
var pickPeer = freeAddrOn

// startEtcd is StartEtcd with its peer address chosen.
func startEtcd(ctx context.Context, cfg EtcdConfig, peer string) (*Etcd, error) {
	timeout := cfg.StartTimeout
	if timeout == 0 {
		timeout = DefaultEtcdStartTimeout
	}
	dir := filepath.Join(cfg.DataDir, "etcd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}

	if (cfg.CertFile == "") != (cfg.KeyFile == "") || (cfg.ClientCAFile != "" && cfg.CertFile == "") {
		return nil, errors.New("start etcd: CertFile and KeyFile go together, and ClientCAFile needs them")
	}
	scheme := "http"
	if cfg.CertFile != "" {
		scheme = "https"
	}
	clientURL := url.URL{Scheme: scheme, Host: cfg.ClientAddr}
	peerURL := url.URL{Scheme: "http", Host: peer}
	ec := embed.NewConfig()
	ec.Name = "botctl"
	ec.Dir = dir
	ec.ListenClientUrls = []url.URL{clientURL}
	ec.AdvertiseClientUrls = []url.URL{clientURL}
	ec.ListenPeerUrls = []url.URL{peerURL}
	ec.AdvertisePeerUrls = []url.URL{peerURL}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	if cfg.CertFile != "" {
		ec.ClientTLSInfo.CertFile, ec.ClientTLSInfo.KeyFile = cfg.CertFile, cfg.KeyFile
		ec.ClientTLSInfo.TrustedCAFile = cfg.ClientCAFile
		ec.ClientTLSInfo.ClientCertAuth = cfg.ClientCAFile != ""
	}
	// Clients speak gRPC; the HTTP/JSON gateway would only add a listener
	// surface and its own internal gRPC clients.
	ec.EnableGRPCGateway = false
	ec.LogLevel = "warn"
	closing := new(atomic.Bool)
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newZapLogger(cfg.Logger.With().Str("component", "etcd").Logger(), zapcore.WarnLevel, closing))
	// Keep the history small: elections only need recent revisions.
	ec.AutoCompactionMode = embed.CompactorModePeriodic
	ec.AutoCompactionRetention = "1h"

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("start etcd on %s (data dir %s): %w", cfg.ClientAddr, dir, err)
	}
	m := &Etcd{e: e, endpoints: []string{clientURL.String()}, closing: closing}
	timer := clock.Or(cfg.Clock).NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return m, nil
	case err = <-e.Err():
		err = fmt.Errorf("start etcd on %s: %w", cfg.ClientAddr, err)
	case <-e.Server.StopNotify():
		err = fmt.Errorf("start etcd on %s: server stopped before it was ready", cfg.ClientAddr)
	case <-timer.C():
		err = fmt.Errorf("start etcd on %s: not ready after %s (slow disk, or data dir %s from another cluster?)", cfg.ClientAddr, timeout, dir)
	case <-ctx.Done():
		err = fmt.Errorf("start etcd on %s: %w", cfg.ClientAddr, ctx.Err())
	}
	m.Close()
	return nil, err
}

// Endpoints are the client URLs, for clientv3.Config.Endpoints.
func (e *Etcd) Endpoints() []string { return append([]string(nil), e.endpoints...) }

// Err reports a fatal error of a running member (a listener failed). The
// channel is closed by Close.
func (e *Etcd) Err() <-chan error { return e.e.Err() }

// Close stops the member and waits for it to finish. Safe to call twice.
func (e *Etcd) Close() {
	e.closeOnce.Do(func() {
		e.closing.Store(true)
		e.e.Close()
	})
}

func freeAddrOn(host string) (string, error) {
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	addrs, err := ephemeralAddrs(host, 1)
	if err != nil {
		return "", err
	}
	return addrs[0], nil
}

// StartEtcdOnFreePorts starts a single-node etcd as StartEtcd does, on
// free loopback ports of the kernel's ephemeral range it picks for
// ClientAddr and PeerAddr (cfg's are ignored). A port another process
// takes between the pick and etcd's bind (a connection's source port, a
// listener on port 0) makes it try again with other ports, up to five
// times. It returns the config that started. Its ports are ephemeral
// ones: once the member stops, any connection may take them, so a test
// that restarts the member on the same ports picks them with
// StartEtcdOnPicked(ctx, cfg, FreeAddrs).
func StartEtcdOnFreePorts(ctx context.Context, cfg EtcdConfig) (*Etcd, EtcdConfig, error) {
	return StartEtcdOnPicked(ctx, cfg, func(n int) ([]string, error) { return ephemeralAddrs("127.0.0.1", n) })
}

// StartEtcdOnPicked is StartEtcdOnFreePorts with the ports pick returns
// (two: ClientAddr, then PeerAddr), picked again on EADDRINUSE.
func StartEtcdOnPicked(ctx context.Context, cfg EtcdConfig, pick func(n int) ([]string, error)) (*Etcd, EtcdConfig, error) {
	e, err := retryTaken(func() (*Etcd, string, error) {
		addrs, err := pick(2)
		if err != nil {
			return nil, "", fmt.Errorf("start etcd: %w", err)
		}
		cfg.ClientAddr, cfg.PeerAddr = addrs[0], addrs[1]
		e, err := StartEtcd(ctx, cfg)
		return e, "", err
	})
	return e, cfg, err
}
