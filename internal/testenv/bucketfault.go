package testenv

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/faultproxy"
	"github.com/botctl/botctl/jetstream"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// BucketFault is an embedded JetStream server on which one KV bucket can
// be made to fail for botctl's connections and brought back, while every
// other stream and bucket keeps answering. botctl reaches the server
// through a proxy (URL) that reads the NATS protocol it sends; while a
// bucket fails, the proxy drops every publish about it (its writes,
// direct gets, stream and consumer API requests) before the server sees
// it, so every request about the bucket goes unanswered until it times
// out, as when a bucket's stream has lost its leader. Nothing stored is
// lost, and Heal forwards them again. The probe (ProbeURL) connects to the
// server directly and is never failed.
//
// The fault is not made with the server's permissions and a configuration
// reload: nats-server 2.15 reads its options unlocked on the direct-get
// path, and the race detector flags the reload's write inside the server.
// A single server advertises no other address to its clients, so a client
// of URL has no way around the proxy, reconnects included.
type BucketFault struct {
	// URL is botctl's (the connections the fault applies to), credentials
	// in it.
	URL string
	// ProbeURL is another user's, straight to the server: the fault never
	// applies to it, for the test's own reads of what botctl left.
	ProbeURL string

	mu   sync.Mutex
	deny []string // subject filters whose publishes through URL are dropped
}

const (
	faultUser, faultProbe, faultPassword = "botctl", "probe", "bucket-fault-pw"
)

// StartBucketFault starts the server and botctl's proxy, healthy; both are
// shut down when the test ends, every connection and goroutine of the
// proxy ended.
func StartBucketFault(t testing.TB) *BucketFault {
	t.Helper()
	f := &BucketFault{}
	s, err := server.NewServer(&server.Options{ServerName: "bucketfault", Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		Users: []*server.User{{Username: faultUser, Password: faultPassword}, {Username: faultProbe, Password: faultPassword}}})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats server not ready")
	}
	p, err := faultproxy.New("127.0.0.1:0", s.Addr().String(), faultproxy.WithClientFilter(func() func([]byte) []byte {
		return (&pubFilter{drop: f.denied}).filter
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	f.URL = (&url.URL{Scheme: "nats", User: url.UserPassword(faultUser, faultPassword), Host: p.Addr()}).String()
	f.ProbeURL = (&url.URL{Scheme: "nats", User: url.UserPassword(faultProbe, faultPassword), Host: s.Addr().String()}).String()
	return f
}

// Fail makes bucket (its name, e.g. BOTCTL_TASKS) fail for botctl's
// connections, in place of any bucket failed before: whatever they send
// about it once Fail returns is dropped.
func (f *BucketFault) Fail(t testing.TB, bucket string) {
	t.Helper()
	stream := "KV_" + bucket
	f.setDeny([]string{
		"$KV." + bucket + ".>", // puts, creates, updates, deletes
		// $JS.API.STREAM.INFO.<stream>, $JS.API.DIRECT.GET.<stream>…,
		// $JS.API.CONSUMER.CREATE.<stream>… (watches, key lists),
		// $JS.API.STREAM.MSG.GET.<stream>.
		"$JS.API.*.*." + stream, "$JS.API.*.*." + stream + ".>",
		"$JS.API.*.*.*." + stream, "$JS.API.*.*.*." + stream + ".>",
	})
}

// Heal forwards everything botctl's connections send again, from the
// moment it returns; what was dropped stays unanswered.
func (f *BucketFault) Heal(t testing.TB) {
	t.Helper()
	f.setDeny(nil)
}

func (f *BucketFault) setDeny(deny []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deny = deny
}

// denied reports whether a publish to subject is dropped now.
func (f *BucketFault) denied(subject string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, filter := range f.deny {
		if server.SubjectMatchesFilter(subject, filter) {
			return true
		}
	}
	return false
}

// Store connects to url (URL or ProbeURL) and declares the store with
// opts; the connection is closed when the test ends. Its error handler is
// silent: nats.go's default prints every asynchronous error a fault
// causes to the test's output.
func (f *BucketFault) Store(t testing.TB, url string, opts jetstream.Options) (*nats.Conn, *jetstream.Store) {
	t.Helper()
	nc, js := Connect(t, url, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := jetstream.Declare(ctx, js, opts)
	if err != nil {
		t.Fatal(err)
	}
	return nc, st
}
