package pusher

// The output watch and the watermark: the bucket's changes feed the
// active set, and the watermark says where a new term resumes.

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/pause"
	"github.com/botctl/botctl/pkg/schema"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Watermark is the pusher's persisted position in the output bucket, per
// bot: every output event at or below OutputRev belongs to a task that is
// finished with (delivered or failed). A new term's watch resumes after it.
// It is written after the work it covers is done, never before.
type Watermark struct {
	OutputRev uint64    `json:"output_rev"`
	Node      string    `json:"node"`
	TermRev   int64     `json:"term"` // the revision of the term that wrote it (Config.TermRev)
	Updated   time.Time `json:"updated"`
}

// watchFrom fixes where the term's output watch begins, before the
// rebuild and the first step read anything: after the watermark, or on a
// bucket with none at the bucket's first revision. Every output written
// after it reaches the watch however late the watch's consumer is made,
// and nothing of a task not delivered is before it (Watermark), so the
// watch hides nothing the first steps would have to read: the first step
// of a running task with nothing watched waits for the watch (unwritten).
// A watch that began "from now" when its consumer was made lost the
// output written in between; one that began at the bucket's last
// revision lost what the bucket held (a task dispatched, and its worker's
// text written, before the pusher's start), and a task whose step had
// read the record waited for refreshEvery (30 s) to show it.
//
// The watched bucket is the progress bucket (memory storage): its
// revisions begin again when all its servers restart at once, and a
// watermark written before (or one of the output bucket, which botctl
// watched before it kept answers in progress apart) can be past its last
// revision. Such a watermark is not used: the watch begins at the
// bucket's first revision, as on a bucket with none. The bucket holds at
// most one text per task (its last), for jetstream.ProgressTTL: a watch
// from its start, at a bot's first term or after such a restart, costs a
// delivery per answer in progress, other bots' skipped.
func (p *Pusher) watchFrom(ctx context.Context) (from uint64) {
	wm, haveWM := p.loadWatermark(ctx)
	if !haveWM {
		return 0
	}
	if last, ok := p.progressEnd(ctx); ok && wm > last {
		return 0
	}
	return wm
}

// progressEnd is the progress bucket's last revision; ok is false when
// it cannot be read.
func (p *Pusher) progressEnd(ctx context.Context) (last uint64, ok bool) {
	st, err := p.store.Progress().Status(ctx)
	if err != nil {
		p.storeError("output_status", err)
		return 0, false
	}
	if bs, ok := st.(*natsjs.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
		return bs.StreamInfo().State.LastSeq, true
	}
	return 0, false
}

// watch follows the progress bucket from revision from+1: new output for the bot's tasks wakes the
// scan at once instead of at the next tick. (A finished attempt's answer
// is in the output bucket, which is read, not watched: one read per
// answer, against a delivery per version.) The scan alone is enough for
// correctness (the records are the truth); the watch is for latency.
func (p *Pusher) watch(ctx context.Context, from uint64) {
	p.mu.Lock()
	p.lastRev, p.savedWM = from, from
	p.mu.Unlock()
	if p.watchHold != nil {
		select {
		case <-p.watchHold:
		case <-ctx.Done():
		}
	}
	for ctx.Err() == nil {
		p.mu.Lock()
		from = p.lastRev
		p.mu.Unlock()
		last, ok := p.progressEnd(ctx)
		if !ok && from > 0 {
			// Whether from is past the bucket's end cannot be told: not
			// watched blind. After every NATS server restarted at once
			// the connection is back before the bucket's stream has a
			// leader again, and comes back empty, its revisions begun
			// again: a watch resumed after from then waited, silent,
			// until as many writes had passed (progress frames only at
			// each heartbeat or record refresh, 20-30 s apart).
			pause.For(ctx, time.Second)
			continue
		}
		if ok && last < from {
			// The bucket began again (watchFrom): follow it from its
			// first revision, all it holds. The first events seen of
			// the active tasks were the old bucket's: each task's next
			// one is its first here (saveWatermark).
			from = 0
			p.mu.Lock()
			p.lastRev, p.savedWM = 0, 0
			for _, en := range p.active {
				en.firstRev = 0
			}
			p.mu.Unlock()
		}
		opt := natsjs.ResumeFromRevision(from + 1)
		// A reconnect (rewatch) ends this watch: its consumer may be on
		// the server the connection left (reconnect.go).
		wctx, stop := context.WithCancel(ctx)
		go func() {
			select {
			case <-p.in.rewatch:
				stop()
			case <-wctx.Done():
			}
		}()
		// The watch is made under a context that ends only once it is
		// stopped (its making is bounded by nats.go's API timeout, 5 s),
		// and wctx's end stops it. Made under wctx, a watch whose
		// context ended while it was being made was unsubscribed by
		// nats.go before the handler that closes its channel was set:
		// the channel never closed, the range below waited for ever,
		// and Run with it (a term ending right after its start hung).
		mctx, unmade := context.WithCancel(context.WithoutCancel(wctx))
		w, err := p.store.Progress().WatchAll(mctx, opt)
		if err != nil {
			unmade()
			stop()
			p.storeError("output_watch", err)
			pause.For(ctx, time.Second)
			continue
		}
		stopped := context.AfterFunc(wctx, func() { w.Stop() })
		for e := range w.Updates() {
			if e == nil {
				continue // caught up with the watermark
			}
			rev := e.Revision()
			var o *task.Output
			err := errNotAPut // a deletion: an attempt's last write dropped its text in progress
			if e.Operation() == natsjs.KeyValuePut {
				o, err = task.DecodeOutput(e.Value())
			}
			if err != nil || o.Bot != p.cfg.Bot {
				p.mu.Lock()
				p.lastRev = max(p.lastRev, rev)
				p.mu.Unlock()
				continue
			}
			p.put(arrival{id: o.TaskID, from: fromWatch, rev: rev, out: o})
		}
		stopped()
		w.Stop()
		unmade()
		stop()
	}
}

