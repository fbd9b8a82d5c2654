// Package limits keeps the limits that protect the operator's bill: per
// user of a bot and per bot, messages a minute and a day, tokens a day and
// bytes of files a day. The bot's leader admits a message (Counters.Admit)
// before its task is published, and its files' bytes (Counters.AdmitBytes)
// once they are downloaded; the worker adds the tokens a backend reported
// (Counters.AddTokens) once an answer ends.
//
// Where the counts live, and why: in a JetStream KV bucket
// (jetstream.Store.Limits, BOTCTL_LIMITS), one key per user of a bot
// ("<bot>.user.<user>") and one per bot ("<bot>.bot"), each a small JSON
// counter of the current UTC day and minute, changed by compare-and-set.
// Every node reads and writes the same counts, so a limit holds across the
// cluster and through a failover (a new leader counts on where the old one
// stopped), which an in-memory limiter (golang.org/x/time/rate) on the
// leader cannot: it would forget the day at every leader change and count
// nothing a fixed worker's tokens spent. The cost: one KV read and one
// compare-and-set per scope that has a limit (user, bot), on the inbound
// path, only for bots with a message limit, and the same after an answer
// for bots with a token limit; none at all for a bot without limits. A
// bot-wide key is written by every message of the bot: its
// compare-and-set retries under heavy concurrency (see maxCAS).
//
// What it guarantees: a message is admitted only if, counted, it leaves
// every message count at most its limit, and the day's tokens so far were
// under the token limit. What it does not: a token limit stops the next
// message, not the answer that crossed it (its tokens are known once it
// ended); counts start when a limit is set (a bot without limits counts
// nothing); and when the bucket cannot be reached the message is admitted
// (fail open: the limit protects a bill, and refusing every user through a
// JetStream outage would cost more than a few uncounted messages).
//
// A day is a UTC day (00:00 to 24:00 UTC); a minute is a calendar minute
// of the clock (hh:mm:00 to hh:mm:59), not a sliding window.
package limits

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/botctl/botctl/jetstream"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Set is one scope's limits (a user of a bot, or the bot); 0 is no limit.
type Set struct {
	MessagesPerMinute int64
	MessagesPerDay    int64
	TokensPerDay      int64
	// BytesPerDay bounds the bytes of the files sent in a UTC day, as
	// stored in the media store (AdmitBytes).
	BytesPerDay int64
}

func (s Set) messages() bool { return s.MessagesPerMinute > 0 || s.MessagesPerDay > 0 }
func (s Set) any() bool      { return s.messages() || s.TokensPerDay > 0 }

// Limits are a bot's limits: each of its users', and the bot's as a whole.
type Limits struct {
	User, Bot Set
}

// Any says whether a message must be admitted (any limit is set).
func (l Limits) Any() bool { return l.User.any() || l.Bot.any() }

// Tokens says whether answers' tokens are counted (a token limit is set).
func (l Limits) Tokens() bool { return l.User.TokensPerDay > 0 || l.Bot.TokensPerDay > 0 }

// Bytes says whether the bytes of the files users send are counted (a
// byte limit is set). A message without files is never counted for them.
func (l Limits) Bytes() bool { return l.User.BytesPerDay > 0 || l.Bot.BytesPerDay > 0 }

// The limits by name: the refusal's reason in logs and the {limit} label
// of botctl_limit_refusals_total, the config keys without "limits.".
const (
	UserMessagesPerMinute = "user.messages_per_minute"
	UserMessagesPerDay    = "user.messages_per_day"
	UserTokensPerDay      = "user.tokens_per_day"
	BotMessagesPerMinute  = "bot.messages_per_minute"
	BotMessagesPerDay     = "bot.messages_per_day"
	BotTokensPerDay       = "bot.tokens_per_day"
	UserBytesPerDay       = "user.bytes_per_day"
	BotBytesPerDay        = "bot.bytes_per_day"
)

// count is one key's value: a scope's use in the current UTC day and
// minute. A count of another day (or minute) is zero.
type count struct {
	Day            string `json:"day"`             // "2006-01-02", UTC
	Messages       int64  `json:"messages"`        // admitted messages in Day
	Tokens         int64  `json:"tokens"`          // tokens reported in Day (in and out)
	Bytes          int64  `json:"bytes,omitempty"` // bytes of files admitted in Day (AdmitBytes)
	Minute         int64  `json:"minute"`          // Unix minute of MinuteMessages
	MinuteMessages int64  `json:"minute_messages"` // admitted messages in Minute
}

