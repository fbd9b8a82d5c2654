// Package incident is the record of every time a bot (an "instance") was
// not fine: when it went wrong, when botctl noticed, when something or
// someone first acted, when it was back and when its data was complete
// again. These give the three times of the self-healing design:
//
//	T1 = Detected − Dropped       (drop → detected)
//	T2 = FirstAction − Detected   (detected → an automatic step or a person's ack)
//	     reported apart: T2Auto (detected → the first automatic step) and
//	     T2Human (detected → a person's first acknowledgement)
//	T3 = DataComplete − Recovered (back → outbound replayed and inbound backfilled)
//
// Incidents live in JetStream KV (jetstream.Store.Incidents), so they are
// shared by every node and survive any of them. A bot has at most one
// open incident at a time: opening one creates the key open.<bot> with
// kv.Create, which exactly one writer wins; every later step is a
// compare-and-set on the incident's own key (Store.Update).
//
// What an incident does not guarantee: Dropped is the last evidence that
// the bot was fine (a probe ack, an inbound event, an outbound success)
// known to the cluster, so T1 is an upper bound of the true detection time
// by up to the health record's write interval; a drill, which knows when it
// injected the fault, measures T1 from the injection instead.
package incident

import (
	"fmt"
	"strings"
	"time"
)

// Level says whether a person must act. There are only two.
type Level string

const (
	// Auto: botctl is fixing it; nobody is paged.
	Auto Level = "auto"
	// Human: only a person can fix it (a rejected secret, an env-gate
	// conflict, a delivery failed for good, an incomplete backfill, or an
	// automatic recovery still failing after its limit).
	Human Level = "human"
)

// Kind is what went wrong.
type Kind string

const (
	// Outage: the bot could not talk with its users (connection dropped,
	// silent, refused, or no node could hold it).
	Outage Kind = "outage"
	// Data: the bot was reachable but something its users are owed could
	// not be delivered (a delivery failed for good, a gap backfill left
	// messages unfilled, a task record that does not decode). Closed by a
	// person's ack.
	Data Kind = "data"
	// AI: every AI backend of the bot is failing (their circuit breakers
	// are all open on a node): questions arrive and get no answer but a
	// failure. Closed when a backend answers again.
	AI Kind = "ai"
)

// State of an incident.
type State string

const (
	// Open: detected, not recovered yet.
	Open State = "open"
	// Recovering: the bot is back (Recovered is set): half-open, replaying
	// and backfilling; closes when its data is complete.
	Recovering State = "recovering"
	// Closed: over (DataComplete or a person's ack).
	Closed State = "closed"
)

// Method is how an incident recovered.
type Method string

const (
	MethodAuto  Method = "auto"  // closed without a person
	MethodHuman Method = "human" // a person had to act (or acknowledged it first)
)

// Signals that detect an incident (Incident.Signal).
const (
	SignalConnection = "connection"     // the connection ended (read error, close, kick, 846609)
	SignalProbe      = "probe"          // a heartbeat probe was not acked
	SignalOutbound   = "outbound"       // replies or pushes failed
	SignalSilence    = "silence"        // no inbound event for longer than the baseline allows
	SignalTakeover   = "takeover"       // a new leader found the previous one gone without a word
	SignalAuth       = "auth"           // WeCom refused the bot's credentials
	SignalGate       = "env_gate"       // another environment uses the bot's credentials
	SignalDelivery   = "delivery"       // a final answer could not be delivered, for good
	SignalBackfill   = "backfill"       // a gap backfill could not fill everything
	SignalCorrupt    = "corrupt_record" // a task record does not decode: skipped, its task unanswered
	SignalAIDown     = "ai_down"        // every AI backend of the bot failed, its circuit breakers all open
)

// SignalRouteSilence: one route of a bot (a group) silent for longer than
// its own baseline allows while the bot's other chats still deliver
// (Incident.Route names it).
const SignalRouteSilence = "route_silence"

