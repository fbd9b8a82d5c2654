package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/botctl/botctl/pkg/wecom"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// State is a bot's health.
type State string

const (
	// Online: the leader's connection is up and its signals are fine.
	Online State = "online"
	// Degraded: connected, but a signal looks wrong (frames failing,
	// silence beyond the baseline) and is being checked.
	Degraded State = "degraded"
	// Offline: no node holds a working connection.
	Offline State = "offline"
	// HalfOpen: back after an outage longer than the threshold: low-risk
	// actions first, then an observation window, then online.
	HalfOpen State = "half_open"
	// NeedsHuman: only a person can fix it (credentials rejected).
	NeedsHuman State = "needs_human"
)

// Record is the one health record of a bot, shared by every node: the
// three signals write it, and read it to cross-check each other.
type Record struct {
	Bot    string    `json:"bot"`
	State  State     `json:"state"`
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"` // in State since

	Node    string `json:"node,omitempty"` // the node holding the connection (or that last did)
	TermRev int64  `json:"term,omitempty"`
	// Handover: the last holder stopped on purpose (a deploy) and said so;
	// the next leader's takeover is not an incident.
	Handover bool `json:"handover,omitempty"`

	LastInbound    time.Time `json:"last_inbound,omitzero"`     // a callback arrived
	LastOutboundOK time.Time `json:"last_outbound_ok,omitzero"` // a frame was acked errcode 0
	LastProbeOK    time.Time `json:"last_probe_ok,omitzero"`    // a heartbeat or probe was acked
	LastFailure    string    `json:"last_failure,omitempty"`    // the latest outbound failure or failed probe

	// Incident is the bot's open incident, if any.
	Incident string `json:"incident,omitempty"`
	// BaselineNote records the latest silence alarm refuted by another
	// signal: a baseline problem, not an incident.
	BaselineNote string `json:"baseline_note,omitempty"`

	Updated time.Time `json:"updated"`
	Rev     uint64    `json:"-"`
}

// LastEvidence is the latest moment the bot was known to be fine.
func (r *Record) LastEvidence() time.Time {
	t := r.LastInbound
	for _, u := range []time.Time{r.LastOutboundOK, r.LastProbeOK} {
		if u.After(t) {
			t = u
		}
	}
	return t
}

func recordKey(bot string) string   { return "bot." + jetstream.EncodeToken(bot) }
func baselineKey(bot string) string { return "baseline." + jetstream.EncodeToken(bot) }

// Load reads bot's health record from kv (jetstream.Store.Health); a bot
// never seen has a zero record (State "").
func Load(ctx context.Context, kv natsjs.KeyValue, bot string) (Record, error) {
	e, err := kv.Get(ctx, recordKey(bot))
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return Record{Bot: bot}, nil
	}
	if err != nil {
		return Record{}, fmt.Errorf("read health of bot %s: %w", bot, err)
	}
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return Record{}, fmt.Errorf("health of bot %s unreadable: %w", bot, err)
	}
	r.Rev = e.Revision()
	return r, nil
}

// LoadAll reads every bot's health record.
func LoadAll(ctx context.Context, kv natsjs.KeyValue) (map[string]Record, error) {
	lister, err := kv.ListKeysFiltered(ctx, "bot.*")
	if err != nil {
		return nil, fmt.Errorf("list health records: %w", err)
	}
	out := map[string]Record{}
	for k := range lister.Keys() {
		bot, err := jetstream.DecodeToken(k[len("bot."):])
		if err != nil {
			continue
		}
		r, err := Load(ctx, kv, bot)
		if err != nil {
			return nil, err
		}
		out[bot] = r
	}
	return out, nil
}

// update applies fn to bot's record with a compare-and-set (re-read and
// re-applied when another node wrote first). fn returning false writes
// nothing.
func update(ctx context.Context, kv natsjs.KeyValue, bot string, now time.Time, fn func(*Record) bool) (Record, error) {
	for n := 0; ; n++ {
		jetstream.CASPause(ctx, n)
		r, err := Load(ctx, kv, bot)
		if err != nil {
			return r, err
		}
		prev := r.State
		if !fn(&r) {
			return r, nil
		}
		if r.State != prev || r.Since.IsZero() {
			r.Since = now
		}
		r.Bot, r.Updated = bot, now
		raw, err := schema.Marshal(r)
		if err != nil {
			return r, err
		}
		var rev uint64
		if r.Rev == 0 {
			rev, err = kv.Create(ctx, recordKey(bot), raw)
		} else {
			rev, err = kv.Update(ctx, recordKey(bot), raw, r.Rev)
		}
		if jetstream.LostCAS(err) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return r, fmt.Errorf("write health of bot %s: %w", bot, err)
		}
		r.Rev = rev
		return r, nil
	}
}

// stamp copies a connection's vitals into the record.
func stamp(r *Record, v wecom.Vitals) {
	if v.LastCallback.After(r.LastInbound) {
		r.LastInbound = v.LastCallback.UTC()
	}
	if v.LastAckOK.After(r.LastOutboundOK) {
		r.LastOutboundOK = v.LastAckOK.UTC()
	}
	if v.LastPingAck.After(r.LastProbeOK) {
		r.LastProbeOK = v.LastPingAck.UTC()
	}
}

// setRecord writes bot's record (logged, not returned, on failure).
func (h *Health) setRecord(ctx context.Context, bd *binding, bot string, now time.Time, fn func(*Record)) {
	if _, err := update(ctx, bd.kv, bot, now, func(r *Record) bool { fn(r); return true }); err != nil && ctx.Err() == nil {
		h.log.Warn().Err(err).Str("bot", bot).Msg("health record not written")
	}
}

// Record returns bot's health record (for status).
func (h *Health) Record(ctx context.Context, bot string) (Record, error) {
	bd := h.binding()
	if bd == nil {
		return Record{Bot: bot}, errors.New("JetStream not bound yet")
	}
	return Load(ctx, bd.kv, bot)
}
