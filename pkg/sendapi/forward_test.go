package sendapi

import "testing"

// The forward carries the token only where it cannot be read off the
// network: https, or http to this machine.
func TestSendForwardsTheTokenOnlyOverHTTPSOrLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"https://10.0.0.11:8401": true,
		"http://127.0.0.1:8401":  true,
		"http://[::1]:8401":      true,
		"http://localhost:8401":  true,
		"http://10.0.0.11:8401":  false,
		"10.0.0.11:8401":         false,
		"":                       false,
	} {
		if got := tokenSafe(addr); got != want {
			t.Errorf("tokenSafe(%q) = %v, want %v", addr, got, want)
		}
	}
}