// Incident is one incident of one bot. Times are UTC; a zero time is "not
// yet".
type Incident struct {
	ID      string `json:"id"`
	Bot     string `json:"bot"`
	Owner   string `json:"owner,omitempty"` // who answers for the bot (config bots[].owner)
	Kind    Kind   `json:"kind"`
	Level   Level  `json:"level"`
	State   State  `json:"state"`
	Signal  string `json:"signal"`         // which signal detected it (Signal*)
	Reason  string `json:"reason"`         // what went wrong, as first detected
	Next    string `json:"next_action"`    // what to do next (for a person, or what botctl does)
	Node    string `json:"node,omitempty"` // the node that detected it
	TermRev int64  `json:"term,omitempty"` // the term it was detected in, if any
	// Route is the silent route of a route_silence incident: "group:<chatid>".
	Route string `json:"route,omitempty"`

	Dropped      time.Time `json:"dropped"`                // last evidence the bot was fine
	Detected     time.Time `json:"detected"`               //
	FirstAction  time.Time `json:"first_action,omitzero"`  // first automatic step or ack
	ActedBy      string    `json:"acted_by,omitempty"`     // "auto: reconnect", "human: alice"
	Recovered    time.Time `json:"recovered,omitzero"`     // talking with WeCom again
	Online       time.Time `json:"online,omitzero"`        // half-open over (or skipped)
	DataComplete time.Time `json:"data_complete,omitzero"` // replayed and backfilled
	Closed       time.Time `json:"closed,omitzero"`        //
	Method       Method    `json:"method,omitempty"`       // set when closed
	HalfOpen     bool      `json:"half_open,omitempty"`    // the recovery went through half-open
	AckedBy      string    `json:"acked_by,omitempty"`     //
	AckedAt      time.Time `json:"acked_at,omitzero"`      // the latest ack
	FirstAck     time.Time `json:"first_ack,omitzero"`     // a person's first ack (T2Human)
	Incomplete   []string  `json:"incomplete,omitempty"`   // conversations marked "may be incomplete"

	Replay   Replay   `json:"replay"`
	Backfill Backfill `json:"backfill"`
	Events   []Event  `json:"events,omitempty"` // the timeline, oldest first (bounded: MaxEvents)
	Alerts   []Sent   `json:"alerts,omitempty"` // alerts sent for it, so a new alerter never repeats one

	// Rev is the KV revision this value was read at (not stored).
	Rev uint64 `json:"-"`
}

// Replay is what the outbound compensation did for the incident.
type Replay struct {
	Held     int `json:"held"`     // final answers owed when the bot came back
	Replayed int `json:"replayed"` // of those, delivered (each once)
	// DroppedStale counts the streams that ran during the outage: their
	// progress while away is not sent late (the user gets the current
	// text). DroppedStatusLines counts the status lines (push.heartbeat's
	// "still working" line) those streams were owed while away and never
	// got: one per push.heartbeat without a frame, from the drop to the
	// return (or the stream's end), so at least as many progress updates
	// were not sent.
	DroppedStale       int `json:"dropped_stale"`
	DroppedStatusLines int `json:"dropped_status_lines"`
	Failed             int `json:"failed"`  // final answers whose delivery failed for good
	Expired            int `json:"expired"` // final answers past their expiry, failed for good
}

// Backfill is what the inbound compensation did for the incident.
type Backfill struct {
	Ran       bool   `json:"ran"`
	Scanned   int    `json:"scanned"`
	Filled    int    `json:"filled"`     // missed messages answered late
	NotFilled int    `json:"not_filled"` // missed messages that could not be answered (marked)
	Note      string `json:"note,omitempty"`
	// Events says what became of the user events (card clicks, feedback,
	// enter_chat) WeCom sent while the bot did not hear them: no history
	// source carries events, so they are stated lost, never recovered.
	Events string `json:"events,omitempty"`
}

