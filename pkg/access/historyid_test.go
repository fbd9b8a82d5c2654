package access

import (
	"context"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/wecom"
	"github.com/rs/zerolog"
)

// A text callback this node has read is Known under the id WeCom's
// history gives it (as the gap backfill computes it from a history
// message's chat, user, send time and text) from the moment it is read,
// before its handler marks it: a backfill on this node does not answer a
// message still in hand a second time. A single chat's history is the
// user's; a group's, the chat id's.
func TestReadCallbackIsKnownUnderItsHistoryID(t *testing.T) {
	a, err := New(Config{NodeID: "n1", Dispatch: noDispatch{}, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Date(2026, 12, 7, 17, 57, 20, 0, time.UTC)
	for _, c := range []struct {
		m              wecom.MsgCallback
		chatType, chat string
	}{
		{wecom.MsgCallback{MsgID: "m1", ChatType: wecom.ChatSingle, From: wecom.From{UserID: "u1"}, CreateTime: sent.Unix(),
			MsgType: wecom.MsgTypeText, Text: &wecom.TextContent{Content: "q #14"}}, wecom.ChatSingle, "u1"},
		{wecom.MsgCallback{MsgID: "m2", ChatType: wecom.ChatGroup, ChatID: "g1", From: wecom.From{UserID: "u2"}, CreateTime: sent.Unix(),
			MsgType: wecom.MsgTypeText, Text: &wecom.TextContent{Content: "q #15"}}, wecom.ChatGroup, "g1"},
	} {
		id := backfill.HistoryMsgID("b1", c.chatType, c.chat, c.m.From.UserID, sent.In(time.FixedZone("CST", 8*3600)), wecom.MsgTypeText, c.m.Text.Content)
		if known, _ := a.Known(context.Background(), "b1", id); known {
			t.Fatalf("%s known before it was read", c.m.MsgID)
		}
		a.remember("b1", &c.m)
		if known, err := a.Known(context.Background(), "b1", id); !known {
			t.Errorf("%s read, not known under its history id %s (%v)", c.m.MsgID, id, err)
		}
	}
}
