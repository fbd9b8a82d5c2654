package testenv

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/botctl/botctl/dataplane"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BucketFault is an embedded JetStream server on which one KV bucket can
// be made to fail for botctl's user and brought back, while every other
// stream and bucket keeps answering. The fault is the server's own: the
// user's permission to publish anything about the bucket (its writes,
// direct gets, stream and consumer API requests) is taken away by a
// configuration reload, so every request about the bucket goes
// unanswered until it times out, as when a bucket's stream has lost its
// leader; nothing stored is lost, and Heal gives the permission back.
type BucketFault struct {
	// URL is botctl's (the user the fault applies to), credentials in it.
	URL string
	// ProbeURL is a user the fault never applies to, for the test's own
	// reads of what botctl left.
	ProbeURL string

	srv  *server.Server
	opts *server.Options
}

const (
	faultUser, faultProbe, faultPassword = "botctl", "probe", "bucket-fault-pw"
)

// StartBucketFault starts the server, healthy; it is shut down when the
// test ends.
func StartBucketFault(t testing.TB) *BucketFault {
	t.Helper()
	f := &BucketFault{opts: &server.Options{ServerName: "bucketfault", Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true}}
	f.opts.Users = f.users(nil)
	s, err := server.NewServer(f.opts.Clone())
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats server not ready")
	}
	f.srv = s
	u, err := url.Parse(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(faultUser, faultPassword)
	f.URL = u.String()
	u.User = url.UserPassword(faultProbe, faultPassword)
	f.ProbeURL = u.String()
	return f
}

// Fail makes bucket (its name, e.g. BOTCTL_TASKS) fail for botctl's user.
func (f *BucketFault) Fail(t testing.TB, bucket string) {
	t.Helper()
	stream := "KV_" + bucket
	f.reload(t, []string{
		"$KV." + bucket + ".>", // puts, creates, updates, deletes
		// $JS.API.STREAM.INFO.<stream>, $JS.API.DIRECT.GET.<stream>…,
		// $JS.API.CONSUMER.CREATE.<stream>… (watches, key lists),
		// $JS.API.STREAM.MSG.GET.<stream>.
		"$JS.API.*.*." + stream, "$JS.API.*.*." + stream + ".>",
		"$JS.API.*.*.*." + stream, "$JS.API.*.*.*." + stream + ".>",
	})
}

// Heal gives botctl's user its permissions back.
func (f *BucketFault) Heal(t testing.TB) {
	t.Helper()
	f.reload(t, nil)
}

func (f *BucketFault) reload(t testing.TB, deny []string) {
	t.Helper()
	o := f.opts.Clone()
	o.Users = f.users(deny)
	if err := f.srv.ReloadOptions(o); err != nil {
		t.Fatal(fmt.Errorf("reload nats permissions: %w", err))
	}
}

func (f *BucketFault) users(deny []string) []*server.User {
	botctl := &server.User{Username: faultUser, Password: faultPassword}
	if len(deny) > 0 {
		botctl.Permissions = &server.Permissions{Publish: &server.SubjectPermission{Allow: []string{">"}, Deny: deny}}
	}
	return []*server.User{botctl, {Username: faultProbe, Password: faultPassword}}
}

// Store connects to url (URL or ProbeURL) and declares the store with
// opts; the connection is closed when the test ends. Its error handler is
// silent: the fault shows as the server's permission violations.
func (f *BucketFault) Store(t testing.TB, url string, opts dataplane.Options) (*nats.Conn, *dataplane.Store) {
	t.Helper()
	nc, err := nats.Connect(url, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := dataplane.Declare(ctx, js, opts)
	if err != nil {
		t.Fatal(err)
	}
	return nc, st
}
