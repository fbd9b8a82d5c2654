// Package health notices when a bot (an "instance") is not fine, opens and
// carries its incident, and brings it back: detection, the shared health
// record, half-open recovery and compensation, with every time measured.
//
// # Three signals, one record
//
// Every node runs a Health; the node leading a bot runs a monitor on its
// connection. Three signals write the bot's one health Record (JetStream
// KV, shared by every node):
//
//   - probe: the connection's heartbeat acks (the first late one is
//     probed at once), and Probe (one ping now, asked when another signal
//     looks wrong, instead of pinging every bot more often), and the
//     connection's own end (read error, kick, 846609);
//   - outbound failures: frames refused, timed out, or acked late;
//   - event silence: no callback for longer than the bot's hour-of-week
//     Baseline allows (no alarm until the baseline has data).
//
// They cross-check through the record: a silence while an outbound frame
// was acked seconds ago (Config.Refute) is a baseline problem, recorded as
// such (Record.BaselineNote), not an incident; a silence with no recent
// outbound success gets a probe: no ack means a dead link (closed, and
// reconnected by the election loop at once), an ack means a deaf one (the
// server no longer delivers: reconnected once per incident). A link that
// dies without a FIN is so found within about Config.ProbeEvery of the
// first frame that fails (on an idle bot, the heartbeat whose ack is
// late), or of the silence threshold, instead of after two missed 30 s
// pings.
//
// # Incidents
//
// A failure opens the bot's incident (pkg/incident) with the time of the
// last evidence that the bot was fine (Dropped) and the time it was
// detected; the first reconnect attempt, or a person's ack, is its first
// action; the next connection is its recovery; and it closes when its data
// is complete: the complete answers owed when it came back were delivered
// (outbound replay, each once: the task record says what the user saw) and
// the gap backfill of the inbound side ran (what it could not fill marks
// the conversation "may be incomplete", told to the user in the next reply,
// and opens a data incident for a person; with no history source to fill
// from, the conversations active around the gap are marked, and an outage
// of at least Recovery.Threshold pages a person). A graceful handover (a deploy)
// says so in the record and is not an incident; a leader that vanished
// without a word (kill -9, a partition) is found by the next leader, which
// opens the incident as it takes over.
//
// Rejected credentials are the one thing retrying never fixes: the
// incident is at level human and the node does not campaign for that bot
// again until a person acknowledges the incident (botctl incidents ack).
//
// The node's election loop never waits for any of this: its hooks post
// events to a per-bot queue, handled in order off the loop.
package health

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/backfill"
	"github.com/botctl/botctl/pkg/incident"
	"github.com/botctl/botctl/pkg/recovery"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Config configures a node's Health. Zero values take the defaults named.
