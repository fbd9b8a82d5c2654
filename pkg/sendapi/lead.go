package sendapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/botctl/botctl/pkg/clock"
	"github.com/botctl/botctl/pkg/wecom"
)

// sent is a send's answer on the leader: the body and, for 429 and 503,
// the Retry-After seconds.
type sent struct {
	Result
	retryAfter int
}

// sendHere sends req to WeCom on conn, this node's connection of bot, and
// answers with what WeCom said.
//
// The send spends the conversation's pace budget: the same Budget the
// pusher spends for every answer frame and push there (Node.Budget),
// so API sends and answers together stay under push.budget a minute and
// push.budget_hourly an hour. It spends like a push, with no reserve
// (the pusher keeps its progress frames off the last two sends of a
// minute, not its finals and pushes). A slot that frees within
// MaxWait is waited for; a later one is a 429 with Retry-After. It
// also waits, like a push, while the bot's connection is in half-open
// recovery (the backlog gate).
//
// What the answer guarantees: 200 only for an ack with errcode 0. A
// frame written but not acked (timeout, connection closed meanwhile) is a
// 504: WeCom may have shown it, and a retry may show it twice.
func (a *API) sendHere(ctx context.Context, conn *wecom.Conn, bot string, req Request) (int, sent, sendOutcome) {
	res := sent{Result: Result{Chat: req.Chat, Node: a.cfg.NodeID}}
	fail := func(code int, o sendOutcome, retry time.Duration, format string, args ...any) (int, sent, sendOutcome) {
		res.Error = fmt.Sprintf(format, args...)
		res.retryAfter = retrySeconds(retry)
		return code, res, o
	}
	budget, gate := a.node.Budget(bot), a.node.Gate(bot)
	deadline := time.Now().Add(MaxWait)
	for {
		now := time.Now()
		wait := gate.Wait(now)
		held := wait > 0
		if !held {
			var ok bool
			if wait, ok = budget.Spend(req.Chat, 0); ok {
				break
			}
			wait = max(wait, 10*time.Millisecond)
		}
		if now.Add(wait).After(deadline) {
			if held {
				return fail(http.StatusServiceUnavailable, outcomeUnavailable, wait,
					"not sent: bot %s's connection is in half-open recovery, which holds proactive sends; retry in %s", bot, wait.Round(time.Second))
			}
			return fail(http.StatusTooManyRequests, outcomeThrottled, wait,
				"not sent: conversation %s has spent its send budget (push.budget %d a minute, push.budget_hourly %d an hour, shared with the bot's answers there); its next slot frees in %s: retry then",
				req.Chat, a.cfg.Push.Budget, a.cfg.Push.BudgetHourly, wait.Round(time.Second))
		}
		if !clock.Sleep(ctx, clock.Real, wait) {
			return fail(http.StatusServiceUnavailable, outcomeUnavailable, time.Second, "not sent: the request ended while it waited for the conversation's send budget")
		}
	}

	p, err := conn.Send(ctx, wecom.CmdSendMsg, wecom.NewReqID(wecom.CmdSendMsg), req.body())
	if err != nil {
		budget.Refund(req.Chat) // nothing was written
		return fail(http.StatusServiceUnavailable, outcomeUnavailable, time.Second, "not sent: %v; retry", err)
	}
	// The frame is written: its outcome is waited for even if the caller
	// leaves (bounded by wecom.ack_timeout), so that it is counted right.
	_, err = p.Wait(context.WithoutCancel(ctx))
	var ae *wecom.AckError
	switch {
	case err == nil:
		ok := wecom.ErrCodeOK
		res.ErrCode, res.ErrMsg = &ok, "ok"
		return http.StatusOK, res, outcomeSent
	case !errors.As(err, &ae):
		// Counted in the budget: WeCom may have taken it.
		return fail(http.StatusGatewayTimeout, outcomeUnknown, 0,
			"outcome unknown: the message was written to WeCom but no trustworthy ack came (%v); it may have been shown, and sending it again may show it twice", err)
	}
	res.ErrCode, res.ErrMsg = &ae.ErrCode, ae.ErrMsg
	switch {
	case ae.ErrCode == wecom.ErrCodeRateLimited:
		// WeCom counted more than the budget did (another sender, a
		// previous leader): the conversation's budget is lowered, as
		// for the pusher's 45009s.
		budget.Refused(req.Chat)
		wait := max(time.Until(budget.Free(req.Chat)), time.Second)
		return fail(http.StatusTooManyRequests, outcomeQuotaRefused, wait,
			"WeCom refused the message for the conversation's quota (errcode 45009); the conversation's budget is lowered: retry in %s", wait.Round(time.Second))
	}
	budget.Refund(req.Chat) // refused: not counted by WeCom either
	switch {
	case wecom.IsConnectionError(err):
		return fail(http.StatusServiceUnavailable, outcomeUnavailable, time.Second,
			"not sent: WeCom answered errcode %d (%s), about the connection and not the message; retry", ae.ErrCode, ae.ErrMsg)
	case ae.ErrCode == wecom.ErrCodeChatNotFound:
		return fail(http.StatusForbidden, outcomeRefused, 0,
			"WeCom refused the message (errcode %d): the bot may message only a chat whose user (or group) has talked to it: %s", ae.ErrCode, ae.ErrMsg)
	case ae.ErrCode == wecom.ErrCodeInvalidMsgType || ae.ErrCode == wecom.ErrCodeInvalidParam || ae.ErrCode == wecom.ErrCodeContentTooLong:
		return fail(http.StatusUnprocessableEntity, outcomeRefused, 0,
			"WeCom refused the message's content (errcode %d): %s", ae.ErrCode, ae.ErrMsg)
	default:
		return fail(http.StatusBadGateway, outcomeRefused, 0, "WeCom refused the message (errcode %d): %s", ae.ErrCode, ae.ErrMsg)
	}
}

// retrySeconds is d as Retry-After's whole seconds, rounded up, at least 1.
func retrySeconds(d time.Duration) int {
	return max(int(math.Ceil(d.Seconds())), 1)
}