// at returns c as of now: its counts reset if they are of another day or
// minute.
func (c count) at(now time.Time) count {
	day, minute := now.UTC().Format(time.DateOnly), now.Unix()/60
	if c.Day != day {
		c = count{Day: day}
	}
	if c.Minute != minute {
		c.Minute, c.MinuteMessages = minute, 0
	}
	return c
}

// Counters count use in the limits bucket. Safe for concurrent use, on
// any number of nodes.
type Counters struct {
	kv  natsjs.KeyValue
	now func() time.Time
}

// New counts in kv (jetstream.Store.Limits); now is the clock (nil:
// time.Now).
func New(kv natsjs.KeyValue, now func() time.Time) *Counters {
	if now == nil {
		now = time.Now
	}
	return &Counters{kv: kv, now: now}
}

// UserKey and BotKey are the counters' keys: "<bot>.user.<user>" and
// "<bot>.bot", ids encoded as task subjects' (jetstream.EncodeToken).
func UserKey(bot, user string) string {
	return jetstream.EncodeToken(bot) + ".user." + jetstream.EncodeToken(user)
}

// BotKey is the bot-wide counter's key.
func BotKey(bot string) string { return jetstream.EncodeToken(bot) + ".bot" }

// errOver is what a change refused by a limit returns inside update.
var errOver = errors.New("over a limit")

// Admit counts one message of user to bot against l and returns "" when
// it is admitted, or the name of the limit it is over (UserMessagesPerMinute,
// …): then nothing is counted. An error (the bucket unreachable) admits
// nothing and counts nothing; the caller decides (access admits).
func (c *Counters) Admit(ctx context.Context, bot, user string, l Limits) (string, error) {
	var userCounted bool
	if l.User.any() {
		over, err := c.admit(ctx, UserKey(bot, user), l.User, "user.")
		if err != nil || over != "" {
			return over, err
		}
		userCounted = l.User.messages()
	}
	if l.Bot.any() {
		over, err := c.admit(ctx, BotKey(bot), l.Bot, "bot.")
		if err != nil || over != "" {
			if userCounted { // the message was not admitted: give the user's count back
				c.Release(context.WithoutCancel(ctx), bot, user, Limits{User: l.User})
			}
			return over, err
		}
	}
	return "", nil
}

// Release takes back one message Admit admitted (its task was not run:
// the conversation was busy, or the dispatch failed). A message admitted
// in an earlier minute or day is taken back from the current ones, never
// below zero.
func (c *Counters) Release(ctx context.Context, bot, user string, l Limits) error {
	back := func(n *count) error {
		n.Messages, n.MinuteMessages = max(0, n.Messages-1), max(0, n.MinuteMessages-1)
		return nil
	}
	var errs []error
	if l.User.messages() {
		errs = append(errs, c.update(ctx, UserKey(bot, user), back))
	}
	if l.Bot.messages() {
		errs = append(errs, c.update(ctx, BotKey(bot), back))
	}
	return errors.Join(errs...)
}

// admit checks one scope's limits and counts the message in it.
func (c *Counters) admit(ctx context.Context, key string, s Set, scope string) (over string, err error) {
	err = c.update(ctx, key, func(n *count) error {
		switch {
		case s.TokensPerDay > 0 && n.Tokens >= s.TokensPerDay:
			over = scope + "tokens_per_day"
		case s.MessagesPerDay > 0 && n.Messages >= s.MessagesPerDay:
			over = scope + "messages_per_day"
		case s.MessagesPerMinute > 0 && n.MinuteMessages >= s.MessagesPerMinute:
			over = scope + "messages_per_minute"
		default:
			over = ""
			if !s.messages() {
				return errNoChange // a token limit only: read, nothing to count
			}
			n.Messages++
			n.MinuteMessages++
			return nil
		}
		return errOver
	})
	if errors.Is(err, errOver) || errors.Is(err, errNoChange) {
		err = nil
	}
	return over, err
}

// AdmitBytes counts n bytes of files user sent bot against l's
// BytesPerDay and returns "" when they are admitted, or the name of the
// limit they are over (UserBytesPerDay, BotBytesPerDay): then nothing is
// counted. Files are admitted only if, counted, they leave each day's
// bytes at most its limit; n 0 asks whether any more are (before a
// download) and counts nothing. An error admits and counts nothing; the
// caller decides (access admits).
func (c *Counters) AdmitBytes(ctx context.Context, bot, user string, n int64, l Limits) (string, error) {
	var userCounted bool
	if l.User.BytesPerDay > 0 {
		over, err := c.admitBytes(ctx, UserKey(bot, user), n, l.User.BytesPerDay, UserBytesPerDay)
		if err != nil || over != "" {
			return over, err
		}
		userCounted = n > 0
	}
	if l.Bot.BytesPerDay > 0 {
		over, err := c.admitBytes(ctx, BotKey(bot), n, l.Bot.BytesPerDay, BotBytesPerDay)
		if err != nil || over != "" {
			if userCounted {
				c.ReleaseBytes(context.WithoutCancel(ctx), bot, user, n, Limits{User: l.User})
			}
			return over, err
		}
	}
	return "", nil
}