type Config struct {
	NodeID string
	// Owners names who answers for each bot (bots[].owner), for incidents
	// and alerts.
	Owners map[string]string
	// Limits shape the silence baseline; Location is its clock for the
	// hour of the week. Default time.Local.
	Limits   BaselineLimits
	Location *time.Location
	// Tick is the monitor's period. Default 1s.
	Tick time.Duration
	// RecordInterval is how often the leader writes its bot's timestamps
	// (last inbound, outbound success, probe) into the record; state
	// changes are written at once. Default 5s. It bounds how stale
	// Dropped can be when a leader vanishes.
	RecordInterval time.Duration
	// ProbeTimeout bounds one probe; ProbeEvery spaces the probes a
	// suspicion asks for. Defaults 3s and 5s.
	ProbeTimeout, ProbeEvery time.Duration
	// Refute: an outbound frame acked this recently refutes a silence
	// alarm (a baseline problem). Default 10s.
	Refute time.Duration
	// Recovery shapes the half-open recovery after an outage longer than
	// Recovery.Threshold. Without a history source, an outage that long
	// also pages a person about its unchecked gap.
	Recovery recovery.Config
	// Backfill runs the gap backfill of term's bot (every term, at its
	// start, and again when a silent connection delivers again) and
	// returns what it did. Nil, or ErrNoHistory: no history source; an
	// outage's gap is then marked and told, not filled.
	Backfill func(ctx context.Context, term *election.Term) (backfill.Report, error)
	// Overlap: after an incident, Backfill runs once more at recovered +
	// Overlap (the reconciled range ends there). Default 0: no trailing
	// pass; serve sets backfill.overlap.
	Overlap time.Duration
	// Missed, if set, counts bot's messages created in [since, until) that
	// were never handled, from a history source: it decides whether a
	// silence is a deaf connection or quiet users. Nil, or ErrNoHistory:
	// the outbound signal decides (see Refute). Any other error (the
	// history or the task store could not be read): the silence is not
	// judged now; reconnecting WeCom would not mend either.
	Missed func(ctx context.Context, bot string, since, until time.Time) (int, error)
	// StatusLineEvery and StreamWindow are the pusher's (push.heartbeat,
	// push.stream_window): a stream shows a status line after
	// StatusLineEvery without a frame, while its window lasts. They count
	// the status lines an outage's streams were owed and never got
	// (incident.Replay.DroppedStatusLines). Defaults 20s and 6m, the
	// pusher's.
	StatusLineEvery, StreamWindow time.Duration
	// MarkIncomplete marks conversations "may be incomplete" (the next
	// reply tells the user). Nil: not marked.
	MarkIncomplete func(ctx context.Context, bot string, chats []string, why string) error
	Logger         zerolog.Logger
	Now            func() time.Time
}

func (c *Config) setDefaults() {
	if c.Location == nil {
		c.Location = time.Local
	}
	if c.Tick <= 0 {
		c.Tick = time.Second
	}
	if c.RecordInterval <= 0 {
		c.RecordInterval = 5 * time.Second
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = 3 * time.Second
	}
	if c.ProbeEvery <= 0 {
		c.ProbeEvery = 5 * time.Second
	}
	if c.Refute <= 0 {
		c.Refute = 10 * time.Second
	}
	if c.StatusLineEvery <= 0 {
		c.StatusLineEvery = 20 * time.Second
	}
	if c.StreamWindow <= 0 {
		c.StreamWindow = 6 * time.Minute
	}
	c.Recovery = c.Recovery.Defaults()
	c.Limits.setDefaults()
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Health is one node's part of the self-healing: it implements
// node.Observer. Bind it to JetStream once the store is declared; until
// then it monitors connections but records nothing.
type Health struct {
	cfg Config
	log zerolog.Logger

	mu      sync.Mutex
	bots    map[string]*botState
	marks   map[string]bool // "<bot>.<chat>" tokens marked "may be incomplete"
	bound   *binding
	boundCh chan struct{}   // closed by Bind
	ctx     context.Context // Run's; nil until Run
	wg      sync.WaitGroup
}

type binding struct {
	kv        natsjs.KeyValue
	incidents *incident.Store
	store     *jetstream.Store
	tasks     *task.Lifecycle
}

// botState is what this node knows of one bot. Fields other than events
// and gate are guarded by mu.
type botState struct {
	id     string
	events chan func(context.Context)
	gate   recovery.Gate

	mu       sync.Mutex
	conn     *wecom.Conn
	term     int64
	cause    *closeCause // why the monitor closed conn, if it did
	baseline *Baseline
	// baselineLoaded: baseline is the saved one (only then is it saved
	// back, so an unbound start never overwrites weeks of learning).
	baselineLoaded bool
	// authFailed is the latest time this node's subscribe was refused for
	// credentials: AuthHold waits for an ack after it.
	authFailed time.Time
	// silent: this node closed a deaf connection of b, and the silence
	// incident waits for callbacks to arrive again.
	silent bool
}

// closeCause is what the monitor knew when it closed a connection.
type closeCause struct {
	signal, reason string
	dropped        time.Time
}

// New returns a Health; Run must run for it to act.
func New(cfg Config) *Health {
	cfg.setDefaults()
	return &Health{cfg: cfg, log: cfg.Logger, bots: map[string]*botState{}, marks: map[string]bool{}, boundCh: make(chan struct{})}
}

// Bind gives Health the store: the health bucket, incidents and task
// records (for the outbound replay).
func (h *Health) Bind(store *jetstream.Store, tasks *task.Lifecycle) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bound = &binding{kv: store.Health(), incidents: incident.NewStore(store.Incidents()), store: store, tasks: tasks}
	close(h.boundCh)
	if h.ctx != nil {
		ctx, kv := h.ctx, h.bound.kv
		h.wg.Go(func() { h.watchMarks(ctx, kv) })
	}
}

