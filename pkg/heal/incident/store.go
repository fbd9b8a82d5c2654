package incident

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/schema"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// ErrNotFound: no incident has that id.
var ErrNotFound = errors.New("incident not found")

// ErrOpen is returned by Store.Open when the bot has an open incident
// already: the caller adds to that one (it is returned with the error).
var ErrOpen = errors.New("bot has an open incident")

// Store reads and writes incidents in their KV bucket.
type Store struct {
	kv natsjs.KeyValue
}

// NewStore uses kv (jetstream.Store.Incidents).
func NewStore(kv natsjs.KeyValue) *Store { return &Store{kv: kv} }

// KV is the bucket, for watchers (keys: KeyPrefix + bot + "." + id).
func (s *Store) KV() natsjs.KeyValue { return s.kv }

// KeyPrefix starts every incident's key; WatchFilter matches them all.
const (
	KeyPrefix   = "inc."
	WatchFilter = "inc.>"
	openPrefix  = "open."
)

// Key is the KV key of the incident id of bot.
func Key(bot, id string) string {
	return KeyPrefix + jetstream.EncodeToken(bot) + "." + jetstream.EncodeToken(id)
}

// openKey points at bot's open incident of kind: a bot has at most one
// open outage and one open data incident (a delivery lost during an outage
// is a problem of its own, closed by a person).
func openKey(bot string, kind Kind) string {
	switch kind {
	case Data:
		return openPrefix + "data." + jetstream.EncodeToken(bot)
	case AI:
		return openPrefix + "ai." + jetstream.EncodeToken(bot)
	}
	return openPrefix + jetstream.EncodeToken(bot)
}

// NewID names an incident of bot detected at t: sortable by time, and
// readable in `botctl incidents list`.
func NewID(bot string, t time.Time) string {
	return t.UTC().Format("20060102-150405.000") + "-" + bot
}

// Open records inc as bot's open incident of its kind. If the bot has one
// open already, Open writes nothing and returns that one with ErrOpen.
// inc.ID, State, Kind and Detected are filled in if empty.
func (s *Store) Open(ctx context.Context, inc Incident) (*Incident, error) {
	if inc.Bot == "" {
		return nil, errors.New("incident without a bot")
	}
	if inc.Kind == "" {
		inc.Kind = Outage
	}
	if cur, err := s.OpenFor(ctx, inc.Bot, inc.Kind); err != nil {
		return nil, err
	} else if cur != nil {
		return cur, ErrOpen
	}
	if inc.Detected.IsZero() {
		inc.Detected = time.Now().UTC()
	}
	if inc.ID == "" {
		inc.ID = NewID(inc.Bot, inc.Detected)
		if inc.Kind == Data || inc.Kind == AI {
			// An outage and a data or AI incident of one bot may be
			// detected in the same millisecond: their ids must differ.
			inc.ID += "-" + string(inc.Kind)
		}
	}
	if inc.State == "" {
		inc.State = Open
	}
	raw, err := schema.Marshal(inc)
	if err != nil {
		return nil, err
	}
	// The incident first, then the pointer: a pointer never names an
	// incident that was not written. Losing the pointer race withdraws
	// the incident just written.
	rev, err := s.kv.Create(ctx, Key(inc.Bot, inc.ID), raw)
	if err != nil {
		return nil, fmt.Errorf("record incident of bot %s: %w", inc.Bot, err)
	}
	if _, err := s.kv.Create(ctx, openKey(inc.Bot, inc.Kind), []byte(inc.ID)); err != nil {
		s.kv.Delete(ctx, Key(inc.Bot, inc.ID), natsjs.LastRevision(rev))
		if jetstream.LostCAS(err) {
			cur, gerr := s.OpenFor(ctx, inc.Bot, inc.Kind)
			if gerr == nil && cur != nil {
				return cur, ErrOpen
			}
		}
		return nil, fmt.Errorf("mark incident of bot %s open: %w", inc.Bot, err)
	}
	inc.Rev = rev
	return &inc, nil
}

// claimPrefix starts the keys of Claim.
const claimPrefix = "claim."

func claimKey(bot, what string) string {
	return claimPrefix + jetstream.EncodeToken(bot) + "." + jetstream.EncodeToken(what)
}

// Claim records, once for the whole cluster, that bot's incidents have
// heard of what (a name of the caller's, such as "corrupt_record/<task>"):
// first is true for the one call that recorded it, false for every later
// one, on any node. Claims expire with the bucket's incidents
// (jetstream.IncidentTTL). A caller whose incident was not written after
// all gives its claim back (Release), so that a later call tries again.
func (s *Store) Claim(ctx context.Context, bot, what string) (first bool, err error) {
	_, err = s.kv.Create(ctx, claimKey(bot, what), []byte(time.Now().UTC().Format(time.RFC3339Nano)))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, natsjs.ErrKeyExists):
		return false, nil
	}
	return false, fmt.Errorf("claim %s of bot %s: %w", what, bot, err)
}

// Release gives back a Claim.
func (s *Store) Release(ctx context.Context, bot, what string) error {
	if err := s.kv.Delete(ctx, claimKey(bot, what)); err != nil {
		return fmt.Errorf("release %s of bot %s: %w", what, bot, err)
	}
	return nil
}