func (c *Counters) admitBytes(ctx context.Context, key string, n, limit int64, name string) (over string, err error) {
	err = c.update(ctx, key, func(x *count) error {
		if x.Bytes >= limit || x.Bytes+n > limit {
			over = name
			return errOver
		}
		over = ""
		if n == 0 {
			return errNoChange
		}
		x.Bytes += n
		return nil
	})
	if errors.Is(err, errOver) || errors.Is(err, errNoChange) {
		err = nil
	}
	return over, err
}

// ReleaseBytes takes back n bytes AdmitBytes admitted (the files' message
// ran no task), from the current day's counts, never below zero.
func (c *Counters) ReleaseBytes(ctx context.Context, bot, user string, n int64, l Limits) error {
	if n <= 0 {
		return nil
	}
	back := func(x *count) error { x.Bytes = max(0, x.Bytes-n); return nil }
	var errs []error
	if l.User.BytesPerDay > 0 {
		errs = append(errs, c.update(ctx, UserKey(bot, user), back))
	}
	if l.Bot.BytesPerDay > 0 {
		errs = append(errs, c.update(ctx, BotKey(bot), back))
	}
	return errors.Join(errs...)
}

// AddTokens adds n tokens (a task's, in and out) to the day's counts of
// user and of bot, in the scopes l has a token limit for.
func (c *Counters) AddTokens(ctx context.Context, bot, user string, n int64, l Limits) error {
	if n <= 0 {
		return nil
	}
	add := func(x *count) error { x.Tokens += n; return nil }
	var errs []error
	if l.User.TokensPerDay > 0 {
		errs = append(errs, c.update(ctx, UserKey(bot, user), add))
	}
	if l.Bot.TokensPerDay > 0 {
		errs = append(errs, c.update(ctx, BotKey(bot), add))
	}
	return errors.Join(errs...)
}

// Use is one scope's counts now (botctl and tests read them).
type Use struct {
	Day            string `json:"day"`
	Messages       int64  `json:"messages"`
	Tokens         int64  `json:"tokens"`
	Bytes          int64  `json:"bytes"`
	MinuteMessages int64  `json:"minute_messages"`
}

// Read returns key's counts as of now (zero when there are none).
func (c *Counters) Read(ctx context.Context, key string) (Use, error) {
	n, _, err := c.get(ctx, key)
	if err != nil {
		return Use{}, err
	}
	n = n.at(c.now())
	return Use{Day: n.Day, Messages: n.Messages, Tokens: n.Tokens, Bytes: n.Bytes, MinuteMessages: n.MinuteMessages}, nil
}

var errNoChange = errors.New("no change")

// maxCAS bounds the compare-and-set retries of one change. Each round of
// concurrent changes of one key has a winner, so a change of a burst of n
// at once (a bot-wide key) retries at most n-1 times; past this many the
// change fails (and access admits the message uncounted).
const maxCAS = 100

// update applies fn to key's count as of now, by compare-and-set.
func (c *Counters) update(ctx context.Context, key string, fn func(*count) error) error {
	for attempt := 0; ; attempt++ {
		n, rev, err := c.get(ctx, key)
		if err != nil {
			return err
		}
		n = n.at(c.now())
		if err := fn(&n); err != nil {
			return err
		}
		raw, err := json.Marshal(n)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = c.kv.Create(ctx, key, raw)
		} else {
			_, err = c.kv.Update(ctx, key, raw, rev)
		}
		if err == nil {
			return nil
		}
		if !jetstream.LostCAS(err) || attempt >= maxCAS {
			return fmt.Errorf("limits: count %s: %w", key, err)
		}
		jetstream.CASPause(ctx, attempt)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// get reads key's count and revision (0: none yet).
func (c *Counters) get(ctx context.Context, key string) (count, uint64, error) {
	e, err := c.kv.Get(ctx, key)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return count{}, 0, nil
	}
	if err != nil {
		return count{}, 0, fmt.Errorf("limits: read %s: %w", key, err)
	}
	var n count
	if err := json.Unmarshal(e.Value(), &n); err != nil {
		// A value botctl did not write: counted afresh rather than
		// never admitting again.
		return count{}, e.Revision(), nil
	}
	return n, e.Revision(), nil
}