func (h *Health) binding() *binding {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.bound
}

// Run handles the bots' events until ctx ends, then waits for every
// monitor and recovery it started.
func (h *Health) Run(ctx context.Context) {
	h.mu.Lock()
	h.ctx = ctx
	bots := make([]*botState, 0, len(h.bots))
	for _, b := range h.bots {
		bots = append(bots, b)
	}
	if h.bound != nil {
		kv := h.bound.kv
		h.wg.Go(func() { h.watchMarks(ctx, kv) })
	}
	h.mu.Unlock()
	for _, b := range bots {
		h.startQueue(ctx, b)
	}
	<-ctx.Done()
	h.wg.Wait()
}

// Gate is bot's backlog gate, for its pusher.
func (h *Health) Gate(bot string) *recovery.Gate { return &h.bot(bot).gate }

func (h *Health) bot(id string) *botState {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.bots[id]
	if b == nil {
		b = &botState{id: id, events: make(chan func(context.Context), 256)}
		h.bots[id] = b
		if h.ctx != nil {
			h.startQueue(h.ctx, b)
		}
	}
	return b
}

func (h *Health) startQueue(ctx context.Context, b *botState) {
	h.wg.Go(func() {
		// Every event records something: until JetStream is bound they
		// wait, in order (a node may lead before NATS answers).
		select {
		case <-h.boundCh:
		case <-ctx.Done():
			return
		}
		for {
			select {
			case <-ctx.Done():
				// Drain what is queued with a short deadline: an incident
				// step of a stopping node is still worth recording.
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			drain:
				for {
					select {
					case ev := <-b.events:
						ev(dctx)
					default:
						break drain
					}
				}
				cancel()
				return
			case ev := <-b.events:
				ev(ctx)
			}
		}
	})
}

// post queues ev for b, in order; the node's loop never waits for it.
func (h *Health) post(b *botState, ev func(context.Context)) {
	select {
	case b.events <- ev:
	default:
		h.log.Warn().Str("bot", b.id).Msg("health event queue full; event dropped (the record may lag)")
	}
}