// OpenFor returns bot's open incident of kind, or nil if it has none. A
// pointer left behind by a close that stopped half-way is cleaned up.
func (s *Store) OpenFor(ctx context.Context, bot string, kind Kind) (*Incident, error) {
	e, err := s.kv.Get(ctx, openKey(bot, kind))
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read open incident of bot %s: %w", bot, err)
	}
	inc, err := s.Get(ctx, bot, string(e.Value()))
	if errors.Is(err, ErrNotFound) || (err == nil && inc.State == Closed) {
		s.kv.Delete(ctx, openKey(bot, kind), natsjs.LastRevision(e.Revision()))
		return nil, nil
	}
	return inc, err
}

// Get returns the incident id of bot.
func (s *Store) Get(ctx context.Context, bot, id string) (*Incident, error) {
	e, err := s.kv.Get(ctx, Key(bot, id))
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("read incident %s: %w", id, err)
	}
	return Decode(e)
}

// Find returns the incident id of any bot (ids name their bot, but bot ids
// may contain "-": look it up by key suffix).
func (s *Store) Find(ctx context.Context, id string) (*Incident, error) {
	keys, err := s.keys(ctx, WatchFilter)
	if err != nil {
		return nil, err
	}
	suffix := "." + jetstream.EncodeToken(id)
	for _, k := range keys {
		if strings.HasSuffix(k, suffix) {
			e, err := s.kv.Get(ctx, k)
			if err != nil {
				return nil, fmt.Errorf("read incident %s: %w", id, err)
			}
			return Decode(e)
		}
	}
	return nil, fmt.Errorf("%w: %s (see `botctl incidents list`)", ErrNotFound, id)
}

// Decode reads an incident from its KV entry.
func Decode(e natsjs.KeyValueEntry) (*Incident, error) {
	var inc Incident
	if err := json.Unmarshal(e.Value(), &inc); err != nil {
		return nil, fmt.Errorf("incident %s unreadable: %w", e.Key(), err)
	}
	inc.Rev = e.Revision()
	return &inc, nil
}

// Update applies fn to the incident id of bot and writes it back with a
// compare-and-set, re-reading and re-applying fn when another writer came
// first. fn returning an error leaves the incident as it was. Closing an
// incident (fn sets State to Closed) also removes the bot's open pointer.
func (s *Store) Update(ctx context.Context, bot, id string, fn func(*Incident) error) (*Incident, error) {
	for n := 0; ; n++ {
		jetstream.CASPause(ctx, n)
		cur, err := s.Get(ctx, bot, id)
		if err != nil {
			return nil, err
		}
		wasClosed := cur.State == Closed
		if err := fn(cur); err != nil {
			return cur, err
		}
		raw, err := schema.Marshal(cur)
		if err != nil {
			return nil, err
		}
		rev, err := s.kv.Update(ctx, Key(bot, id), raw, cur.Rev)
		if jetstream.LostCAS(err) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("update incident %s: %w", id, err)
		}
		cur.Rev = rev
		if cur.State == Closed && !wasClosed {
			if e, err := s.kv.Get(ctx, openKey(bot, cur.Kind)); err == nil && string(e.Value()) == id {
				s.kv.Delete(ctx, openKey(bot, cur.Kind), natsjs.LastRevision(e.Revision()))
			}
		}
		return cur, nil
	}
}

// Filter selects incidents for List. Zero fields select everything.
type Filter struct {
	Bot   string
	Since time.Time // detected at or after
	Open  bool      // only incidents not closed
}

// List returns the incidents that match f, oldest first.
func (s *Store) List(ctx context.Context, f Filter) ([]Incident, error) {
	filter := WatchFilter
	if f.Bot != "" {
		filter = KeyPrefix + jetstream.EncodeToken(f.Bot) + ".*"
	}
	keys, err := s.keys(ctx, filter)
	if err != nil {
		return nil, err
	}
	var out []Incident
	for _, k := range keys {
		e, err := s.kv.Get(ctx, k)
		if errors.Is(err, natsjs.ErrKeyNotFound) {
			continue // expired meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("read incident %s: %w", k, err)
		}
		inc, err := Decode(e)
		if err != nil {
			return nil, err
		}
		if !f.Since.IsZero() && inc.Detected.Before(f.Since) {
			continue
		}
		if f.Open && inc.State == Closed {
			continue
		}
		out = append(out, *inc)
	}
	slices.SortFunc(out, func(a, b Incident) int { return a.Detected.Compare(b.Detected) })
	return out, nil
}

func (s *Store) keys(ctx context.Context, filter string) ([]string, error) {
	lister, err := s.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("list incidents: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	return keys, nil
}

// Ack records that a person has seen incident id and acts on it: it is the
// first action if nothing acted yet, the recovery method becomes human, and
// a data incident (which only a person can close) is closed. AckedBy and
// AckedAt name the latest ack: a bot held after rejected credentials is
// retried once per ack ("I fixed the secret, try again").
func (s *Store) Ack(ctx context.Context, id, who, note string) (*Incident, error) {
	inc, err := s.Find(ctx, id)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	return s.Update(ctx, inc.Bot, inc.ID, func(i *Incident) error {
		i.AckedBy, i.AckedAt = who, now
		if i.FirstAck.IsZero() {
			i.FirstAck = now
		}
		i.Acted(now, "human: "+who)
		if note != "" {
			i.Note(now, "", "acknowledged by %s: %s", who, note)
		} else {
			i.Note(now, "", "acknowledged by %s", who)
		}
		if i.Kind == Data && i.State != Closed {
			i.Close(now)
		}
		return nil
	})
}
