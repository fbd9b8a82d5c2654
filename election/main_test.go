package election

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/infra"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

// etcdAddr is the client address of the embedded etcd all tests share;
// each test uses its own key prefix.
var etcdAddr string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "election-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		e, ecfg, err := infra.StartEtcdOnFreePorts(ctx, infra.EtcdConfig{DataDir: dir, UnsafeNoFsync: true, Logger: zerolog.Nop()})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		etcdAddr = ecfg.ClientAddr
		code := m.Run()
		e.Close()
		if code == 0 {
			// Everything, including the embedded etcd, must be gone.
			if err := goleak.Find(); err != nil {
				fmt.Fprintln(os.Stderr, "goleak:", err)
				return 1
			}
		}
		return code
	}()
	os.Exit(code)
}

// leakCheck fails t if goroutines started during the test are still running
// once its cleanups (registered later, so run earlier) are done.
// Goroutines of the shared etcd server (serving our clients' streams) are
// not the test's: they are ignored here and checked in TestMain once the
// server has stopped.
func leakCheck(t *testing.T) {
	opts := []goleak.Option{
		goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).GoAttach.func1"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/embed.(*serveCtx).startHandler.func1"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc.(*Server).serveStreams"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc.(*Server).handleRawConn"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc.(*Server).Serve.func3"),
	}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

// newClient is one node's etcd client, to addr (default: the shared etcd).
func newClient(t *testing.T, addr string) *clientv3.Client {
	t.Helper()
	if addr == "" {
		addr = etcdAddr
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"http://" + addr},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

var (
	prefixMu sync.Mutex
	prefixes = map[*testing.T]string{}
)

// testPrefix is unique to one run of one test (-count=N reruns it).
func testPrefix(t *testing.T) string {
	prefixMu.Lock()
	defer prefixMu.Unlock()
	p, ok := prefixes[t]
	if !ok {
		p = fmt.Sprintf("/test/%d/%s/", len(prefixes), strings.ReplaceAll(t.Name(), "/", "_"))
		prefixes[t] = p
	}
	return p
}

// testConfig is a config with a test-unique prefix and a short TTL.
func testConfig(t *testing.T, bot, node string, ttl time.Duration) Config {
	return Config{
		Prefix:          testPrefix(t),
		LegacyPrefix:    "/legacy" + testPrefix(t),
		PulsePrefix:     "/pulse" + testPrefix(t),
		NodePulsePrefix: "/nodepulse" + testPrefix(t),
		BotID:           bot,
		NodeID:          node,
		TTL:             ttl,
		Logger:          zerolog.New(zerolog.NewTestWriter(t)).With().Timestamp().Logger(),
	}
}

func newElector(t *testing.T, cli *clientv3.Client, cfg Config) *Elector {
	t.Helper()
	e, err := New(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// campaign runs Campaign in the background; the result arrives on the
// returned channel. The test's cleanup cancels it and waits.
type result struct {
	term *Term
	err  error
	at   time.Time
}

func campaign(t *testing.T, ctx context.Context, e *Elector, opts ...CampaignOption) <-chan result {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan result, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		term, err := e.Campaign(ctx, opts...)
		ch <- result{term, err, time.Now()}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		select {
		case r := <-ch: // never awaited
			if r.term != nil {
				r.term.End()
			}
		default:
		}
	})
	return ch
}

// await waits for a campaign result or fails the test after timeout.
func await(t *testing.T, ch <-chan result, timeout time.Duration) result {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Campaign: %v", r.err)
		}
		t.Cleanup(r.term.End)
		return r
	case <-time.After(timeout):
		t.Fatalf("no campaign result after %s", timeout)
		return result{}
	}
}

// waitDone waits for a term to end or fails the test after timeout.
func waitDone(t *testing.T, term *Term, timeout time.Duration) time.Time {
	t.Helper()
	select {
	case <-term.Done():
		return time.Now()
	case <-time.After(timeout):
		t.Fatalf("term of node %s still live after %s", term.Node, timeout)
		return time.Time{}
	}
}

// bg is a context for one test, cancelled at its end.
func bg(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}
