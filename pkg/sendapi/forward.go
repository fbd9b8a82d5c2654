package sendapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/botctl/botctl/election"
	"github.com/botctl/botctl/internal/httpjson"
	"github.com/botctl/botctl/pkg/redact"
)

// notLeaderRetry is the Retry-After of a standby's 503: an election after
// a leader's loss takes seconds.
const notLeaderRetry = 2

// maxForwardedAnswer bounds the leader's answer a standby relays.
const maxForwardedAnswer = 1 << 20

// sendElsewhere answers a send for bot that this node cannot make (it
// does not hold bot's connection): forwarded to the leader's API, whose
// answer is relayed as it is, or 503 saying where the leader is.
//
// A request is forwarded once: the forward carries ForwardedHeader, and a
// node never forwards a request that has it (two nodes that each believe
// the other leads answer 503 instead of passing a request back and
// forth). Forwarding needs the cluster's shared api.token_file (the
// forward carries this node's token) and a leader's API on this machine,
// or https to another machine vouched for by api.ca_file (its
// certificate verified against the cluster's CA) or api.forward_peers
// (config.API.ForwardAllowed): the address comes from etcd's node
// registry, and a writer of etcd must not be able to collect the token
// by registering a server of its own. Without them the answer is the
// 503, saying why.
func (a *API) sendElsewhere(w http.ResponseWriter, r *http.Request, bot string, raw []byte) {
	answer := func(code int, res Result, o sendOutcome, retry int) {
		a.sends.WithLabelValues(bot, string(o)).Inc()
		if retry > 0 {
			w.Header().Set("Retry-After", fmt.Sprint(retry))
		}
		res.Bot = bot
		httpjson.WriteIndented(w, code, res)
	}
	notLeader := func(addr, why string) {
		res := Result{Error: "not the leader; retry at " + addr, Leader: addr, Reason: why}
		if addr == "" {
			res.Error = "not the leader, and no node leads bot " + bot + " now; retry later"
		}
		answer(http.StatusServiceUnavailable, res, outcomeNotLeader, notLeaderRetry)
	}
	lctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	leader, addr, err := a.node.Leader(lctx, bot)
	cancel()
	switch {
	case errors.Is(err, ErrNoLeaderLookup):
		notLeader("", "this node has no etcd client to find the leader with")
		return
	case errors.Is(err, election.ErrNoLeader):
		notLeader("", "no node holds bot "+bot+"'s election: one is under way, or every node is down or gated")
		return
	case err != nil:
		notLeader("", "the leader cannot be read from etcd: "+redact.Error(err).Error())
		return
	case leader == a.cfg.NodeID:
		answer(http.StatusServiceUnavailable, Result{Leader: addr, Node: leader,
			Error: "this node leads bot " + bot + " but its WeCom connection is not up yet; retry in a second"}, outcomeUnavailable, 1)
		return
	case addr == "":
		notLeader("", "the leader, node "+leader+", is not in the node registry (stopping, or its registration lost)")
		return
	}
	if by := r.Header.Get(ForwardedHeader); by != "" {
		notLeader(addr, fmt.Sprintf("the request was forwarded already (%s: %s), and a request is forwarded once; node %s leads bot %s", ForwardedHeader, by, leader, bot))
		return
	}
	if a.cfg.API.TokenFile == "" {
		notLeader(addr, "forwarding needs the cluster's shared api.token_file: this node uses the token it generated, which the leader does not know")
		return
	}
	if err := a.cfg.API.ForwardAllowed(addr); err != nil {
		notLeader(addr, err.Error())
		return
	}

	ctx, cancel := context.WithTimeout(r.Context(), a.forwardTimeout())
	defer cancel()
	var written atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) { written.Store(i.Err == nil) }})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(addr, "/")+URL(url.PathEscape(bot)), bytes.NewReader(raw))
	if err != nil {
		notLeader(addr, "the leader's address is not a URL: "+err.Error())
		return
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(ForwardedHeader, a.cfg.NodeID)
	cli := *a.cli // api.ca_file's TLS; the context bounds the call
	cli.Timeout = 0
	// A redirect is relayed, never followed: the token goes to addr only.
	cli.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := cli.Do(req)
	if err != nil {
		if !written.Load() {
			notLeader(addr, "the leader's API did not take the request: "+redact.Error(err).Error())
			return
		}
		answer(http.StatusGatewayTimeout, Result{Leader: addr, Node: leader, Error: "outcome unknown: forwarded to the leader, node " + leader + " at " + addr +
			", which did not answer (" + redact.Error(err).Error() + "); the message may have been sent, and sending it again may show it twice"}, outcomeUnknown, 0)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		notLeader(addr, "the leader refused this node's token: the nodes' api.token_file differ")
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxForwardedAnswer))
	if err != nil {
		answer(http.StatusGatewayTimeout, Result{Leader: addr, Node: leader, Error: "outcome unknown: the leader's answer was cut (" + redact.Error(err).Error() +
			"); the message may have been sent, and sending it again may show it twice"}, outcomeUnknown, 0)
		return
	}
	a.sends.WithLabelValues(bot, string(outcomeForwarded)).Inc()
	for _, h := range []string{"Content-Type", "Retry-After"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
}

// forwardTimeout bounds a forwarded send: the leader's wait for the
// budget, WeCom's ack, and a margin; within the API's write timeout.
func (a *API) forwardTimeout() time.Duration {
	return min(MaxWait+a.cfg.WeCom.AckTimeout+5*time.Second, a.writeTimeout-5*time.Second)
}