// Settle waits until every event of bot posted so far has been handled, or
// ctx ends (tests, and AuthHold before it reads the incident).
func (h *Health) Settle(ctx context.Context, bot string) {
	done := make(chan struct{})
	h.post(h.bot(bot), func(context.Context) { close(done) })
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (h *Health) now() time.Time { return h.cfg.Now().UTC() }

// Dialing implements node.Observer: this node leads the bot and dials.
// A holder that vanished without a word (its record still says it is
// online) is an incident found now; an open incident gets its first
// action: the reconnect.
func (h *Health) Dialing(term *election.Term) {
	b, now := h.bot(term.Bot), h.now()
	h.post(b, func(ctx context.Context) {
		bd := h.binding()
		if bd == nil || term.Err() != nil {
			return
		}
		rec, err := Load(ctx, bd.kv, b.id)
		if err != nil {
			h.log.Warn().Err(err).Str("bot", b.id).Msg("health record unreadable")
			return
		}
		inc, err := bd.incidents.OpenFor(ctx, b.id, incident.Outage)
		if err != nil {
			h.log.Warn().Err(err).Str("bot", b.id).Msg("open incident unreadable")
			return
		}
		if inc == nil {
			switch {
			case (rec.State == Online || rec.State == Degraded || rec.State == HalfOpen) && !rec.Handover:
				dropped := rec.LastEvidence()
				if dropped.IsZero() {
					dropped = rec.Updated
				}
				inc = h.open(ctx, bd, incident.Incident{Bot: b.id, Signal: incident.SignalTakeover, Level: incident.Auto,
					Reason: fmt.Sprintf("node %s (term %d) stopped holding the bot without a word (a crash, kill -9, a hang or a partition); node %s took over",
						rec.Node, rec.Term, h.cfg.NodeID),
					Dropped: dropped, Detected: now, Term: term.Rev})
			case rec.Handover && now.Sub(rec.Since) > h.cfg.Recovery.Threshold:
				inc = h.open(ctx, bd, incident.Incident{Bot: b.id, Signal: incident.SignalTakeover, Level: incident.Auto,
					Reason:  fmt.Sprintf("no node held the bot for %s after node %s handed it over", now.Sub(rec.Since).Round(time.Second), rec.Node),
					Dropped: rec.Since, Detected: now, Term: term.Rev})
			}
		}
		if inc == nil {
			return
		}
		h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
			i.Acted(now, fmt.Sprintf("auto: reconnect by node %s (term %d)", h.cfg.NodeID, term.Rev))
			i.Note(now, h.cfg.NodeID, "reconnecting (term %d)", term.Rev)
		})
	})
}

// Dialed implements node.Observer.
func (h *Health) Dialed(term *election.Term, conn *wecom.Conn, err error) {
	b, now := h.bot(term.Bot), h.now()
	if err != nil {
		auth := errors.Is(err, wecom.ErrAuthFailed)
		if auth {
			b.mu.Lock()
			b.authFailed = now
			b.mu.Unlock()
		}
		h.post(b, func(ctx context.Context) { h.dialFailed(ctx, b, term, err, auth, now) })
		return
	}
	b.mu.Lock()
	b.conn, b.term, b.cause = conn, term.Rev, nil
	b.mu.Unlock()
	mctx, cancel := context.WithCancel(term.Context())
	h.wg.Go(func() {
		defer cancel()
		h.monitor(mctx, term, conn, b)
	})
	h.post(b, func(ctx context.Context) { h.connected(ctx, b, term, conn, now) })
}

func (h *Health) dialFailed(ctx context.Context, b *botState, term *election.Term, err error, auth bool, now time.Time) {
	bd := h.binding()
	if bd == nil {
		return
	}
	if auth {
		next := fmt.Sprintf("WeCom rejected the secret of bot %s: check the bot in the WeCom admin console, put the right secret in bots[].secret_file (or BOTCTL_BOT_<ID>_SECRET) on every node and restart them, then run `botctl incidents ack <id>`; botctl does not retry this bot until then", b.id)
		inc := h.open(ctx, bd, incident.Incident{Bot: b.id, Signal: incident.SignalAuth, Level: incident.Human,
			Reason: "WeCom refused the bot's credentials: " + err.Error(), Next: next, Dropped: now, Detected: now, Term: term.Rev})
		if inc != nil {
			h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
				if i.Level != incident.Human || i.Signal != incident.SignalAuth {
					i.Level, i.Signal, i.Next = incident.Human, incident.SignalAuth, next
					i.Reason = "WeCom refused the bot's credentials: " + err.Error()
				}
				i.Note(now, h.cfg.NodeID, "subscribe refused for credentials; not retrying until acknowledged")
			})
		}
		h.setRecord(ctx, bd, b.id, now, func(r *Record) {
			r.State, r.Reason, r.Handover = NeedsHuman, "WeCom refused the credentials: fix the secret, then `botctl incidents ack`", false
			if inc != nil {
				r.Incident = inc.ID
			}
		})
		return
	}
	rec, lerr := Load(ctx, bd.kv, b.id)
	if lerr != nil {
		return
	}
	dropped := now
	if rec.Handover {
		dropped = rec.Since
	}
	inc := h.open(ctx, bd, incident.Incident{Bot: b.id, Signal: incident.SignalConnection, Level: incident.Auto,
		Reason: "cannot connect to WeCom: " + err.Error(), Dropped: dropped, Detected: now, Term: term.Rev})
	if inc != nil {
		h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
			i.Acted(now, fmt.Sprintf("auto: reconnect by node %s", h.cfg.NodeID))
			i.Note(now, h.cfg.NodeID, "connect failed: %v", err)
		})
	}
	h.setRecord(ctx, bd, b.id, now, func(r *Record) {
		if r.State != NeedsHuman {
			r.State = Offline
		}
		r.Reason, r.Handover, r.LastFailure = "cannot connect: "+err.Error(), false, err.Error()
		if inc != nil {
			r.Incident = inc.ID
		}
	})
}

