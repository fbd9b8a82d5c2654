package jetstream

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/schema"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// The spool is a node's store-and-forward queue for tasks received while
// JetStream cannot take them, so that nothing a user sent is lost. It is
// a bbolt file on the node's disk: one writer process, entries in arrival
// order, each Append durable (fsynced) before it returns.
//
// Ordering: a conversation with a task in the spool is busy (Holds), as
// if its task were in the queue: a later message of it is refused like
// any message to a busy conversation, so it can never overtake the
// spooled one. Other conversations are not held up by the spool.
//
// Bounds: the spool holds at most so many entries and so many bytes
// (SpoolMaxEntries, SpoolMaxBytes); past either, Append refuses with
// ErrSpoolFull, and the task is the caller's to refuse (the user is told
// to try again later) rather than the node's disk's to fill. How long an
// entry may wait is the Forwarder's to enforce (ForwarderConfig.Expiry),
// when JetStream is back: only then can its user be told.

var (
	spoolBucket   = []byte("tasks")
	corruptBucket = []byte("corrupt") // entries that no longer decode, kept for an operator
)

// KindSpoolEntry names a spool entry in a schema.NewerError.
const KindSpoolEntry = "spool entry"

// SpoolEntry is one received task waiting for JetStream.
type SpoolEntry struct {
	Bot          string    `json:"bot"`
	Conversation string    `json:"conversation"`
	MsgID        string    `json:"msgid"`
	Payload      []byte    `json:"payload"`
	Received     time.Time `json:"received"`
	// Spooled is when Append took the entry (set by Append unless given);
	// what the Forwarder's expiry and lateness count from.
	Spooled time.Time `json:"spooled,omitzero"`
	// Late is set by the Forwarder on an entry it forwards after it
	// waited longer than ForwarderConfig.LateAfter: its user should be
	// told the answer is late. Not stored.
	Late bool `json:"-"`
}

// Waited is how long e has waited in the spool at now (since Received
// for an entry spooled before Spooled was kept).
func (e SpoolEntry) Waited(now time.Time) time.Duration {
	since := e.Spooled
	if since.IsZero() {
		since = e.Received
	}
	return now.Sub(since)
}

// Defaults of the spool's bounds (SpoolMaxEntries, SpoolMaxBytes):
// about an hour of 3 messages a second, far more than one node's users
// send while JetStream is away, on 64 MiB of the node's disk.
const (
	DefaultSpoolMaxEntries = 10000
	DefaultSpoolMaxBytes   = 64 << 20
)

// ErrSpoolFull: Append refused an entry because the spool holds its most
// entries or bytes already. The task was not kept.
var ErrSpoolFull = errors.New("spool full")

// A SpoolOption sets a bound of OpenSpool's spool.
type SpoolOption func(*Spool)

// SpoolMaxEntries bounds the entries waiting (default
// DefaultSpoolMaxEntries; n <= 0 keeps it).
func SpoolMaxEntries(n int) SpoolOption {
	return func(s *Spool) {
		if n > 0 {
			s.maxEntries = n
		}
	}
}

// SpoolMaxBytes bounds the bytes of the entries waiting, as stored
// (default DefaultSpoolMaxBytes; n <= 0 keeps it).
func SpoolMaxBytes(n int64) SpoolOption {
	return func(s *Spool) {
		if n > 0 {
			s.maxBytes = n
		}
	}
}

// Spool is a durable, ordered queue of SpoolEntry in a bbolt file. It is
// safe for concurrent use: Append may run while Drain does.
type Spool struct {
	db      *bolt.DB
	drainMu sync.Mutex // one Drain at a time, or two would publish the same entry

	maxEntries int
	maxBytes   int64

	mu      sync.Mutex
	convs   map[string]int // "<bot>\x00<conversation>" → entries spooled
	entries int            // entries waiting, and reserved by an Append under way
	bytes   int64          // their stored bytes
}

func convKey(bot, conversation string) string { return bot + "\x00" + conversation }

func (s *Spool) held(e SpoolEntry, delta int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := convKey(e.Bot, e.Conversation)
	if s.convs[k] += delta; s.convs[k] <= 0 {
		delete(s.convs, k)
	}
}

