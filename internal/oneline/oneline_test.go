package oneline

import "testing"

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"hello", 5, "hello"},
		{"hello!", 5, "hello…"},
		{"two\nlines", 20, "two lines"},
		{"你好世界", 2, "你好…"},
		{"你好", 2, "你好"},
		{"", 3, ""},
	} {
		if got := Clip(tc.in, tc.n); got != tc.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
