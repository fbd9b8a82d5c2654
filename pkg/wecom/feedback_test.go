package wecom

import (
	"errors"
	"strings"
	"testing"
)

// A stream's feedback.id is 1 to 256 bytes of UTF-8 (the official SDK's
// ReplyFeedback); the client refuses another before sending.
func TestCheckStreamFeedbackID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"t_0123456789abcdef01234567", true},
		{strings.Repeat("x", MaxFeedbackIDBytes), true},
		{strings.Repeat("x", MaxFeedbackIDBytes+1), false},
		{"", false},
		{"\xff", false},
	} {
		err := CheckStream(&Stream{ID: "s1", Content: "hi", Feedback: &Feedback{ID: tc.id}})
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidFrame)) {
			t.Errorf("feedback.id of %d bytes: %v", len(tc.id), err)
		}
	}
}
