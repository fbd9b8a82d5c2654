package task

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// Reply is the rich part of an answer (ai.Reply) as stored with the
// attempt's output: its images' and files' bytes are objects of the media
// store (jetstream.Store.Media, named ReplyKey), so that a new leader's
// pusher sends them as the old one would have.
//
// The pusher sends an answer as one sequence (Sequence): its first text
// part, the images, the card, the other text parts, the files. A final
// frame carries a prefix of it (the first part, and the images and card
// when they fit); what is pushed continues from the record's PushedParts,
// an index into the same sequence, so that nothing is sent twice or
// skipped across a failover.
type Reply struct {
	Images []ReplyObject `json:"images,omitempty"`
	Files  []ReplyObject `json:"files,omitempty"`
	// Card is a template card's JSON object, its task_id botctl's
	// (CardTaskID): a click on it names the task.
	Card json.RawMessage `json:"card,omitempty"`
}

// ReplyObject is one stored image or file of a Reply.
type ReplyObject struct {
	Kind string `json:"kind"` // "image", "file", "voice" or "video"
	Name string `json:"name,omitempty"`
	MIME string `json:"mime,omitempty"`
	Size int64  `json:"size"`
	MD5  string `json:"md5"` // hex, of the bytes
	Key  string `json:"key"` // in the media store
}

// ReplyKey names the n-th object of the reply of task id's attempt.
func ReplyKey(id string, attempt, n int) string {
	return "reply/" + id + "/" + strconv.Itoa(attempt) + "/" + strconv.Itoa(n)
}

// CardTaskID is the task_id botctl gives the card of task id's reply:
// the task's id, then '@' and the backend's own task_id when it gave one.
// WeCom allows letters, digits, '_', '-' and '@', at most 128 bytes, and
// wants it unique per bot: the task's id makes it so.
func CardTaskID(id, own string) string {
	if own == "" {
		return id
	}
	return id + "@" + own
}

// SplitCardTaskID is CardTaskID's inverse: the task's id and the
// backend's own task_id ("" when none).
func SplitCardTaskID(cardTaskID string) (id, own string) {
	id, own, _ = strings.Cut(cardTaskID, "@")
	return id, own
}

// Item kinds of an answer's sequence.
const (
	ItemText  = "text"
	ItemImage = "image"
	ItemCard  = "card"
	ItemFile  = "file"
)

// Item is one send of an answer's sequence: a text part (Text), an image
// or file (Object), or the card.
type Item struct {
	Kind   string
	Text   string
	Object *ReplyObject
}

// Sequence is the order an answer whose text is split in parts is sent
// in, with reply (nil: text only): parts[0], the images, the card,
// parts[1:], the files.
func Sequence(parts []string, reply *Reply) []Item {
	items := make([]Item, 0, len(parts)+8)
	if len(parts) > 0 {
		items = append(items, Item{Kind: ItemText, Text: parts[0]})
	}
	if reply != nil {
		for i := range reply.Images {
			items = append(items, Item{Kind: ItemImage, Object: &reply.Images[i]})
		}
		if len(reply.Card) > 0 {
			items = append(items, Item{Kind: ItemCard})
		}
	}
	for _, p := range slices.Clone(parts[min(1, len(parts)):]) {
		items = append(items, Item{Kind: ItemText, Text: p})
	}
	if reply != nil {
		for i := range reply.Files {
			items = append(items, Item{Kind: ItemFile, Object: &reply.Files[i]})
		}
	}
	return items
}
