package access

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/botctl/botctl/jetstream"
	"github.com/botctl/botctl/pkg/task"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// command runs a slash command and returns the reply.
func (a *Access) command(ctx context.Context, js *bound, r *Rules, bot, chat, text string) string {
	name := strings.Fields(text)[0]
	// Its own wait: the handling's may be spent on the task bucket's
	// dedupe read already (a failing bucket answers nothing), and /stop
	// must still free the conversation.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.Timeout)
	defer cancel()
	switch name {
	case "/help":
		return r.Texts.Help
	case "/new":
		if err := js.store.Context().Purge(ctx, jetstream.ConversationKey(bot, chat)); err != nil {
			return "清除上下文失败，请稍后再试。"
		}
		return "好的，已开始新的对话。"
	case "/stop":
		// The conversation's queue message is its task, record or not:
		// Stop cancels it and frees the conversation even when the record
		// cannot be written.
		rel, err := js.lc.Stop(ctx, bot, chat, "/stop by the user")
		switch {
		case err != nil:
			return "停止失败，请稍后再试。"
		case rel.Ended():
			return "已停止当前任务。"
		}
		switch r := a.lastUndelivered(ctx, js, bot, chat); {
		case r == nil:
			return "当前没有正在进行的任务。"
		case r.Receiving():
			return "上一条消息的文件还在接收中，接收完成后即开始回答；届时可再发送 /stop 停止。"
		default:
			return "上一个问题的回答已经生成，正在发送中，无法停止。"
		}
	case "/status":
		r, err := a.current(ctx, js, bot, chat)
		if err == nil && r != nil {
			return fmt.Sprintf("当前任务：%s\n状态：%s（第 %d 次尝试）\n已进行：%s",
				truncate(r.Question, 60), r.Exec, max(r.Attempt, 1), a.cfg.Now().Sub(r.Received).Round(time.Second))
		}
		switch r := a.lastUndelivered(ctx, js, bot, chat); {
		case r == nil:
			return "当前没有正在进行的任务。"
		case r.Receiving():
			return fmt.Sprintf("当前任务：%s\n状态：正在接收文件\n已进行：%s", truncate(r.Question, 60), a.cfg.Now().Sub(r.Received).Round(time.Second))
		default:
			return fmt.Sprintf("当前任务：%s\n状态：回答已生成（%s），正在发送\n已进行：%s", truncate(r.Question, 60), r.Exec, a.cfg.Now().Sub(r.Received).Round(time.Second))
		}
	}
	return fmt.Sprintf("未知命令 %s。发送 /help 查看可用命令。", name)
}

// current is the conversation's task in the queue (queued or running).
func (a *Access) current(ctx context.Context, js *bound, bot, chat string) (*task.Record, error) {
	msg, err := js.store.TaskStream().GetLastMsgForSubject(ctx, js.store.TaskSubject(bot, chat))
	if err != nil {
		return nil, err
	}
	m, err := decodeMessage(msg.Data)
	if err != nil {
		return nil, err
	}
	r, _, err := task.Get(ctx, js.store.Tasks(), m.TaskID)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return task.RecordOf(m), nil
	}
	return r, err
}

// maxUndeliveredScan bounds the records lastUndelivered reads.
const maxUndeliveredScan = 256

// lastUndelivered is the conversation's latest task that is out of the
// queue but not yet delivered in full (its files still being received,
// or its answer complete and still being sent), nil if none or if the
// index cannot be read. It reads at most maxUndeliveredScan of the bot's
// undelivered records.
func (a *Access) lastUndelivered(ctx context.Context, js *bound, bot, chat string) *task.Record {
	ids, err := js.store.UndeliveredTasks(ctx, bot)
	if err != nil {
		return nil
	}
	var last *task.Record
	for i, id := range ids {
		if i == maxUndeliveredScan {
			break
		}
		r, _, err := task.Get(ctx, js.store.Tasks(), id)
		if err != nil || r.Chat != chat || r.Delivery.Finished() || !r.Receiving() && !r.Exec.Finished() {
			continue
		}
		if last == nil || r.Received.After(last.Received) {
			last = r
		}
	}
	return last
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}
