package jetstream

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/botctl/botctl/internal/testwait"
)

// The spool holds at most its bounds: past the most entries, or the most
// bytes, Append refuses with ErrSpoolFull naming the key, and keeps
// nothing; entries left by a previous run count after a reopen; a drain
// makes room again.
func TestSpoolBounded(t *testing.T) {
	leakCheck(t)
	path := filepath.Join(t.TempDir(), "spool.db")
	sp, err := OpenSpool(path, SpoolMaxEntries(3))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := sp.Append(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	err = sp.Append(entry(3))
	if !errors.Is(err, ErrSpoolFull) || !strings.Contains(err.Error(), "spool.max_entries") {
		t.Fatalf("Append past 3 entries = %v, want ErrSpoolFull naming spool.max_entries", err)
	}
	if n := spoolLen(t, sp); n != 3 || sp.Holds("bot", "user003") {
		t.Fatalf("refused entry kept: %d entries, held %v", n, sp.Holds("bot", "user003"))
	}
	sp.Close()

	sp = openSpool(t, path) // reopened with a byte bound instead
	sp.maxEntries, sp.maxBytes = 100, 0
	if err := sp.Append(entry(3)); !errors.Is(err, ErrSpoolFull) || !strings.Contains(err.Error(), "spool.max_bytes") {
		t.Fatalf("Append past the bytes = %v, want ErrSpoolFull naming spool.max_bytes", err)
	}
	sp.Close()
	sp, err = OpenSpool(path, SpoolMaxEntries(3))
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if err := sp.Append(entry(3)); !errors.Is(err, ErrSpoolFull) {
		t.Fatalf("reopened over 3 entries, Append = %v, want ErrSpoolFull", err)
	}
	if n, err := sp.Drain(context.Background(), func(context.Context, SpoolEntry) error { return nil }); err != nil || n != 3 {
		t.Fatalf("Drain = %d, %v", n, err)
	}
	for i := 3; i < 6; i++ {
		if err := sp.Append(entry(i)); err != nil {
			t.Fatalf("after the drain, Append %d = %v", i, err)
		}
	}

	// Concurrent Appends never pass the bound together.
	sp2 := openSpool(t, filepath.Join(t.TempDir(), "spool.db"))
	sp2.maxEntries = 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	kept := 0
	for i := range 20 {
		wg.Go(func() {
			if sp2.Append(entry(i)) == nil {
				mu.Lock()
				kept++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n := spoolLen(t, sp2); kept != 5 || n != 5 {
		t.Fatalf("20 concurrent Appends at a bound of 5: %d kept, %d in the spool", kept, n)
	}
}

// The byte bound counts what is stored: one large entry fills it.
func TestSpoolBoundedByBytes(t *testing.T) {
	leakCheck(t)
	sp, err := OpenSpool(filepath.Join(t.TempDir(), "spool.db"), SpoolMaxBytes(10_000))
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	big := entry(0)
	big.Payload = make([]byte, 6000) // 8,000 bytes in base64
	if err := sp.Append(big); err != nil {
		t.Fatal(err)
	}
	small := entry(1)
	small.Payload = make([]byte, 1500)
	if err := sp.Append(small); !errors.Is(err, ErrSpoolFull) {
		t.Fatalf("Append past 10,000 bytes = %v, want ErrSpoolFull", err)
	}
	if err := sp.Append(entry(2)); err != nil {
		t.Fatalf("a small entry that fits: %v", err)
	}
}

// The forwarder hands an entry that waited past the expiry to Expired,
// not to Publish; one that waited past LateAfter goes to Publish marked
// Late; a fresh one goes to Publish unmarked. Each is deleted once its
// handler returned nil; an Expired that fails keeps the entry.
func TestForwarderExpiresAndMarksLate(t *testing.T) {
	leakCheck(t)
	sp := openSpool(t, filepath.Join(t.TempDir(), "spool.db"))
	now := time.Now()
	for i, waited := range []time.Duration{3 * time.Hour, 10 * time.Minute, 0, 2 * time.Hour} {
		e := entry(i)
		if waited > 0 {
			e.Spooled = now.Add(-waited)
		}
		if err := sp.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var got []string
	failExpired := true
	note := func(s string) { mu.Lock(); got = append(got, s); mu.Unlock() }
	expired := PublishFunc(func(_ context.Context, e SpoolEntry) error {
		mu.Lock()
		fail := failExpired
		mu.Unlock()
		if fail {
			return errors.New("JetStream away")
		}
		note(e.MsgID + ":expired")
		return nil
	})
	publish := PublishFunc(func(_ context.Context, e SpoolEntry) error {
		note(fmt.Sprintf("%s:late=%v", e.MsgID, e.Late))
		return nil
	})
	if _, err := NewForwarder(ForwarderConfig{Spool: sp, Publish: publish, Expiry: time.Hour}); err == nil {
		t.Fatal("an Expiry without Expired accepted")
	}
	if _, err := NewForwarder(ForwarderConfig{Spool: sp, Publish: publish, Expired: expired, Expiry: time.Hour, LateAfter: time.Hour}); err == nil {
		t.Fatal("LateAfter not below Expiry accepted")
	}
	fw, err := NewForwarder(ForwarderConfig{Spool: sp, Publish: publish, Expired: expired, Expiry: time.Hour, LateAfter: 5 * time.Minute,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	// The expired handler fails at first: the first entry stays, first.
	n, err := sp.Drain(context.Background(), fw.publish)
	if err == nil || n != 0 || spoolLen(t, sp) != 4 {
		t.Fatalf("Drain with Expired failing = %d, %v, %d left; want 0 and every entry kept", n, err, spoolLen(t, sp))
	}
	mu.Lock()
	failExpired = false
	mu.Unlock()
	runForwarder(t, fw)
	testwait.Eventually(t, 30*time.Second, "spool drained", func() bool { return spoolLen(t, sp) == 0 })
	mu.Lock()
	defer mu.Unlock()
	if want := "[m000:expired m001:late=true m002:late=false m003:expired]"; fmt.Sprint(got) != want {
		t.Fatalf("handled %v, want %v", got, want)
	}
}
