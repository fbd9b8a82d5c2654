package pusher

// The rich part of an answer (task.Reply): images on the final frame,
// files uploaded and pushed, the card with the final frame or pushed.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/botctl/botctl/pkg/pace"
	"github.com/botctl/botctl/pkg/task"
	"github.com/botctl/botctl/pkg/wecom"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// UploadBudget is WeCom's cap on a bot's uploads: 30 a minute and 1,000
// an hour (docs/wecom-protocol.md, "Quotas").
func UploadBudget(now func() time.Time) *pace.Budget {
	return pace.New(30, time.Minute, now).AndAtMost(1000, time.Hour)
}

// frameRoom is what a final frame leaves for its envelope (headers, the
// items' JSON): the frame's text, images and card must fit in the rest.
const frameRoom = 64 << 10

// finalFrame is the final frame of r's answer whose sequence is seq: its
// first text part, then as many of the images as fit one frame (all or
// none: msg_item is one list), and the card when the images all fit.
// carried is how many items of seq the frame carries. An error is the
// media store failing (the step is tried again); an image gone from it
// is not carried (the push sends what it finds).
func (p *Pusher) finalFrame(ctx context.Context, r *task.Record, first string, seq []task.Item, reply *task.Reply) (body *wecom.RespondBody, carried int, err error) {
	s := wecom.Stream{ID: r.StreamID, Content: first, Finish: true}
	body = &wecom.RespondBody{MsgType: wecom.MsgTypeStream, Stream: &s}
	carried = 1
	if reply == nil {
		return body, carried, nil
	}
	room := wecom.MaxFrameBytes - frameRoom - 6*len(first) - len(reply.Card) // 6: the worst escaping of text
	var images [][]byte
	for _, it := range seq[1:] {
		if it.Kind != task.ItemImage {
			break
		}
		room -= (int(it.Object.Size)+2)/3*4 + 100
		if room < 0 {
			return body, 1, nil // too large for one frame: pushed
		}
		data, err := p.object(ctx, it.Object)
		if errors.Is(err, natsjs.ErrObjectNotFound) {
			return body, 1, nil
		}
		if err != nil {
			return nil, 0, err
		}
		images = append(images, data)
	}
	s.MsgItem = wecom.ReplyImages(images...)
	carried += len(images)
	if carried < len(seq) && seq[carried].Kind == task.ItemCard {
		body.MsgType, body.TemplateCard = wecom.MsgTypeStreamWithTemplateCard, reply.Card
		carried++
	}
	return body, carried, nil
}

// object reads a stored image or file of a reply.
func (p *Pusher) object(ctx context.Context, o *task.ReplyObject) ([]byte, error) {
	data, err := p.store.Media().GetBytes(ctx, o.Key)
	if err != nil {
		return nil, fmt.Errorf("read %s %q (%s): %w", o.Kind, o.Name, o.Key, err)
	}
	return data, nil
}

// pushItem sends one item of an answer's sequence by push: a text part
// as markdown, an image or file uploaded then sent, the card. wait > 0:
// nothing was sent, the bot's upload cap is full for that long. An
// object gone from the media store (past media.ttl) is sent as a line
// saying so, not skipped silently.
func (p *Pusher) pushItem(ctx context.Context, r *task.Record, chatType int, it task.Item, reply *task.Reply) (wait time.Duration, err error) {
	switch it.Kind {
	case task.ItemText:
		if it.Text == "" { // an answer of images or files alone: nothing to say
			p.cfg.Budget.Refund(r.Chat)
			return 0, nil
		}
		return 0, p.cfg.Conn.SendMarkdown(ctx, r.Chat, chatType, it.Text)
	case task.ItemCard:
		return 0, p.cfg.Conn.SendTemplateCard(ctx, r.Chat, chatType, reply.Card)
	}
	// The upload's budget first, then the object's read: a bot at its
	// upload cap holds no object it cannot send in memory.
	o := it.Object
	if w, ok := p.cfg.Uploads.Spend(p.cfg.Bot, 0); !ok {
		p.count(func(s *Stats) { s.Throttled++ })
		return max(w, p.cfg.ScanInterval), nil
	}
	data, err := p.object(ctx, o)
	if errors.Is(err, natsjs.ErrObjectNotFound) {
		p.cfg.Uploads.Refund(p.cfg.Bot) // nothing uploaded
		p.log.Warn().Str("task", r.ID).Str("key", o.Key).Msg("a reply's file is no longer stored; the user is told")
		return 0, p.cfg.Conn.SendMarkdown(ctx, r.Chat, chatType, fmt.Sprintf("（%s 已过期，未能发送。）", o.Name))
	}
	if err != nil {
		p.cfg.Uploads.Refund(p.cfg.Bot)
		p.storeError("media_read", err)
		return time.Second, nil
	}
	kind := o.Kind
	if it.Kind == task.ItemImage {
		kind = wecom.MsgTypeImage
	}
	id, err := p.cfg.Conn.Upload(ctx, kind, o.Name, data)
	switch {
	case quotaRefused(err):
		// WeCom counted more uploads than the budget did (another
		// term's): the bot's upload rate is lowered, the item waits.
		p.cfg.Uploads.Refused(p.cfg.Bot)
		p.log.Warn().Err(err).Str("task", r.ID).Msg("WeCom refused an upload for the bot's upload cap; its upload budget is lowered")
		return max(p.cfg.Uploads.Free(p.cfg.Bot).Sub(p.cfg.Now()), p.cfg.ScanInterval), nil
	case err != nil:
		if refused(err) {
			p.cfg.Uploads.Refund(p.cfg.Bot)
		}
		return 0, fmt.Errorf("upload %s %q: %w", kind, o.Name, err)
	}
	p.count(func(s *Stats) { s.Uploads++ })
	return 0, p.cfg.Conn.SendMedia(ctx, r.Chat, chatType, kind, id)
}

// dropMedia deletes r's files (the user's) and reply's images and files
// from the media store, once r's delivery is final: the store holds the
// files of tasks in flight, not a day of them. media.ttl removes what
// this misses (a failed delete, a leader gone between the delivery and
// this, an earlier attempt's reply). A task retried or redelivered by an
// operator afterwards finds its files gone, as after media.ttl: its run
// fails saying so, a reply's file is sent as a line saying it expired.
func (p *Pusher) dropMedia(ctx context.Context, r *task.Record, reply *task.Reply) {
	var keys []string
	for _, a := range r.Attachments {
		keys = append(keys, a.Key)
	}
	if reply != nil {
		for _, o := range slices.Concat(reply.Images, reply.Files) {
			keys = append(keys, o.Key)
		}
	}
	if len(keys) == 0 {
		return
	}
	if err := p.store.DeleteMedia(ctx, keys...); err != nil {
		p.storeError("media_delete", err)
		p.log.Info().Err(err).Str("task", r.ID).Msg("a delivered task's files not all deleted; media.ttl removes them")
	}
}