// connected records a subscribed connection: the bot is back if it had an
// incident (half-open first after a long outage), and its compensation
// runs.
func (h *Health) connected(ctx context.Context, b *botState, term *election.Term, conn *wecom.Conn, now time.Time) {
	bd := h.binding()
	if bd == nil || term.Err() != nil {
		return // the term is over: its end is the next event
	}
	inc, err := bd.incidents.OpenFor(ctx, b.id, incident.Outage)
	if err != nil {
		h.log.Warn().Err(err).Str("bot", b.id).Msg("open incident unreadable")
	}
	state, why := Online, ""
	halfOpen := false
	if inc != nil && inc.Signal == incident.SignalSilence && inc.Recovered.IsZero() {
		// Whichever node reconnects watches for callbacks to come back.
		state, why = Degraded, "reconnected after a silence: waiting for callbacks to arrive again"
		b.mu.Lock()
		b.silent = true
		b.mu.Unlock()
	}
	if inc != nil && inc.Signal != incident.SignalSilence {
		halfOpen = now.Sub(inc.Dropped) >= h.cfg.Recovery.Threshold
		inc = h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
			i.Acted(now, fmt.Sprintf("auto: reconnect by node %s", h.cfg.NodeID))
			i.Recovered, i.State = now, incident.Recovering
			i.Online, i.DataComplete = time.Time{}, time.Time{}
			i.HalfOpen = i.HalfOpen || halfOpen
			if !halfOpen {
				i.Online = now
			}
			i.Note(now, h.cfg.NodeID, "connected again (term %d) after %s down%s", term.Rev, now.Sub(i.Dropped).Round(time.Millisecond),
				map[bool]string{true: "; half-open", false: ""}[halfOpen])
		})
		if halfOpen {
			state = HalfOpen
		}
	}
	h.setRecord(ctx, bd, b.id, now, func(r *Record) {
		r.State, r.Reason, r.Node, r.Term, r.Handover = state, why, h.cfg.NodeID, term.Rev, false
		if state == HalfOpen {
			r.Reason = "half-open after an outage: probing before the backlog"
		}
		r.Incident = ""
		if inc != nil {
			r.Incident = inc.ID
		}
	})
	tctx := term.Context()
	if halfOpen && inc != nil {
		id := inc.ID
		h.wg.Go(func() { h.halfOpen(tctx, bd, b, conn, id) })
	}
	var id string
	if inc != nil && inc.Signal != incident.SignalSilence {
		id = inc.ID
	}
	h.wg.Go(func() { h.compensate(tctx, bd, b, term, id, now) })
}

