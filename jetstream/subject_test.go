package jetstream

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

// subjectTokenRE is what we promise a token is: no '.', '*', '>' or
// whitespace, and valid in a KV key.
var subjectTokenRE = regexp.MustCompile(`^[-_=A-Za-z0-9]+$`)

func TestTokensRoundTrip(t *testing.T) {
	ids := []string{
		"", "alice", "Alice_Smith-2", "wx.user", "a b", "*", ">", "a.*.>", "=", "=abc",
		"wrABCDEF.group", "用户", "tab\there", "\x00\xff", strings.Repeat("x.", 200),
	}
	seen := map[string]string{}
	for _, id := range ids {
		tok := EncodeToken(id)
		if !subjectTokenRE.MatchString(tok) {
			t.Errorf("EncodeToken(%q) = %q: not subject- and key-safe", id, tok)
		}
		if other, dup := seen[tok]; dup {
			t.Errorf("EncodeToken(%q) = EncodeToken(%q) = %q", id, other, tok)
		}
		seen[tok] = id
		back, err := DecodeToken(tok)
		if err != nil || back != id {
			t.Errorf("DecodeToken(EncodeToken(%q)) = %q, %v", id, back, err)
		}
	}
	if EncodeToken("alice") != "alice" {
		t.Error("a safe id should read as itself")
	}
}

func TestTaskSubjectRoundTrip(t *testing.T) {
	n := NamesFor("")
	for _, c := range [][2]string{{"bot", "alice"}, {"b.o.t", "wr 1>*"}, {"", ""}, {"=x", "=y"}} {
		subj := n.TaskSubject(c[0], c[1])
		if strings.Count(subj, ".") != 3 || !strings.HasPrefix(subj, "botctl.tasks.") {
			t.Errorf("TaskSubject(%q, %q) = %q: want botctl.tasks.<bot>.<conversation>", c[0], c[1], subj)
		}
		bot, conv, err := n.ParseTaskSubject(subj)
		if err != nil || bot != c[0] || conv != c[1] {
			t.Errorf("ParseTaskSubject(%q) = %q, %q, %v; want %q, %q", subj, bot, conv, err, c[0], c[1])
		}
	}
	for _, bad := range []string{"other.tasks.a.b", "botctl.tasks.a", "botctl.tasks.a.b.c", "botctl.tasks.a.b c", "botctl.tasks.=!!.b"} {
		if _, _, err := n.ParseTaskSubject(bad); err == nil {
			t.Errorf("ParseTaskSubject(%q) succeeded, want an error", bad)
		}
	}
	if _, err := DecodeToken("a b"); !errors.Is(err, ErrBadToken) {
		t.Errorf("DecodeToken(\"a b\") = %v, want ErrBadToken", err)
	}
}

func FuzzTokens(f *testing.F) {
	f.Add("wx.user *>")
	f.Fuzz(func(t *testing.T, id string) {
		tok := EncodeToken(id)
		if !subjectTokenRE.MatchString(tok) {
			t.Fatalf("EncodeToken(%q) = %q", id, tok)
		}
		back, err := DecodeToken(tok)
		if err != nil || back != id {
			t.Fatalf("round trip of %q: %q, %v", id, back, err)
		}
	})
}
