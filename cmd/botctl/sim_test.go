package main

import (
	"io"
	"strings"
	"testing"
)

// The quota flags are validated before anything listens, naming the flag.
func TestSimQuotaFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--quota-mode", "sometimes"}, "--quota-mode"},
		{[]string{"--hourly-limit", "0"}, "--hourly-limit"},
		{[]string{"--hourly-window", "0s"}, "--hourly-window"},
	} {
		cmd := newSimCmd()
		cmd.SetArgs(append([]string{"--listen", "127.0.0.1:0"}, tc.args...))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}