// halfOpen runs the recovery of incident id on conn.
func (h *Health) halfOpen(ctx context.Context, bd *binding, b *botState, conn *wecom.Conn, id string) {
	note := func(s string) {
		h.updateIncidentID(ctx, bd, b.id, id, func(i *incident.Incident) { i.Note(h.now(), h.cfg.NodeID, "%s", s) })
	}
	b.mu.Lock()
	rate := 0.0
	if b.baseline != nil {
		rate = b.baseline.SendRate
	}
	b.mu.Unlock()
	res, err := recovery.HalfOpen(ctx, h.cfg.Recovery, conn, &b.gate, rate, note)
	now := h.now()
	if errors.Is(err, recovery.ErrProbeFailed) {
		b.mu.Lock()
		b.cause = &closeCause{signal: incident.SignalProbe, reason: "half-open: " + err.Error(), dropped: now}
		b.mu.Unlock()
		conn.CloseUnhealthy(err)
		return
	}
	if err != nil || res.Online.IsZero() {
		return // the connection ended: its end is the next event
	}
	h.updateIncidentID(ctx, bd, b.id, id, func(i *incident.Incident) {
		i.Online = now
		h.maybeClose(i, now)
	})
	h.setRecord(ctx, bd, b.id, now, func(r *Record) {
		if r.State == HalfOpen {
			r.State, r.Reason = Online, ""
		}
	})
}

// handoverWrite bounds how long a graceful Ended waits for its record.
const handoverWrite = 3 * time.Second

// Ended implements node.Observer. A graceful end returns once its
// handover is recorded (at most handoverWrite); any other returns at once.
func (h *Health) Ended(term *election.Term, conn *wecom.Conn, graceful bool) {
	b, now := h.bot(term.Bot), h.now()
	b.mu.Lock()
	cause := b.cause
	b.cause = nil
	if b.conn == conn {
		b.conn = nil
	}
	b.mu.Unlock()
	v := conn.Vitals()
	reason, cerr := conn.Reason(), conn.Err()
	written := make(chan struct{})
	if graceful {
		// A handover's record must be in the bucket before the term is
		// resigned, or the next leader reads "online" and takes the
		// handover for a leader that vanished without a word. Bounded: a
		// JetStream that does not answer costs a false incident, not a
		// stuck shutdown.
		defer func() {
			t := time.NewTimer(handoverWrite)
			defer t.Stop()
			select {
			case <-written:
			case <-t.C:
				h.log.Warn().Str("bot", b.id).Msg("handover not recorded in time; the next leader may report a takeover")
			}
		}()
	}
	h.post(b, func(ctx context.Context) {
		defer close(written)
		bd := h.binding()
		if bd == nil {
			return
		}
		if graceful {
			h.setRecord(ctx, bd, b.id, now, func(r *Record) {
				r.State, r.Handover, r.Node, r.Term = Offline, true, h.cfg.NodeID, term.Rev
				r.Reason = fmt.Sprintf("handover: node %s stopped its term on purpose", h.cfg.NodeID)
				stamp(r, v)
			})
			return
		}
		if rec, err := Load(ctx, bd.kv, b.id); err == nil && rec.Term > term.Rev {
			// A newer term (a standby that deposed this node while it
			// hung, or took over after its lease ran out) has already
			// connected and written the record: this end is that
			// handover seen late. Opening an incident now would leave it
			// open for good (the newer term recovered before it existed),
			// and writing the record would overwrite the newer term's.
			h.log.Info().Str("bot", b.id).Int64("term", term.Rev).Int64("newer_term", rec.Term).Str("newer_node", rec.Node).
				Stringer("reason", reason).Msg("connection of a superseded term ended: a handover, not an incident")
			return
		}
		signal, why, dropped := classify(reason, cerr, term, v, cause, now)
		if signal == incident.SignalSilence {
			b.mu.Lock()
			b.silent = true
			b.mu.Unlock()
		}
		inc := h.open(ctx, bd, incident.Incident{Bot: b.id, Signal: signal, Level: incident.Auto, Reason: why,
			Dropped: dropped, Detected: now, Term: term.Rev})
		if inc != nil {
			h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
				if i.State == incident.Recovering {
					// Down again before its data was complete or its
					// half-open was over: the same incident, open again.
					i.State, i.Recovered, i.Online, i.DataComplete = incident.Open, time.Time{}, time.Time{}, time.Time{}
				}
				i.Note(now, h.cfg.NodeID, "connection ended (%s): %s", reason, why)
			})
		}
		h.setRecord(ctx, bd, b.id, now, func(r *Record) {
			r.State, r.Reason, r.Handover, r.Node, r.Term = Offline, why, false, h.cfg.NodeID, term.Rev
			stamp(r, v)
			if inc != nil {
				r.Incident = inc.ID
			}
		})
	})
}