var errNotAPut = errors.New("not a put")

func (p *Pusher) watermarkKey() string { return jetstream.BotKey(p.cfg.Bot) }

// loadWatermark reads the bot's watermark; ok is false when there is
// none or it cannot be read.
func (p *Pusher) loadWatermark(ctx context.Context) (rev uint64, ok bool) {
	e, err := p.store.Watermarks().Get(ctx, p.watermarkKey())
	if err != nil {
		p.storeError("watermark_read", err)
		return 0, false
	}
	var wm Watermark
	if json.Unmarshal(e.Value(), &wm) != nil {
		return 0, false
	}
	return wm.OutputRev, true
}

// saveWatermark advances the watermark to just below the first output
// event of the oldest task still being delivered (or to the last event
// seen, when none is).
func (p *Pusher) saveWatermark(ctx context.Context) {
	p.mu.Lock()
	wm := p.lastRev
	for _, en := range p.active {
		if en.firstRev > 0 && en.firstRev-1 < wm {
			wm = en.firstRev - 1
		}
	}
	advance := wm > p.savedWM
	p.mu.Unlock()
	if !advance {
		return
	}
	raw, _ := schema.Marshal(Watermark{OutputRev: wm, Node: p.cfg.NodeID, TermRev: p.cfg.TermRev, Updated: p.cfg.Now().UTC()})
	if _, err := p.store.Watermarks().Put(ctx, p.watermarkKey(), raw); err != nil {
		p.storeError("watermark_write", err)
		return
	}
	p.mu.Lock()
	p.savedWM = max(p.savedWM, wm)
	p.mu.Unlock()
}

// watchFresh: an output the watch delivered this recently is used as it
// is, without reading the bucket. While an answer streams, workers write
// about once per progress gap (3.7 s at the default budget: serve's
// outputinterval.go) and the watch delivers each write within
// milliseconds, so the copy is the latest; a copy older than this (a
// quiet answer, or a watch that fell behind or is reconnecting) is read
// again. It saves one bucket read per progress frame, on the pusher's
// hottest path. A little above the default interval: below it, a frame
// held back between two versions would read the bucket for nothing.
const watchFresh = 4 * time.Second

// current: en's output of r's attempt is the one to show. While the
// answer runs, a fresh watched copy; once it succeeded, a copy read from
// the output bucket whose hash is the recorded answer's (a step that
// read it and must wait, for the pace or a part's ack, reads it once). A
// failed or canceled answer is read. The caller holds mu.
func (p *Pusher) current(r *task.Record, en *entry) bool {
	if !r.Exec.Finished() {
		return p.cfg.Now().Sub(en.outAt) < watchFresh
	}
	return r.Exec == task.Succeeded && r.AnswerHash != "" && en.outFinal && en.outHash == r.AnswerHash
}

// unwritten: r's attempt runs, nothing of it was watched or read, and a
// step first found it so less than watchFresh ago. Its worker's first
// version comes by the watch (the coalescer writes within a gap of the
// attempt's start), so reading both buckets now finds nothing: at the
// ramp's load nine answers in ten began with that pair of reads. Past
// watchFresh without a version (a watch behind or reconnecting, a
// worker of an older version writing to the output bucket) the step
// reads as before. The caller holds mu.
func (p *Pusher) unwritten(r *task.Record, en *entry) bool {
	if r.Exec != task.Running || (en.out != nil && en.out.Attempt == r.Attempt) {
		return false
	}
	now := p.cfg.Now()
	if en.runAttempt != r.Attempt || en.runSeen.IsZero() {
		en.runAttempt, en.runSeen = r.Attempt, now
	}
	return now.Sub(en.runSeen) < watchFresh
}

// output is the freshest output of r's task: the watched copy while the
// answer streams and the copy is fresh, or once the execution is over the
// answer the record names (its AnswerHash) read before, or a read: the
// final frame shows exactly the last write.
func (p *Pusher) output(ctx context.Context, r *task.Record) *task.Output {
	id := r.ID
	p.mu.Lock()
	if en := p.active[id]; en != nil && en.out != nil && en.out.Attempt == r.Attempt && p.current(r, en) {
		o := en.out
		p.mu.Unlock()
		return o
	} else if en != nil && p.unwritten(r, en) {
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, ReadTimeout)
	o, last, err := task.ReadOutputFrom(rctx, p.store, id, r.Exec.Finished())
	cancel()
	p.storeError("output_read", err)
	if err == nil && o != nil {
		h, v, vh := p.hashes(o)
		p.mu.Lock()
		if en := p.active[id]; en != nil {
			// A finished task's copy from the progress bucket (its
			// attempt's last write not read) is read again next time.
			en.out, en.outHash, en.view, en.viewHash, en.outFinal = o, h, v, vh, r.Exec.Finished() && last
		}
		p.mu.Unlock()
		return o
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if en := p.active[id]; en != nil {
		return en.out
	}
	return nil
}
