package dataplane

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

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

var (
	spoolBucket   = []byte("tasks")
	corruptBucket = []byte("corrupt") // entries that no longer decode, kept for an operator
)

// SpoolEntry is one received task waiting for JetStream.
type SpoolEntry struct {
	Bot          string    `json:"bot"`
	Conversation string    `json:"conversation"`
	MsgID        string    `json:"msgid"`
	Payload      []byte    `json:"payload"`
	Received     time.Time `json:"received"`
}

// Spool is a durable, ordered queue of SpoolEntry in a bbolt file. It is
// safe for concurrent use: Append may run while Drain does.
type Spool struct {
	db      *bolt.DB
	drainMu sync.Mutex // one Drain at a time, or two would publish the same entry

	mu    sync.Mutex
	convs map[string]int // "<bot>\x00<conversation>" → entries spooled
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

// OpenSpool opens (creating if needed) the spool file at path. A file held
// by another process is refused after a few seconds, not waited for.
func OpenSpool(path string) (*Spool, error) {
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
	s := &Spool{db: db, convs: map[string]int{}}
	// Entries left by a previous run hold their conversations too.
	err = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(spoolBucket).ForEach(func(_, v []byte) error {
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
// disk (the bbolt commit fsyncs) and will survive a crash.
func (s *Spool) Append(e SpoolEntry) error {
	if e.MsgID == "" {
		return fmt.Errorf("spool task of bot %s conversation %s: empty msgid: it could not be forwarded idempotently", e.Bot, e.Conversation)
	}
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("spool task %s: %w", e.MsgID, err)
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
		return fmt.Errorf("spool task %s: %w", e.MsgID, err)
	}
	s.held(e, 1)
	return nil
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
		key, e, ok, err := s.first()
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
		n++
	}
}

// first returns the oldest entry. An entry that does not decode is moved
// to the corrupt bucket (where an operator can read it) rather than
// blocking every entry behind it.
func (s *Spool) first() (key []byte, e SpoolEntry, ok bool, err error) {
	for {
		var bad bool
		err = s.db.View(func(tx *bolt.Tx) error {
			k, v := tx.Bucket(spoolBucket).Cursor().First()
			if k == nil {
				return nil
			}
			key, ok = append([]byte(nil), k...), true
			if json.Unmarshal(v, &e) != nil {
				bad = true
			}
			return nil
		})
		if err != nil {
			return nil, SpoolEntry{}, false, fmt.Errorf("drain spool: read: %w", err)
		}
		if !bad {
			return key, e, ok, nil
		}
		err = s.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(spoolBucket)
			if err := tx.Bucket(corruptBucket).Put(key, b.Get(key)); err != nil {
				return err
			}
			return b.Delete(key)
		})
		if err != nil {
			return nil, SpoolEntry{}, false, fmt.Errorf("drain spool: set aside undecodable entry %d: %w", binary.BigEndian.Uint64(key), err)
		}
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