// classify says which signal found a connection's end, why, and when the
// bot was last known fine. An end the connection saw happen (a read error,
// a kick) is its own detection: dropped is now. An end inferred from
// silence (heartbeats or acks missing) dates back to the last evidence.
func classify(reason wecom.CloseReason, err error, term *election.Term, v wecom.Vitals, cause *closeCause, now time.Time) (signal, why string, dropped time.Time) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	switch reason {
	case wecom.ReasonUnhealthy:
		if cause != nil {
			return cause.signal, cause.reason, cause.dropped
		}
		return incident.SignalProbe, msg, v.LastEvidence()
	case wecom.ReasonHeartbeatLost:
		return incident.SignalProbe, "heartbeats unacked: " + msg, v.LastEvidence()
	case wecom.ReasonAckTimeouts:
		return incident.SignalOutbound, "frames unacked: " + msg, v.LastEvidence()
	case wecom.ReasonKicked:
		return incident.SignalConnection, "kicked: another connection subscribed with this bot's credentials (outside this cluster, if no node of it took over)", now
	case wecom.ReasonClosedByUs:
		why := "leadership lost"
		if err := term.Err(); err != nil {
			why += ": " + err.Error()
		}
		return incident.SignalConnection, why, now
	}
	return incident.SignalConnection, msg, now
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

// Conflict implements node.Observer: a second holder of the bot's
// credentials keeps kicking the cluster's connection. The bot's incident
// becomes human (signal env_gate): only a person can stop the other one.
func (h *Health) Conflict(bot, reason string) {
	b, now := h.bot(bot), h.now()
	h.post(b, func(ctx context.Context) {
		bd := h.binding()
		if bd == nil {
			return
		}
		next := nextAction(incident.SignalGate, bot)
		inc := h.open(ctx, bd, incident.Incident{Bot: bot, Signal: incident.SignalGate, Level: incident.Human, Reason: reason,
			Next: next, Dropped: now, Detected: now})
		if inc != nil {
			h.updateIncident(ctx, bd, inc, func(i *incident.Incident) {
				if i.Level != incident.Human || i.Signal != incident.SignalGate {
					i.Level, i.Signal, i.Next, i.Reason = incident.Human, incident.SignalGate, next, reason
				}
				i.Note(now, h.cfg.NodeID, "another holder of the credentials keeps kicking this cluster: %s", reason)
			})
		}
		h.setRecord(ctx, bd, bot, now, func(r *Record) {
			r.State, r.Reason, r.Handover = NeedsHuman, reason, false
			if inc != nil {
				r.Incident = inc.ID
			}
		})
	})
}

// AuthHold implements node.Observer: after rejected credentials the node
// does not campaign for the bot again until a person acknowledges its
// incident (or the incident is closed).
func (h *Health) AuthHold(ctx context.Context, bot string) bool {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	h.Settle(sctx, bot)
	cancel()
	bd := h.binding()
	if bd == nil {
		return false
	}
	b := h.bot(bot)
	b.mu.Lock()
	failed := b.authFailed
	b.mu.Unlock()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		inc, err := bd.incidents.OpenFor(ctx, bot, incident.Outage)
		if err == nil && (inc == nil || inc.AckedAt.After(failed)) {
			if inc != nil {
				h.log.Info().Str("bot", bot).Str("incident", inc.ID).Str("acked_by", inc.AckedBy).Msg("incident acknowledged: trying the credentials again")
			}
			return true
		}
		select {
		case <-ctx.Done():
			return true
		case <-t.C:
		}
	}
}

