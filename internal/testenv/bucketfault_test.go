package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// kvs opens buckets failed and other on url's connection (created by the
// probe beforehand).
func kvs(t *testing.T, u string) (*nats.Conn, natsjs.KeyValue, natsjs.KeyValue) {
	t.Helper()
	nc, js := Connect(t, u, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		kv  [2]natsjs.KeyValue
		err error
	)
	for i, bucket := range []string{"FAILED", "OTHER"} {
		if kv[i], err = js.CreateOrUpdateKeyValue(ctx, natsjs.KeyValueConfig{Bucket: bucket}); err != nil {
			t.Fatal(err)
		}
	}
	return nc, kv[0], kv[1]
}

// put writes key=value and reads it back, each call bounded by 2 s.
func put(kv natsjs.KeyValue, key, value string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := kv.PutString(ctx, key, value); err != nil {
		return err
	}
	return nil
}

func get(kv natsjs.KeyValue, key string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	e, err := kv.Get(ctx, key)
	if err != nil {
		return "", err
	}
	return string(e.Value()), nil
}

func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// While a bucket fails, botctl's puts and gets on it go unanswered while
// its other bucket answers and the probe reads and writes the failed one;
// a forced reconnect still goes through the proxy; after Heal everything
// answers, and the put dropped during the fault never landed.
func TestBucketFailAndHeal(t *testing.T) {
	f := StartBucketFault(t)
	_, probeFailed, _ := kvs(t, f.ProbeURL)
	nc, failed, other := kvs(t, f.URL)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	proxy, _ := url.Parse(f.URL)
	if nc.ConnectedAddr() != proxy.Host || len(nc.DiscoveredServers()) != 0 {
		t.Fatalf("botctl's connection is to %s, discovered %v: not only the proxy at %s", nc.ConnectedAddr(), nc.DiscoveredServers(), proxy.Host)
	}
	for _, kv := range []natsjs.KeyValue{failed, other} {
		if err := put(kv, "k", "before"); err != nil {
			t.Fatalf("put %s before the fault: %v", kv.Bucket(), err)
		}
	}

	f.Fail(t, "FAILED")
	check := func(when string) {
		t.Helper()
		if err := put(failed, "k", "during"); !unanswered(err) {
			t.Fatalf("%s: put on the failed bucket: %v, want a timeout", when, err)
		}
		if v, err := get(failed, "k"); !unanswered(err) {
			t.Fatalf("%s: get on the failed bucket: %q %v, want a timeout", when, v, err)
		}
		if err := put(other, "k", when); err != nil {
			t.Fatalf("%s: put on the other bucket: %v", when, err)
		}
		if v, err := get(other, "k"); err != nil || v != when {
			t.Fatalf("%s: get on the other bucket: %q %v", when, v, err)
		}
	}
	check("during the fault")
	if err := put(probeFailed, "k", "probe"); err != nil {
		t.Fatalf("the probe's put on the failed bucket: %v", err)
	}
	if v, err := get(probeFailed, "k"); err != nil || v != "probe" {
		t.Fatalf("the probe's get on the failed bucket: %q %v", v, err)
	}
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	check("after a reconnect")
	if nc.ConnectedAddr() != proxy.Host || len(nc.DiscoveredServers()) != 0 {
		t.Fatalf("after a reconnect botctl's connection is to %s, discovered %v", nc.ConnectedAddr(), nc.DiscoveredServers())
	}

	f.Heal(t)
	if v, err := get(failed, "k"); err != nil || v != "probe" {
		t.Fatalf("get on the healed bucket: %q %v, want the probe's value (the dropped puts never landed)", v, err)
	}
	if err := put(failed, "k", "after"); err != nil {
		t.Fatalf("put on the healed bucket: %v", err)
	}
	if v, err := get(probeFailed, "k"); err != nil || v != "after" {
		t.Fatalf("the probe's get after Heal: %q %v", v, err)
	}
}