// Holds reports whether the spool has a task of the conversation: it is
// busy until that task is forwarded.
func (s *Spool) Holds(bot, conversation string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.convs[convKey(bot, conversation)] > 0
}

// OpenSpool opens (creating if needed) the spool file at path, bounded by
// opts. A file held by another process is refused after a few seconds, not
// waited for. Entries left by a previous run count towards the bounds
// (a spool reopened over them refuses new entries until it drains).
func OpenSpool(path string, opts ...SpoolOption) (*Spool, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("open spool %s: in use by another process (is another botctl running on this data dir?)", path)
		}
		return nil, fmt.Errorf("open spool %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(spoolBucket); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(corruptBucket)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open spool %s: %w", path, err)
	}
	s := &Spool{db: db, convs: map[string]int{}, maxEntries: DefaultSpoolMaxEntries, maxBytes: DefaultSpoolMaxBytes}
	for _, o := range opts {
		o(s)
	}
	// Entries left by a previous run hold their conversations too.
	err = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(spoolBucket).ForEach(func(_, v []byte) error {
			s.entries++
			s.bytes += int64(len(v))
			var e SpoolEntry
			if json.Unmarshal(v, &e) == nil {
				s.held(e, 1)
			}
			return nil
		})
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open spool %s: %w", path, err)
	}
	return s, nil
}

// Close closes the spool file. Entries stay for the next OpenSpool.
func (s *Spool) Close() error { return s.db.Close() }

// Append adds e at the end of the spool. When Append returns nil, e is on
// disk (the bbolt commit fsyncs) and will survive a crash. A spool at one
// of its bounds refuses e with ErrSpoolFull.
func (s *Spool) Append(e SpoolEntry) error {
	if e.MsgID == "" {
		return fmt.Errorf("spool task of bot %s conversation %s: empty msgid: it could not be forwarded idempotently", e.Bot, e.Conversation)
	}
	if e.Spooled.IsZero() {
		e.Spooled = time.Now().UTC()
	}
	data, err := schema.Marshal(e)
	if err != nil {
		return fmt.Errorf("spool task %s: %w", e.MsgID, err)
	}
	if err := s.reserve(len(data)); err != nil {
		return fmt.Errorf("spool task %s of bot %s: %w", e.MsgID, e.Bot, err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(spoolBucket)
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		return b.Put(seqKey(seq), data)
	})
	if err != nil {
		s.release(len(data))
		return fmt.Errorf("spool task %s: %w", e.MsgID, err)
	}
	s.held(e, 1)
	return nil
}

// reserve counts an entry of n bytes towards the bounds, or refuses it.
func (s *Spool) reserve(n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.entries >= s.maxEntries:
		return fmt.Errorf("%w: %d entries wait for JetStream, the most it keeps (spool.max_entries)", ErrSpoolFull, s.entries)
	case s.bytes+int64(n) > s.maxBytes:
		return fmt.Errorf("%w: %d bytes wait for JetStream, and %d more would pass the most it keeps, %d (spool.max_bytes)", ErrSpoolFull, s.bytes, n, s.maxBytes)
	}
	s.entries++
	s.bytes += int64(n)
	return nil
}

// release takes an entry of n bytes off the bounds' count.
func (s *Spool) release(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries--
	s.bytes -= int64(n)
}

// Len is the number of entries waiting.
func (s *Spool) Len() (int, error) {
	var n int
	err := s.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(spoolBucket).Stats().KeyN
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("spool length: %w", err)
	}
	return n, nil
}

// Publisher forwards spooled entries. Publish's result is the spool's
// contract: nil means "done with this entry" — it was queued, or
// JetStream answered for it for good (a duplicate, a busy conversation, a
// rejection) — and the entry is deleted; an error means "not now": the
// entry stays first in the spool and the drain stops, to be retried later.
// Store.SpoolPublisher is the Publisher for the task stream.
type Publisher interface {
	Publish(ctx context.Context, e SpoolEntry) error
}