// open opens inc (owner and node filled in), or returns the bot's open
// incident of that kind. nil: the store failed (logged).
func (h *Health) open(ctx context.Context, bd *binding, inc incident.Incident) *incident.Incident {
	if inc.Owner == "" {
		inc.Owner = h.cfg.Owners[inc.Bot]
	}
	inc.Node = h.cfg.NodeID
	if inc.Next == "" {
		inc.Next = nextAction(inc.Signal, inc.Bot)
	}
	if inc.Dropped.After(inc.Detected) {
		inc.Dropped = inc.Detected
	}
	if len(inc.Events) == 0 {
		inc.Note(inc.Detected, h.cfg.NodeID, "detected (%s): %s", inc.Signal, inc.Reason)
	}
	cur, err := bd.incidents.Open(ctx, inc)
	switch {
	case err == nil:
		h.log.Warn().Str("bot", inc.Bot).Str("incident", cur.ID).Str("signal", inc.Signal).Str("level", string(inc.Level)).
			Dur("t1", cur.T1()).Str("reason", inc.Reason).Msg("incident opened")
		return cur
	case errors.Is(err, incident.ErrOpen):
		return cur
	default:
		h.log.Error().Err(err).Str("bot", inc.Bot).Msg("incident not recorded")
		return nil
	}
}

func (h *Health) updateIncident(ctx context.Context, bd *binding, inc *incident.Incident, fn func(*incident.Incident)) *incident.Incident {
	return h.updateIncidentID(ctx, bd, inc.Bot, inc.ID, fn)
}

func (h *Health) updateIncidentID(ctx context.Context, bd *binding, bot, id string, fn func(*incident.Incident)) *incident.Incident {
	cur, err := bd.incidents.Update(ctx, bot, id, func(i *incident.Incident) error {
		if i.State == incident.Closed {
			return errClosed
		}
		fn(i)
		return nil
	})
	if err != nil && !errors.Is(err, errClosed) {
		h.log.Warn().Err(err).Str("bot", bot).Str("incident", id).Msg("incident not updated")
		return nil
	}
	if err == nil && cur.State == incident.Closed {
		h.log.Info().Str("bot", bot).Str("incident", id).Str("method", string(cur.Method)).
			Dur("t1", cur.T1()).Dur("t2", cur.T2()).Dur("t3", cur.T3()).Dur("downtime", cur.Downtime(cur.Closed)).Msg("incident closed")
	}
	return cur
}

var errClosed = errors.New("incident closed")

// maybeClose closes i once it is online and its data complete.
func (h *Health) maybeClose(i *incident.Incident, now time.Time) {
	if i.State != incident.Closed && !i.Online.IsZero() && !i.DataComplete.IsZero() {
		i.Close(now)
		i.Note(now, h.cfg.NodeID, "closed (%s): T1 %s, T2 %s, T3 %s, down %s", i.Method,
			i.T1().Round(time.Millisecond), i.T2().Round(time.Millisecond), i.T3().Round(time.Millisecond), i.Downtime(now).Round(time.Millisecond))
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

// nextAction is what to do about an incident found by signal.
func nextAction(signal, bot string) string {
	switch signal {
	case incident.SignalAuth:
		return fmt.Sprintf("fix the secret of bot %s, restart the nodes, then `botctl incidents ack <id>`", bot)
	case incident.SignalDelivery:
		return "tell the user their answer could not be delivered (see `botctl tasks show`); `botctl tasks redeliver <task>` once the cause is fixed; then `botctl incidents ack <id>`"
	case incident.SignalBackfill:
		return "the listed conversations may have unanswered messages: check them in WeCom, raise backfill.max_messages if the budget was the limit, then `botctl incidents ack <id>`"
	case incident.SignalGate:
		return "another environment uses this bot's credentials: stop it or give it its own bot, then `botctl incidents ack <id>`"
	}
	return "none yet: botctl is reconnecting; if this stays open past the escalation limit, check the node logs, egress to WeCom, and `botctl status`"
}
