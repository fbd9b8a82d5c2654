package wecom

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

// docBlock is the fenced block after "<!-- example: name -->" in
// docs/ai.md.
func docBlock(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile("../../docs/ai.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(raw), "<!-- example: "+name+" -->")
	if !ok {
		t.Fatalf("docs/ai.md has no example %q", name)
	}
	parts := strings.SplitN(after, "```", 3)
	if len(parts) < 3 {
		t.Fatalf("docs/ai.md's example %q has no fenced block", name)
	}
	_, body, _ := strings.Cut(parts[1], "\n") // past the fence's language
	return body
}

// The documented template_card_event, as WeCom nests it, reads as the
// click: its button, its card and the options chosen.
func TestTemplateCardEventDocExample(t *testing.T) {
	var cb EventCallback
	if err := json.Unmarshal([]byte(docBlock(t, "wecom template_card_event with choices")), &cb); err != nil {
		t.Fatal(err)
	}
	ev := cb.Event
	if ev.EventType != EventTemplateCardEvent || ev.EventKey != "book" || ev.TaskID != "t_0cb06704b74010e77c3f5633" ||
		ev.TemplateCard == nil || ev.TemplateCard.CardType != "vote_interaction" {
		t.Fatalf("event %+v", ev)
	}
	want := []Selection{{QuestionKey: "room", OptionIDs: []string{"big", "small"}}}
	if got := ev.Selections(); !reflect.DeepEqual(got, want) {
		t.Fatalf("selections %+v, want %+v", got, want)
	}
}

func TestTemplateCardEventShapes(t *testing.T) {
	for _, c := range []struct {
		name, frame string
		key, taskID string
		want        []Selection
	}{
		{"a plain button", `{"eventtype":"template_card_event","template_card_event":{"card_type":"button_interaction","event_key":"yes","task_id":"t1"}}`,
			"yes", "t1", nil},
		{"the keys at the event's top level", `{"eventtype":"template_card_event","event_key":"yes","task_id":"t1"}`, "yes", "t1", nil},
		{"questions without a key or an option left out", `{"eventtype":"template_card_event","template_card_event":{"event_key":"go","task_id":"t2",
			"selected_items":{"selected_item":[{"question_key":"","option_ids":{"option_id":["a"]}},{"question_key":"q1","option_ids":{"option_id":[]}},
			{"question_key":"q2","option_ids":{"option_id":["x","","y"]}},{"question_key":"q3"}]}}}`,
			"go", "t2", []Selection{{QuestionKey: "q2", OptionIDs: []string{"x", "y"}}}},
		{"not a click", `{"eventtype":"enter_chat"}`, "", "", nil},
	} {
		var ev Event
		if err := json.Unmarshal([]byte(c.frame), &ev); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if ev.EventKey != c.key || ev.TaskID != c.taskID || !reflect.DeepEqual(ev.Selections(), c.want) {
			t.Errorf("%s: key %q task %q selections %+v", c.name, ev.EventKey, ev.TaskID, ev.Selections())
		}
	}
	if err := json.Unmarshal([]byte(`{"eventtype": 3}`), new(Event)); err == nil {
		t.Error("an eventtype that is not a string was read")
	}
}

// NewTemplateCardEvent writes the click as WeCom does (nested only), and
// it reads back the same.
func TestNewTemplateCardEventRoundTrip(t *testing.T) {
	sel := []Selection{{QuestionKey: "room", OptionIDs: []string{"big"}}}
	raw, err := json.Marshal(NewTemplateCardEvent("vote_interaction", "book", "t1", sel))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"eventtype":"template_card_event","template_card_event":{"card_type":"vote_interaction","event_key":"book","task_id":"t1",` +
		`"selected_items":{"selected_item":[{"question_key":"room","option_ids":{"option_id":["big"]}}]}}}`
	if string(raw) != want {
		t.Fatalf("wrote %s\nwant %s", raw, want)
	}
	var ev Event
	if err := json.Unmarshal(raw, &ev); err != nil || ev.EventKey != "book" || ev.TaskID != "t1" || !reflect.DeepEqual(ev.Selections(), sel) {
		t.Fatalf("read back %+v %v", ev, err)
	}
}
