package schema

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

func TestMarshalPutsTheVersionFirst(t *testing.T) {
	type rec struct {
		ID string `json:"id"`
	}
	for _, c := range []struct {
		in   any
		want string
	}{
		{rec{ID: "t-1"}, `{"v":` + strconv.Itoa(Version) + `,"id":"t-1"}`},
		{map[string]any{}, `{"v":` + strconv.Itoa(Version) + `}`},
		{struct{}{}, `{"v":` + strconv.Itoa(Version) + `}`},
	} {
		raw, err := Marshal(c.in)
		if err != nil || string(raw) != c.want {
			t.Errorf("Marshal(%#v) = %s, %v; want %s", c.in, raw, err, c.want)
		}
		var back rec
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Errorf("a reader without the field cannot read %s: %v", raw, err)
		}
		if Of(raw) != Version {
			t.Errorf("Of(%s) = %d, want %d", raw, Of(raw), Version)
		}
	}
	for _, bad := range []any{"text", 3, []int{1}, map[string]int{"v": 2}} {
		if raw, err := Marshal(bad); err == nil {
			t.Errorf("Marshal(%#v) = %s, want an error", bad, raw)
		}
	}
}

func TestOfReadsAMissingVersionAsZero(t *testing.T) {
	for raw, want := range map[string]int{
		`{"id":"t-1"}`:         0, // the previous release's records
		`{"id":"t-1","v":3}`:   3, // not first: still read
		`{"v":2,"id":"t-1"}`:   2,
		`{"v":12}`:             12,
		`{ "v" : 4 }`:          4,
		`not json`:             0,
		`{"v":"x"}`:            0,
		`{"v":10000000000000}`: 10000000000000,
	} {
		if got := Of([]byte(raw)); got != want {
			t.Errorf("Of(%s) = %d, want %d", raw, got, want)
		}
	}
}

func TestCheckRefusesANewerRecordNamingBothVersions(t *testing.T) {
	if err := Check("task record", []byte(`{"id":"t-1"}`)); err != nil {
		t.Errorf("a record of the previous release: %v", err)
	}
	own, _ := Marshal(struct{}{})
	if err := Check("task record", own); err != nil {
		t.Errorf("a record of this version: %v", err)
	}
	newer := []byte(`{"v":` + strconv.Itoa(Version+1) + `,"id":"t-1"}`)
	before := refused("task record", Version+1)
	err := Check("task record", newer)
	var ne *NewerError
	if !errors.Is(err, ErrNewer) || !errors.As(err, &ne) || ne.Record != Version+1 || ne.Known != Version || ne.Kind != "task record" {
		t.Fatalf("Check(newer) = %v, want a NewerError with versions %d and %d", err, Version+1, Version)
	}
	want := "task record has schema version " + strconv.Itoa(Version+1) + ", this node knows up to " + strconv.Itoa(Version) + ": left for a node of a newer botctl (upgrade this node)"
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if got := refused("task record", Version+1); got != before+1 {
		t.Errorf("refusals counted %v, want %v", got, before+1)
	}
}

// refused is how many records of kind and version Check refused.
func refused(kind string, v int) float64 {
	var m dto.Metric
	if err := Newer.WithLabelValues(kind, strconv.Itoa(v), strconv.Itoa(Version)).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
