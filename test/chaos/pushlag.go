package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Push lag, measured as test/load measures it: a worker's write of an
// answer's output (Output.Updated, seen by a watcher on the output
// bucket) to the frame showing exactly that text accepted by the
// simulator (its recorder, `botctl sim --record`). Both clocks are this
// machine's, except a skewed node's (clock-skew): a write stamped more
// than skewSlack away from when the watcher saw it is timed by the
// watcher instead.
const skewSlack = 30 * time.Second

// outputWatch keeps the write times of every output text it saw (by
// content hash: a demo answer's text names its question, so equal hashes
// are the same answer at the same length). The demo answers the same
// question with the same text, so a task's next attempt (its worker
// killed) writes texts its first attempt wrote: a frame is timed from
// the latest write of its text before it was shown.
type outputWatch struct {
	mu   sync.Mutex
	at   map[string][]time.Time
	stop func()
}

// watchOutputs watches the progress and output buckets over its own connection to
// every NATS server of the cluster (not through any node's fault proxy;
// it reconnects to another server when one freezes or dies).
func watchOutputs(urls string) (*outputWatch, error) {
	nc, err := nats.Connect(urls, nats.Name("chaos output watcher"), nats.MaxReconnects(-1),
		nats.PingInterval(2*time.Second), nats.MaxPingsOutstanding(2), nats.ReconnectWait(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := &outputWatch{at: map[string][]time.Time{}}
	var watchers []natsjs.KeyWatcher
	var wg sync.WaitGroup
	o.stop = func() {
		for _, w := range watchers {
			w.Stop()
		}
		wg.Wait()
		nc.Close()
	}
	// A running attempt writes its text to the progress bucket, its
	// last write to the output bucket.
	for _, bucket := range []string{"BOTCTL_PROGRESS", "BOTCTL_OUTPUT"} {
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			o.stop()
			return nil, fmt.Errorf("bucket %s: %w", bucket, err)
		}
		w, err := kv.WatchAll(context.Background(), natsjs.UpdatesOnly())
		if err != nil {
			o.stop()
			return nil, err
		}
		watchers = append(watchers, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			o.follow(w)
		}()
	}
	return o, nil
}

// follow records the write time of every text w delivers.
func (o *outputWatch) follow(w natsjs.KeyWatcher) {
	for e := range w.Updates() {
		if e == nil || e.Operation() != natsjs.KeyValuePut {
			continue
		}
		out, err := task.DecodeOutput(e.Value())
		if err != nil {
			continue
		}
		seen, at := time.Now(), out.Updated
		if d := seen.Sub(at); d > skewSlack || d < -skewSlack {
			at = seen
		}
		h := task.Hash(out.Text)
		o.mu.Lock()
		o.at[h] = append(o.at[h], at)
		o.mu.Unlock()
	}
}

func (o *outputWatch) Close() {
	if o != nil && o.stop != nil {
		o.stop()
	}
}

// lags matches frames to the writes they show: one lag per frame whose
// text is an output version (receipts, heartbeats, notes and busy
// replies match none). inFault are the lags of frames showing output
// written in [from, to), while the fault was on (from: after botctl
// worked around it); worst says which frame lagged most, and when,
// relative to the fault's start.
func (o *outputWatch) lags(ev []wecomsim.RecordedEvent, fault, from, to time.Time) (all, inFault []time.Duration, worst string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var most time.Duration
	for _, e := range ev {
		if e.Kind != wecomsim.RecordFrame || e.ContentHash == "" {
			continue
		}
		at, ok := lastBefore(o.at[e.ContentHash], e.At)
		if !ok {
			continue
		}
		d := e.At.Sub(at)
		all = append(all, d)
		if d > most {
			most = d
			worst = fmt.Sprintf("push lag max %d ms: %s %s finish=%v, written at fault%+.1fs, accepted at fault%+.1fs (fault lasted %.0fs)",
				d.Milliseconds(), e.Cmd, e.Chat, e.Finish, at.Sub(fault).Seconds(), e.At.Sub(fault).Seconds(), to.Sub(fault).Seconds())
		}
		if !at.Before(from) && at.Before(to) {
			inFault = append(inFault, d)
		}
	}
	return all, inFault, worst
}

// drainRecording returns the simulator's recorded events since the last
// drain.
func drainRecording(simHTTP string) ([]wecomsim.RecordedEvent, error) {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(simHTTP + "/control/recording?drain=1&bot_id=" + bot)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET /control/recording: %s: %s", resp.Status, b)
	}
	var r struct {
		Events []wecomsim.RecordedEvent `json:"events"`
	}
	err = json.NewDecoder(resp.Body).Decode(&r)
	return r.Events, err
}

// lastBefore is the latest of ts not after t. When every write is after
// t (stamped by a clock a little ahead of the simulator's) it is t: the
// frame showed the text as soon as it was written. False: ts is empty.
func lastBefore(ts []time.Time, t time.Time) (time.Time, bool) {
	if len(ts) == 0 {
		return time.Time{}, false
	}
	var best time.Time
	for _, x := range ts {
		if !x.After(t) && x.After(best) {
			best = x
		}
	}
	if best.IsZero() {
		return t, true
	}
	return best, true
}