// PublishFunc is a Publisher as a function.
type PublishFunc func(ctx context.Context, e SpoolEntry) error

// Publish calls f.
func (f PublishFunc) Publish(ctx context.Context, e SpoolEntry) error { return f(ctx, e) }

// Drain forwards entries in spool order with publish, deleting each only
// after publish returned nil, until the spool is empty (nil), publish fails
// (its error, wrapped) or ctx ends (ctx's error). It returns how many
// entries it forwarded. Entries appended during a Drain are drained too.
//
// A crash between publish and the delete forwards that entry again on the
// next Drain; with the msgid as message id, JetStream reports it as a
// duplicate instead of queueing it twice.
func (s *Spool) Drain(ctx context.Context, publish PublishFunc) (int, error) {
	s.drainMu.Lock()
	defer s.drainMu.Unlock()
	n := 0
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		key, size, e, ok, err := s.first()
		if err != nil {
			return n, err
		}
		if !ok {
			return n, nil
		}
		if err := publish(ctx, e); err != nil {
			return n, fmt.Errorf("drain spool: task %s of bot %s conversation %s: %w", e.MsgID, e.Bot, e.Conversation, err)
		}
		if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(spoolBucket).Delete(key) }); err != nil {
			return n, fmt.Errorf("drain spool: delete forwarded task %s: %w", e.MsgID, err)
		}
		s.held(e, -1)
		s.release(size)
		n++
	}
}

// first returns the oldest entry. An entry that does not decode is moved
// to the corrupt bucket (where an operator can read it) rather than
// blocking every entry behind it. An entry a newer botctl wrote (the
// spool of a node rolled back) is an error wrapping schema.ErrNewer: it
// and every entry behind it stay, in their order, for that version.
func (s *Spool) first() (key []byte, size int, e SpoolEntry, ok bool, err error) {
	for {
		var bad bool
		err = s.db.View(func(tx *bolt.Tx) error {
			k, v := tx.Bucket(spoolBucket).Cursor().First()
			if k == nil {
				return nil
			}
			key, size, ok = append([]byte(nil), k...), len(v), true
			if err := schema.Check(KindSpoolEntry, v); err != nil {
				return fmt.Errorf("entry %d not forwarded: %w", binary.BigEndian.Uint64(k), err)
			}
			if json.Unmarshal(v, &e) != nil {
				bad = true
			}
			return nil
		})
		if err != nil {
			return nil, 0, SpoolEntry{}, false, fmt.Errorf("drain spool: read: %w", err)
		}
		if !bad {
			return key, size, e, ok, nil
		}
		err = s.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(spoolBucket)
			if err := tx.Bucket(corruptBucket).Put(key, b.Get(key)); err != nil {
				return err
			}
			return b.Delete(key)
		})
		if err != nil {
			return nil, 0, SpoolEntry{}, false, fmt.Errorf("drain spool: set aside undecodable entry %d: %w", binary.BigEndian.Uint64(key), err)
		}
		s.release(size) // set aside, it waits no more
		e, ok = SpoolEntry{}, false
	}
}

func seqKey(seq uint64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, seq)
	return k
}

// SpoolPublisher is the Publisher that forwards spooled entries to the
// task stream with PublishTask. An entry is done once JetStream answered
// for it: queued, a duplicate, ErrConversationBusy or ErrTaskRejected.
// report, if not nil, is called with each such answer before the entry is
// deleted; the leader uses it to record the task or tell the user the
// conversation is busy. After a crash report may see an entry twice (the
// second time as a duplicate). Any other error (ErrUnavailable, the
// drain's context ending) keeps the entry.
func (s *Store) SpoolPublisher(report func(e SpoolEntry, res PublishResult, err error)) PublishFunc {
	return func(ctx context.Context, e SpoolEntry) error {
		res, err := s.PublishTask(ctx, e.Bot, e.Conversation, e.MsgID, e.Payload)
		if err != nil && !errors.Is(err, ErrConversationBusy) && !errors.Is(err, ErrTaskRejected) {
			return err
		}
		if report != nil {
			report(e, res, err)
		}
		return nil
	}
}
