package jetstream

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// JetStreamHealth is the data plane's say in a node's candidacy: a node
// whose NATS server answers its pings but whose every JetStream call
// fails (the server cut off from its cluster: no meta leader, no stream
// leader it can reach) would hold its bots' connections and deliver
// nothing, while no other node takes them over.
//
// What it guarantees: once JetStream has failed for After while the
// connection is up, the connection is moved (nats.go's ForceReconnect:
// to another server of the URL list when it names several); if JetStream
// still fails for After after that, Off reports the node off, and the
// node gives up its bots and campaigns for none (node.Config.Skew) until
// a JetStream call succeeds again. A failure while the connection is down
// counts for nothing: nats.go reconnects by itself, and the leader's
// spool keeps what arrives meanwhile.
//
// A node is off only while Peers (when set) says another node's
// JetStream answers: a server cut off from its cluster gives its bots to
// a node that can deliver, but in a cluster that lost its quorum every
// node's JetStream fails, no node is off, and the leaders keep their
// connections and spool what users send until JetStream is back. Failing
// reports this node's own state for the other nodes to read (the node
// registry), and Peers are told when it changes.
//
// What it does not: tell which of two nodes whose JetStream fails
// differently is the better leader; a peer's state is as fresh as the
// registry (rewritten on every change, gone with a dead node's lease).
type JetStreamHealth struct {
	nc    *nats.Conn
	js    natsjs.JetStream
	after time.Duration
	every time.Duration
	log   zerolog.Logger

	// Peers are the other nodes (nil: as if another node's JetStream
	// answered, and nobody to tell). Set before the first Off.
	Peers JetStreamPeers

	mu     sync.Mutex
	probed time.Time
	st     healthState
}

// healthState is what JetStreamHealth knows of the current spell of
// failures.
type healthState struct {
	failingSince time.Time // first failure while connected since the last success
	moved        time.Time // when this spell's connection was moved (zero: not yet)
	off          bool
}

// healthAction is what a probe's outcome asks for.
type healthAction int

const (
	healthNone healthAction = iota
	healthReconnect
)

// decideHealth is JetStreamHealth's rule: the next state after a probe
// at now that succeeded (ok) or not, the connection up (connected) or
// not, and what to do. A pure function of its inputs.
func decideHealth(s healthState, ok, connected bool, now time.Time, after time.Duration) (healthState, healthAction) {
	switch {
	case ok:
		return healthState{}, healthNone
	case !connected:
		return s, healthNone
	case s.failingSince.IsZero():
		s.failingSince = now
	}
	switch {
	case s.moved.IsZero() && now.Sub(s.failingSince) >= after:
		s.moved = now
		return s, healthReconnect
	case !s.moved.IsZero() && now.Sub(s.moved) >= after:
		s.off = true
	}
	return s, healthNone
}

// NewJetStreamHealth watches nc's JetStream: after is how long it may
// fail while connected before the connection is moved, and again before
// the node is off (0: never; nats.jetstream_failover). Probes (an
// account info request) are at most every after/4 apart (at least 1s),
// made when Off is asked.
func NewJetStreamHealth(nc *nats.Conn, after time.Duration, log zerolog.Logger) *JetStreamHealth {
	h := &JetStreamHealth{nc: nc, after: after, every: max(after/4, time.Second), log: log}
	if nc != nil {
		h.js, _ = natsjs.New(nc)
	}
	return h
}

// Off reports whether this node should lead nothing, and why: JetStream
// has failed for After while connected, and again for After once the
// connection was moved. It may probe JetStream first (up to a few
// seconds). Safe for concurrent use.
func (h *JetStreamHealth) Off() (string, bool) {
	if h == nil || h.js == nil || h.after <= 0 {
		return "", false
	}
	h.mu.Lock()
	was := !h.st.failingSince.IsZero()
	if now := time.Now(); now.Sub(h.probed) >= h.every {
		h.probed = now
		h.probe(now)
	}
	off, failing := h.st.off, !h.st.failingSince.IsZero()
	h.mu.Unlock()
	if failing != was && h.Peers != nil {
		h.Peers.Refresh()
	}
	if !off || h.Peers != nil && !h.Peers.JetStreamAnswers() {
		return "", false
	}
	return fmt.Sprintf("JetStream has failed for %s while connected, and again after the connection moved, while another node's answers (nats.jetstream_failover)", h.after), true
}

// JetStreamPeers is what JetStreamHealth asks of the other nodes.
type JetStreamPeers interface {
	// JetStreamAnswers reports whether another node's JetStream answers.
	JetStreamAnswers() bool
	// Refresh tells them that this node's Failing changed.
	Refresh()
}

// Failing reports whether this node's JetStream fails while its
// connection is up, as of the last probe.
func (h *JetStreamHealth) Failing() bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.st.failingSince.IsZero()
}

// probe asks JetStream once at now and acts on decideHealth's answer.
func (h *JetStreamHealth) probe(now time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), min(h.every, 5*time.Second))
	_, err := h.js.AccountInfo(ctx)
	cancel()
	was := h.st
	var act healthAction
	h.st, act = decideHealth(h.st, err == nil, h.nc.IsConnected(), now, h.after)
	switch {
	case act == healthReconnect:
		h.log.Error().Err(err).Str("server", h.nc.ConnectedUrlRedacted()).Dur("failing_for", now.Sub(h.st.failingSince)).
			Msg("JetStream fails while the NATS connection is up: moving the connection (nats.jetstream_failover)")
		if rerr := h.nc.ForceReconnect(); rerr != nil {
			h.log.Warn().Err(rerr).Msg("NATS reconnect not started")
		}
	case h.st.off && !was.off:
		h.log.Error().Err(err).Str("server", h.nc.ConnectedUrlRedacted()).Msg("JetStream still fails after the connection moved: this node gives up its bots until it answers")
	case was.off && !h.st.off:
		h.log.Info().Msg("JetStream answers again: this node campaigns again")
	}
}

// Offs is several reasons a node may be off (node.Config.Skew): off when
// any is; nil ones are skipped.
type Offs []interface{ Off() (string, bool) }

// Off reports the first that is off.
func (o Offs) Off() (string, bool) {
	for _, x := range o {
		if x == nil {
			continue
		}
		if why, off := x.Off(); off {
			return why, true
		}
	}
	return "", false
}
