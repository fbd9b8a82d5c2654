package worker

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/ai"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// storeReply checks the rich reply a backend sent (ai.Reply) against
// WeCom's limits and stores its images' and files' bytes in the media
// store under the attempt's keys (task.ReplyKey). It returns what the
// output carries (nil: nothing to send), and a note for the user naming
// what was left out: a reply WeCom would refuse is never sent broken,
// and what is valid in it is still sent. An image or file the media store
// refuses for its bound (media.max_store_bytes) is left out with a note:
// the text is still delivered. An error is the store failing otherwise:
// another try may succeed.
func (w *Worker) storeReply(ctx context.Context, m task.Message, attempt int, r ai.Reply) (_ *task.Reply, _ string, err error) {
	if r.Empty() {
		return nil, "", nil
	}
	var out task.Reply
	var left []string
	n := 0
	var stored []string
	defer func() {
		if err != nil { // what this call stored is no one's
			w.buckets.DeleteMedia(context.WithoutCancel(ctx), stored...)
		}
	}()
	put := func(kind, name, mime string, data []byte) (task.ReplyObject, error) {
		key := task.ReplyKey(m.TaskID, attempt, n)
		n++
		stored = append(stored, key)
		sum := md5.Sum(data)
		meta := natsjs.ObjectMeta{Name: key, Description: kind + " " + name}
		if _, err := w.buckets.Media().Put(ctx, meta, bytes.NewReader(data)); err != nil {
			// A refused put may leave the object's name behind
			// (nats.go publishes it beside the bytes).
			w.buckets.DeleteMedia(ctx, key)
			if jetstream.MediaFull(err) {
				return task.ReplyObject{}, errMediaFull
			}
			return task.ReplyObject{}, fmt.Errorf("store reply %s %q of task %s: %w", kind, name, m.TaskID, err)
		}
		return task.ReplyObject{Kind: kind, Name: name, MIME: mime, Size: int64(len(data)), MD5: hex.EncodeToString(sum[:]), Key: key}, nil
	}
	for i, img := range r.Images {
		name := replyName(img, "image", i)
		if i >= ai.MaxReplyImages {
			left = append(left, fmt.Sprintf("图片最多 %d 张，其余 %d 张未发送", ai.MaxReplyImages, len(r.Images)-ai.MaxReplyImages))
			break
		}
		data, err := img.ReplyBytes()
		if err != nil {
			left = append(left, fmt.Sprintf("图片 %s 无法读取", name))
			continue
		}
		mime, err := ai.CheckReplyImage(name, data)
		if err != nil {
			w.log.Warn().Str("task", m.TaskID).Err(err).Msg("reply image left out")
			if len(data) > ai.MaxReplyImageBytes {
				left = append(left, fmt.Sprintf("图片 %s 超过 10 MB", name))
			} else {
				left = append(left, fmt.Sprintf("图片 %s 不是 JPG 或 PNG 格式", name))
			}
			continue
		}
		obj, err := put(task.ItemImage, name, mime, data)
		if errors.Is(err, errMediaFull) {
			left = append(left, fmt.Sprintf("图片 %s 未能保存（存储空间已满）", name))
			continue
		}
		if err != nil {
			return nil, "", err
		}
		out.Images = append(out.Images, obj)
	}
	for i, f := range r.Files {
		name := replyName(f, "file", i)
		if i >= ai.MaxReplyFiles {
			left = append(left, fmt.Sprintf("文件最多 %d 个，其余 %d 个未发送", ai.MaxReplyFiles, len(r.Files)-ai.MaxReplyFiles))
			break
		}
		kind, err := f.FileKind()
		if err != nil {
			w.log.Warn().Str("task", m.TaskID).Err(err).Msg("reply file left out")
			left = append(left, fmt.Sprintf("文件 %s 的类型无效", name))
			continue
		}
		data, err := f.ReplyBytes()
		switch {
		case err != nil || len(data) == 0:
			left = append(left, fmt.Sprintf("文件 %s 无法读取", name))
			continue
		case len(data) > ai.MaxReplyFileBytes:
			left = append(left, fmt.Sprintf("文件 %s 超过 50 MB", name))
			continue
		}
		mime := f.MIME
		if mime == "" {
			mime = http.DetectContentType(data)
		}
		obj, err := put(kind, name, mime, data)
		if errors.Is(err, errMediaFull) {
			left = append(left, fmt.Sprintf("文件 %s 未能保存（存储空间已满）", name))
			continue
		}
		if err != nil {
			return nil, "", err
		}
		out.Files = append(out.Files, obj)
	}
	if card, err := ai.CheckCard(r.Card); err != nil {
		w.log.Warn().Str("task", m.TaskID).Err(err).Msg("reply card left out")
		left = append(left, "卡片格式无效")
	} else if card != nil {
		out.Card, err = withCardTaskID(card, m.TaskID)
		if err != nil {
			left = append(left, "卡片格式无效")
		}
	}
	note := ""
	if len(left) > 0 {
		note = "（部分内容未能发送：" + strings.Join(left, "；") + "。）"
	}
	if len(out.Images) == 0 && len(out.Files) == 0 && len(out.Card) == 0 {
		return nil, note, nil
	}
	return &out, note, nil
}

// dropReply deletes the objects of reply, stored by an attempt that will
// not be delivered (its answer not stored, the attempt superseded, the
// task finished otherwise meanwhile): the next attempt stores its own,
// under its own keys. Never for an attempt whose Finish may have been
// recorded. Best effort: media.ttl removes what this misses.
func (w *Worker) dropReply(ctx context.Context, id string, reply *task.Reply) {
	if reply == nil {
		return
	}
	var keys []string
	for _, o := range slices.Concat(reply.Images, reply.Files) {
		keys = append(keys, o.Key)
	}
	if err := w.buckets.DeleteMedia(ctx, keys...); err != nil {
		w.log.Info().Err(err).Str("task", id).Msg("an undelivered attempt's reply files not all deleted; media.ttl removes them")
	}
}

// errMediaFull: the media store refused a reply's object for its bound.
var errMediaFull = errors.New("media store full")

// replyName is f's name, or a made-up one ("image-1").
func replyName(f ai.ReplyFile, kind string, i int) string {
	if f.Name != "" {
		return f.Name
	}
	return fmt.Sprintf("%s-%d", kind, i+1)
}

// withCardTaskID is card with its task_id botctl's (task.CardTaskID), so
// that a click on it names the task.
func withCardTaskID(card json.RawMessage, id string) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(card, &obj); err != nil {
		return nil, err
	}
	var own string
	if raw, ok := obj["task_id"]; ok {
		_ = json.Unmarshal(raw, &own)
	}
	tid, _ := json.Marshal(task.CardTaskID(id, own))
	obj["task_id"] = tid
	return json.Marshal(obj)
}