// Event is one step of an incident's timeline.
type Event struct {
	At   time.Time `json:"at"`
	What string    `json:"what"`
	Node string    `json:"node,omitempty"`
}

// Sent records one alert sent about an incident.
type Sent struct {
	Kind  string    `json:"kind"` // alert kind (see pkg/heal/alert)
	Level Level     `json:"level"`
	At    time.Time `json:"at"`
	ID    string    `json:"id,omitempty"` // the alert's id (a merged alert names several incidents)
}

// Human reports whether a person was needed: the incident was at level
// human, or a person acknowledged it.
func (i *Incident) Human() bool { return i.Level == Human || i.AckedBy != "" }

// Close closes the incident at now, and says how it recovered.
func (i *Incident) Close(now time.Time) {
	i.State, i.Closed = Closed, now.UTC()
	i.Method = MethodAuto
	if i.Human() {
		i.Method = MethodHuman
	}
}

// MaxEvents bounds an incident's timeline: a flapping bot adds to the
// same incident, and the record must stay small.
const MaxEvents = 64

// T1 is drop → detected (0 if unknown).
func (i *Incident) T1() time.Duration { return span(i.Dropped, i.Detected) }

// T2 is detected → first action (0 until acted).
func (i *Incident) T2() time.Duration { return span(i.Detected, i.FirstAction) }

// T2Auto is detected → the first automatic step; false when the first
// action was not automatic (a person's ack came first, or none yet).
func (i *Incident) T2Auto() (time.Duration, bool) {
	if i.FirstAction.IsZero() || !strings.HasPrefix(i.ActedBy, "auto") {
		return 0, false
	}
	return i.T2(), true
}

// T2Human is detected → a person's first acknowledgement, whether or not
// botctl acted before; false when nobody acknowledged it. An incident
// written before FirstAck existed takes its first action if that was a
// person's, else its latest ack.
func (i *Incident) T2Human() (time.Duration, bool) {
	at := i.FirstAck
	if at.IsZero() && strings.HasPrefix(i.ActedBy, "human") {
		at = i.FirstAction
	}
	if at.IsZero() {
		at = i.AckedAt
	}
	if at.IsZero() {
		return 0, false
	}
	return span(i.Detected, at), true
}

// T3 is recovered → data complete (0 until complete).
func (i *Incident) T3() time.Duration { return span(i.Recovered, i.DataComplete) }

// Downtime is drop → recovered, or drop → now while still down.
func (i *Incident) Downtime(now time.Time) time.Duration {
	if i.Kind == Data {
		return 0
	}
	if !i.Recovered.IsZero() {
		return span(i.Dropped, i.Recovered)
	}
	if i.State == Closed {
		return span(i.Dropped, i.Closed)
	}
	return span(i.Dropped, now)
}

func span(from, to time.Time) time.Duration {
	if from.IsZero() || to.IsZero() || to.Before(from) {
		return 0
	}
	return to.Sub(from)
}

// Note appends a timeline event, keeping the first and the latest ones
// within MaxEvents.
func (i *Incident) Note(at time.Time, node, format string, args ...any) {
	e := Event{At: at.UTC(), What: fmt.Sprintf(format, args...), Node: node}
	if len(i.Events) >= MaxEvents {
		// Keep the first event (how it started) and drop the oldest after it.
		i.Events = append(i.Events[:1], i.Events[2:]...)
	}
	i.Events = append(i.Events, e)
}

// Alerted reports whether an alert of kind was sent for the incident.
func (i *Incident) Alerted(kind string) bool {
	for _, s := range i.Alerts {
		if s.Kind == kind {
			return true
		}
	}
	return false
}

// Acted records the first action, once.
func (i *Incident) Acted(at time.Time, by string) {
	if i.FirstAction.IsZero() {
		i.FirstAction, i.ActedBy = at.UTC(), by
	}
}
