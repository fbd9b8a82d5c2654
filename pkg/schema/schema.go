// Package schema stamps every record botctl writes (etcd values, KV
// bucket entries, queue and spool messages) with the version of its
// format, and tells a reader whether it may act on a record it read.
//
// The version is one JSON field, "v", first in the record's object:
// {"v":1,"id":"t-1",...}. A record without it is version 0, the format
// of the releases before versions were written (5071c48 and earlier), so
// a node reads every record of the previous minor version as before:
// adding the field changed no record's meaning, and JSON readers of
// every earlier release skip a field they do not know.
//
// What is guaranteed: a node never acts on a record whose version is
// above Version. Check says so with a *NewerError that names both
// versions and the record's kind; it counts the refusal in
// botctl_schema_newer_records_total{kind,record,known}. What the node
// does then is the caller's contract, and always leaves the record as it
// is for a node that understands it: a task message is handed back to
// the queue (neither acked nor terminated), a task record is not
// written, a bot's settings or registry entry is not applied.
//
// What is not guaranteed: a node of a release before versions (version 0
// readers) cannot refuse anything; it reads a newer record as if it were
// its own. So Version is raised only with a change that such a reader
// would misread, and such a change waits one minor release (the
// previous one must know the version to refuse it).
package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is the format version of the records this build writes, and
// the highest it acts on.
const Version = 1

// Field is the JSON field that carries a record's version.
const Field = "v"

// ErrNewer: the record was written by a newer botctl in a format this
// node does not know. errors.As gives the *NewerError with both versions.
var ErrNewer = errors.New("record written by a newer botctl")

// NewerError is a record this node refuses to act on.
type NewerError struct {
	Kind   string // what the record is: "task message", "task record", …
	Record int    // the record's version
	Known  int    // the highest this node knows (Version)
}

func (e *NewerError) Error() string {
	return fmt.Sprintf("%s has schema version %d, this node knows up to %d: left for a node of a newer botctl (upgrade this node)", e.Kind, e.Record, e.Known)
}

// Unwrap makes errors.Is(err, ErrNewer) hold.
func (e *NewerError) Unwrap() error { return ErrNewer }

// Newer counts refusals: the records of each kind and version this node
// met and did not act on. pkg/metrics registers it on every node's
// registry.
var Newer = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "botctl", Name: "schema_newer_records_total",
	Help: "Records written by a newer botctl that this node refused to act on, by kind, the record's schema version and the highest this node knows.",
}, []string{"kind", "record", "known"})

// Marshal is json.Marshal of x, a struct or map that encodes as a JSON
// object, with the field "v":Version first. A value that does not encode
// as an object, or already has a "v" field, is an error: the version has
// one place.
func Marshal(x any) ([]byte, error) {
	raw, err := json.Marshal(x)
	if err != nil {
		return nil, err
	}
	return Stamp(raw)
}

// Stamp puts "v":Version first in raw, a JSON object without a "v".
func Stamp(raw []byte) ([]byte, error) {
	if len(raw) < 2 || raw[0] != '{' {
		return nil, fmt.Errorf("schema: a record must be a JSON object to carry its version")
	}
	// A "v" anywhere is a quoted key or string (one inside a string is
	// escaped, \"v\"); only then is the object decoded to tell which.
	if bytes.Contains(raw, []byte(`"`+Field+`"`)) {
		if _, has, _ := read(raw); has {
			return nil, fmt.Errorf("schema: the record already has a %q field", Field)
		}
	}
	head := `{"` + Field + `":` + strconv.Itoa(Version)
	rest := bytes.TrimLeft(raw[1:], " \t\r\n")
	if len(rest) > 0 && rest[0] == '}' {
		return append([]byte(head), rest...), nil
	}
	return append(append([]byte(head), ','), rest...), nil
}

// Of is raw's version: 0 when raw has no "v" (a record of a release
// before versions) or is not a JSON object with a numeric "v" (the
// decoder of the record's own type then says what is wrong with it).
func Of(raw []byte) int {
	v, _, _ := read(raw)
	return v
}

func read(raw []byte) (v int, has bool, err error) {
	// What Stamp wrote: the field first, read without decoding the rest.
	if p := []byte(`{"` + Field + `":`); bytes.HasPrefix(raw, p) {
		digits := raw[len(p):]
		n := 0
		for n < len(digits) && digits[n] >= '0' && digits[n] <= '9' {
			n++
		}
		if n > 0 && n < len(digits) && (digits[n] == ',' || digits[n] == '}') {
			v, err := strconv.Atoi(string(digits[:n]))
			return v, true, err
		}
	}
	var head struct {
		V *json.RawMessage `json:"v"`
	}
	if err := json.Unmarshal(raw, &head); err != nil || head.V == nil {
		return 0, false, err
	}
	n, err := strconv.Atoi(string(*head.V))
	if err != nil {
		return 0, true, err
	}
	return n, true, nil
}

// Check is nil when this node may act on raw, a record of kind: its
// version is at most Version. Otherwise it counts the refusal and returns
// a *NewerError (errors.Is ErrNewer).
func Check(kind string, raw []byte) error {
	v := Of(raw)
	if v <= Version {
		return nil
	}
	Newer.WithLabelValues(kind, strconv.Itoa(v), strconv.Itoa(Version)).Inc()
	return &NewerError{Kind: kind, Record: v, Known: Version}
}
