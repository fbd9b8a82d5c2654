// Command infranode runs one member of test/infracluster's shared state: an
// etcd member of a multi-member cluster, or a NATS server of a JetStream
// cluster. One process per member, so test/chaos can kill -9, SIGTERM or
// SIGSTOP each one on its own, the way an operator loses a machine, and
// test/load can read each one's CPU and memory.
//
//	infranode etcd -name e1 -dir D -client 127.0.0.1:P -peer 127.0.0.1:Q \
//	    -initial-cluster e1=http://127.0.0.1:Q,e2=…,e3=… [-unsafe-no-fsync=false] [-pprof]
//	infranode nats -name n1 -dir D -port P -cluster-port C -routes nats://127.0.0.1:C2,… [-prof-port R] [-cluster-advertise H:P] [-max-file-store BYTES]
//
// -pprof serves Go's profiler on the etcd member's client URL
// (/debug/pprof/, etcd's --enable-pprof); -prof-port R is nats-server's
// own profiling port (its ProfPort: /debug/pprof/ on 127.0.0.1:R, -1 any
// free port), so test/load can take each member's CPU and allocation
// profiles.
//
// Each prints one line to stdout once it serves clients ("etcd ready: …" or
// "nats ready: …") and stops on SIGTERM or SIGINT. A restart with the same
// -dir rejoins the cluster with its data. This is test scaffolding, not a
// deployment tool: there is no TLS and no auth.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/botctl/botctl/pkg/infra"
	"github.com/nats-io/nats-server/v2/server"
	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: infranode etcd|nats [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "etcd":
		err = runEtcd(os.Args[2:])
	case "nats":
		err = runNATS(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q: want etcd or nats", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "infranode:", err)
		os.Exit(1)
	}
}

func stopSignal() <-chan os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	return ch
}

func runEtcd(args []string) error {
	fs := flag.NewFlagSet("etcd", flag.ExitOnError)
	name := fs.String("name", "", "member name")
	dir := fs.String("dir", "", "data directory")
	client := fs.String("client", "", "client host:port")
	peer := fs.String("peer", "", "peer host:port")
	initial := fs.String("initial-cluster", "", "name=http://peer,… of every member")
	noFsync := fs.Bool("unsafe-no-fsync", true, "skip fsync (a killed process loses nothing; a power cut would)")
	prof := fs.Bool("pprof", false, "serve Go's profiler under /debug/pprof/ on the client URL")
	fs.Parse(args)
	if *name == "" || *dir == "" || *client == "" || *peer == "" || *initial == "" {
		return fmt.Errorf("etcd: -name, -dir, -client, -peer and -initial-cluster are required")
	}
	cu := url.URL{Scheme: "http", Host: *client}
	pu := url.URL{Scheme: "http", Host: *peer}
	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = filepath.Join(*dir, "etcd")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = *initial
	cfg.InitialClusterToken = "botctl-infracluster"
	cfg.ClusterState = embed.ClusterStateFlagNew // ignored once the data dir has a member
	cfg.UnsafeNoFsync = *noFsync
	cfg.EnableGRPCGateway = false
	cfg.EnablePprof = *prof
	cfg.LogLevel = "warn"
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "1h"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd member %s: %w", *name, err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("etcd member %s: %w", *name, err)
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("etcd member %s: not ready after 2m (no quorum?)", *name)
	}
	fmt.Printf("etcd ready: %s %s\n", *name, cu.String())
	select {
	case <-stopSignal():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd member %s: %w", *name, err)
	}
}

func runNATS(args []string) error {
	fs := flag.NewFlagSet("nats", flag.ExitOnError)
	name := fs.String("name", "", "server name (unique in the cluster)")
	dir := fs.String("dir", "", "data directory")
	port := fs.Int("port", 0, "client port")
	cport := fs.Int("cluster-port", 0, "cluster (route) port")
	routes := fs.String("routes", "", "nats://host:port,… routes to the other servers")
	maxStore := fs.Int64("max-file-store", 0, "JetStream's max_file_store in bytes (0: nats-server's default, most of the disk)")
	advertise := fs.String("cluster-advertise", "", "host:port the server gives other servers as its route URL (default its cluster listen address)")
	sync := fs.String("sync", "", `JetStream sync_interval: "always", an interval such as 2m, or empty for nats-server's default`)
	profPort := fs.Int("prof-port", 0, "nats-server's profiling port (ProfPort): /debug/pprof/ on 127.0.0.1:PORT; -1 any free port, 0 none")
	fs.Parse(args)
	if *name == "" || *dir == "" || *port == 0 || *cport == 0 {
		return fmt.Errorf("nats: -name, -dir, -port and -cluster-port are required")
	}
	opts := &server.Options{
		ServerName: *name,
		Host:       "127.0.0.1",
		Port:       *port,
		JetStream:  true,
		StoreDir:   filepath.Join(*dir, "jetstream"),
		NoSigs:     true,
		// NoAdvertise: a client knows only the URLs it was given, so a
		// node whose every NATS URL goes through a fault proxy cannot
		// step around a partition by dialing a discovered server.
		// The route pings of deploy/example-cluster (docs/operations.md,
		// "A frozen NATS server"): a frozen peer's routes close within
		// seconds, not after nats-server's default of minutes.
		Cluster: server.ClusterOpts{Name: "botctl-infracluster", Host: "127.0.0.1", Port: *cport, NoAdvertise: true,
			PingInterval: 2 * time.Second, MaxPingsOut: 3},
		// The profiler listens on Host, loopback; nats-server serves
		// http.DefaultServeMux there, with net/http/pprof's handlers.
		ProfPort: *profPort,
	}
	if *sync != "" { // "": nats-server's default
		d, err := infra.ParseSync(*sync)
		if err != nil {
			return fmt.Errorf("nats: -sync %q: %w", *sync, err)
		}
		opts.SyncAlways, opts.SyncInterval = d == 0, d
	}
	if *routes != "" {
		opts.Routes = server.RoutesFromStr(*routes)
	}
	opts.Cluster.Advertise = *advertise
	if *maxStore > 0 {
		opts.JetStreamMaxStore = *maxStore
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("nats server %s: %w", *name, err)
	}
	s.ConfigureLogger()
	s.Start()
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	if !s.ReadyForConnections(time.Minute) {
		return fmt.Errorf("nats server %s: not accepting clients after 1m", *name)
	}
	if a := s.ProfilerAddr(); a != nil {
		fmt.Printf("nats profiler: %s http://%s/debug/pprof/\n", *name, a)
	}
	fmt.Printf("nats ready: %s %s\n", *name, s.ClientURL())
	<-stopSignal()
	return nil
}
