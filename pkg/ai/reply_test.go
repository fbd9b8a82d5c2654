package ai

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// The demo's trigger words, as whole words; its card is one botctl
// accepts, and a click on it is answered with the choice.
func TestDemoReplyWordsAndCard(t *testing.T) {
	if r := DemoReply("imagine a cardigan profile"); !r.Empty() {
		t.Fatalf("no trigger word, reply %+v", r)
	}
	r := DemoReply("An IMAGE, a card and a file, please")
	if len(r.Images) != 1 || len(r.Files) != 1 || r.Files[0].Kind != "file" || len(r.Card) == 0 {
		t.Fatalf("reply %+v", r)
	}
	if mt, err := CheckReplyImage("demo.png", r.Images[0].Data); err != nil || mt != "image/png" {
		t.Fatalf("demo image: %s %v", mt, err)
	}
	if _, err := CheckCard(r.Card); err != nil {
		t.Fatalf("demo card: %v", err)
	}
	card, err := newDemo(DemoConfig{}).CardEvent(context.Background(), CardEvent{EventKey: DemoCardNo})
	if err != nil || !strings.Contains(string(card), "You chose: No") {
		t.Fatalf("click answered %s %v", card, err)
	}
	if _, err := newDemo(DemoConfig{}).CardEvent(context.Background(), CardEvent{EventKey: "other"}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("unknown key: %v", err)
	}
}

// SendReply adds up into the context's sink; without one it says so.
func TestSendReplySink(t *testing.T) {
	if err := SendReply(context.Background(), Reply{}); !errors.Is(err, ErrNoReplySink) {
		t.Fatalf("no sink: %v", err)
	}
	sink := &ReplySink{}
	ctx := WithReplySink(context.Background(), sink)
	_ = SendReply(ctx, Reply{Images: []ReplyFile{{Name: "a"}}, Card: json.RawMessage(`{"card_type":"a"}`)})
	_ = SendReply(ctx, Reply{Images: []ReplyFile{{Name: "b"}}, Card: json.RawMessage(`{"card_type":"b"}`)})
	if r := sink.Reply(); len(r.Images) != 2 || string(r.Card) != `{"card_type":"b"}` {
		t.Fatalf("reply %+v", r)
	}
}

// CheckCard refuses what WeCom would: not an object, no card_type.
func TestCheckCard(t *testing.T) {
	for _, c := range []string{`[1]`, `"x"`, `{"title":"no type"}`, `{`} {
		if _, err := CheckCard(json.RawMessage(c)); err == nil {
			t.Errorf("%s accepted", c)
		}
	}
	if got, err := CheckCard(json.RawMessage(" {\"card_type\": \"text_notice\"} ")); err != nil || string(got) != `{"card_type":"text_notice"}` {
		t.Errorf("got %s %v", got, err)
	}
}

// A scoped try's reply reaches the caller only when committed.
func TestReplyScope(t *testing.T) {
	sink := &ReplySink{}
	ctx := WithReplySink(context.Background(), sink)
	failed, _ := ReplyScope(ctx)
	_ = SendReply(failed, Reply{Images: []ReplyFile{{Name: "from the failed try"}}})
	answered, commit := ReplyScope(ctx)
	_ = SendReply(answered, Reply{Images: []ReplyFile{{Name: "from the answer"}}})
	if r := sink.Reply(); !r.Empty() {
		t.Fatalf("before commit: %+v", r)
	}
	commit()
	if r := sink.Reply(); len(r.Images) != 1 || r.Images[0].Name != "from the answer" {
		t.Fatalf("after commit: %+v", r)
	}
	if c, commit := ReplyScope(context.Background()); c.Value(replySinkKey{}) != nil {
		t.Fatal("a scope without a sink made one")
	} else {
		commit()
	}
}