// The filter keeps or drops each PUB and HPUB whole, deciding once per
// frame, however the bytes are split across reads; every other line and
// every kept frame passes byte for byte, a payload that looks like a
// protocol line included.
func TestPubFilterFrames(t *testing.T) {
	kept := "CONNECT {\"verbose\":false}\r\nPING\r\nSUB _INBOX.x 1\r\n" +
		"PUB keep _INBOX.x 12\r\nPUB deny 3\r\n\r\n" + // a payload that reads as a PUB line
		"pub\tkeep.lower 0\r\n\r\n" +
		"HPUB keep _INBOX.x 12 14\r\nNATS/1.0\r\n\r\nhi\r\n" +
		"UNSUB 1\r\nPONG\r\n"
	dropped := "PUB deny.a _INBOX.y 5\r\nhello\r\n" +
		"HPUB deny.b 12 12\r\nNATS/1.0\r\n\r\n\r\n" +
		"PUB deny.c 0\r\n\r\n"
	// Interleave: each dropped frame between kept ones.
	in := "CONNECT {\"verbose\":false}\r\n" + "PUB deny.a _INBOX.y 5\r\nhello\r\n" +
		"PING\r\nSUB _INBOX.x 1\r\n" +
		"PUB keep _INBOX.x 12\r\nPUB deny 3\r\n\r\n" +
		"HPUB deny.b 12 12\r\nNATS/1.0\r\n\r\n\r\n" +
		"pub\tkeep.lower 0\r\n\r\n" +
		"PUB deny.c 0\r\n\r\n" +
		"HPUB keep _INBOX.x 12 14\r\nNATS/1.0\r\n\r\nhi\r\n" +
		"UNSUB 1\r\nPONG\r\n"
	if len(in) != len(kept)+len(dropped) {
		t.Fatalf("the test's input is not its kept and dropped frames: %d != %d+%d", len(in), len(kept), len(dropped))
	}
	for _, chunk := range []int{1, 2, 3, 7, len(in)} {
		var asked []string
		f := &pubFilter{drop: func(subject string) bool {
			asked = append(asked, subject)
			return strings.HasPrefix(subject, "deny")
		}}
		var out []byte
		for p := []byte(in); len(p) > 0; {
			n := min(chunk, len(p))
			out = append(out, f.filter(p[:n])...)
			p = p[n:]
		}
		if string(out) != kept {
			t.Fatalf("in reads of %d bytes: forwarded\n%q\nwant\n%q", chunk, out, kept)
		}
		if want := []string{"deny.a", "keep", "deny.b", "keep.lower", "deny.c", "keep"}; strings.Join(asked, " ") != strings.Join(want, " ") {
			t.Fatalf("in reads of %d bytes: asked about %q, want %q", chunk, asked, want)
		}
	}
}

// A line longer than any the server takes is no protocol the filter
// knows: from there on everything passes, for the server to refuse.
func TestPubFilterPassesWhatItCannotRead(t *testing.T) {
	f := &pubFilter{drop: func(string) bool { return true }}
	long := bytes.Repeat([]byte("x"), maxPubLine+1)
	var out []byte
	out = append(out, f.filter([]byte("PUB deny 1\r\nx\r\n"))...)
	out = append(out, f.filter(long)...)
	out = append(out, f.filter([]byte("\r\nPUB deny 1\r\nx\r\n"))...)
	if want := string(long) + "\r\nPUB deny 1\r\nx\r\n"; string(out) != want {
		t.Fatalf("forwarded %d bytes, want %d: the long line and everything after it", len(out), len(want))
	}
}

// Fail and Heal, again and again, under reads the server answers by direct
// get: the race detector finds nothing (a fault made by reloading the
// server's options raced with the server's own unlocked read of them on
// this path, inside nats-server, and failed whole test binaries).
func TestBucketFaultFlipsUnderReads(t *testing.T) {
	f := StartBucketFault(t)
	_, probeFailed, probeOther := kvs(t, f.ProbeURL)
	_, _, other := kvs(t, f.URL)
	for _, kv := range []natsjs.KeyValue{probeFailed, probeOther} {
		if err := put(kv, "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 3)
	for _, kv := range []natsjs.KeyValue{probeFailed, probeOther, other} {
		go func() {
			for ctx.Err() == nil {
				if v, err := get(kv, "k"); err != nil || v != "v" {
					done <- fmt.Errorf("get %s: %q %w", kv.Bucket(), v, err)
					return
				}
			}
			done <- nil
		}()
	}
	for range 20 {
		f.Fail(t, "FAILED")
		time.Sleep(20 * time.Millisecond) // reads in between: the point is their interleaving with the flips
		f.Heal(t)
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
