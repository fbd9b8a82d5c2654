package node

import "testing"

func TestBuildNewer(t *testing.T) {
	for _, c := range []struct {
		a, b Build
		want bool
	}{
		{Build{1, "dev"}, Build{0, "0.0.0-5071c48"}, true}, // a schema version beats a release before versions
		{Build{0, "0.9.0"}, Build{1, "0.5.0"}, false},
		{Build{1, "0.6.0"}, Build{1, "0.5.3"}, true},
		{Build{1, "v0.5.10"}, Build{1, "0.5.9"}, true},
		{Build{1, "0.5.0"}, Build{1, "0.5.0"}, false},
		{Build{1, "0.5.0-rc1"}, Build{1, "0.5.0"}, false},
		{Build{1, "0.6.0 (0123456789ab)"}, Build{1, "0.5.0 (da8a82efe643)"}, true}, // as a release registers: the commit after a space
		{Build{1, "0.6.0-dev"}, Build{1, "0.5.0 (da8a82efe643)"}, true},
		{Build{1, "0.5.0 (da8a82efe643)"}, Build{1, "0.5.0 (0123456789ab)"}, false},
		{Build{1, "dev"}, Build{1, "0.5.0"}, false}, // not a release: no order
		{Build{1, "0.5.0"}, Build{1, "dev"}, false},
	} {
		if got := c.a.Newer(c.b); got != c.want {
			t.Errorf("%+v.Newer(%+v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// A standby steps back exactly when a newer node waits behind it; the
// leader never does; after the step the queue is settled.
func TestStepBack(t *testing.T) {
	old, cur := Build{0, "0.0.0-5071c48"}, Build{1, "dev"}
	builds := map[string]Build{"n1": cur, "n2": old, "n3": old}
	for _, c := range []struct {
		self  string
		queue []string
		want  bool
	}{
		{"n3", []string{"n2", "n3", "n1"}, true},  // n1 rolled and queued behind n3: n3 steps back
		{"n2", []string{"n2", "n3", "n1"}, false}, // the leader stays
		{"n3", []string{"n2", "n1", "n3"}, false}, // after the step: settled
		{"n1", []string{"n2", "n3", "n1"}, false}, // the newer node never steps back
		{"n3", []string{"n2", "n3"}, false},       // nobody newer waits
		{"n4", []string{"n2", "n4", "n1"}, false}, // own build unknown
		{"n3", []string{"n2", "n3", "n9"}, false}, // the follower's build unknown
		{"n3", []string{"n2", "n1"}, false},       // not queued
	} {
		if got := stepBack(c.self, c.queue, builds); got != c.want {
			t.Errorf("stepBack(%s, %v) = %v, want %v", c.self, c.queue, got, c.want)
		}
	}
}
