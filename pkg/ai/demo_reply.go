package ai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"
)

// The demo backend's rich replies, so that serve --demo shows them end to
// end: a question containing "image" gets a small generated PNG on the
// answer's final frame, "card" a template card with two buttons (a click
// is answered with the card updated), "file" an uploaded text file.
// Matched as words, case-insensitively (docs/ai.md, "demo").

// DemoReply is the reply the demo backend sends with its answer to
// question (empty when none of the trigger words is in it).
func DemoReply(question string) Reply {
	var r Reply
	words := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(question), func(r rune) bool {
		return !(r >= 'a' && r <= 'z')
	}) {
		words[w] = true
	}
	if words["image"] || words["picture"] {
		r.Images = append(r.Images, ReplyFile{Name: "demo.png", MIME: "image/png", Data: DemoPNG(question)})
	}
	if words["card"] {
		r.Card = demoCard(question)
	}
	if words["file"] {
		r.Files = append(r.Files, ReplyFile{Kind: "file", Name: "demo.txt", MIME: "text/plain",
			Data: []byte(DemoAnswer(question, 1, 0))})
	}
	return r
}

// DemoPNG is a small PNG (64×64, a gradient coloured by the question).
func DemoPNG(question string) []byte {
	seed := byte(len(question) * 37)
	img := image.NewRGBA(image.Rect(0, 0, 64, 64))
	for y := range 64 {
		for x := range 64 {
			img.Set(x, y, color.RGBA{R: byte(x * 4), G: byte(y * 4), B: seed, A: 255})
		}
	}
	var b bytes.Buffer
	_ = png.Encode(&b, img) // an in-memory RGBA image always encodes
	return b.Bytes()
}

// Event keys of the demo card's buttons.
const (
	DemoCardYes = "demo_yes"
	DemoCardNo  = "demo_no"
)

func demoCard(question string) json.RawMessage {
	card := map[string]any{
		"card_type":  "button_interaction",
		"main_title": map[string]string{"title": "Was this answer useful?", "desc": clipRunes(question, 40)},
		"button_list": []map[string]any{
			{"text": "Yes", "style": 1, "key": DemoCardYes},
			{"text": "No", "style": 2, "key": DemoCardNo},
		},
	}
	raw, _ := json.Marshal(card)
	return raw
}

// CardEvent answers a click on the demo card: the card again, its
// buttons replaced by what was chosen.
func (b *demoBackend) CardEvent(ctx context.Context, ev CardEvent) (json.RawMessage, error) {
	choice := map[string]string{DemoCardYes: "Yes", DemoCardNo: "No"}[ev.EventKey]
	if choice == "" {
		return nil, fmt.Errorf("%w: demo card: unknown event_key %q", ErrBadRequest, ev.EventKey)
	}
	card := map[string]any{
		"card_type":  "button_interaction",
		"main_title": map[string]string{"title": "Was this answer useful?", "desc": "You chose: " + choice},
		"button_list": []map[string]any{
			{"text": "Thanks: " + choice, "style": 1, "key": ev.EventKey},
		},
		"replace_text": "You chose: " + choice,
	}
	return json.Marshal(card)
}

func clipRunes(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
