package alert

import (
	"fmt"
	"slices"

	"github.com/botctl/botctl/pkg/heal/incident"
)

// Levels is the set of levels a sink subscribes to. Empty means every
// level.
type Levels []incident.Level

// ParseLevels reads a sink's subscription ("auto", "human", or both).
// The error names the bad value and the valid ones; the caller adds the
// config key.
func ParseLevels(names []string) (Levels, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("is empty: give auto, human or both (a sink that wants nothing is a sink to remove)")
	}
	var out Levels
	for _, n := range names {
		l := incident.Level(n)
		if l != incident.Auto && l != incident.Human {
			return nil, fmt.Errorf("%q is not a level: use auto (botctl is fixing it) or human (a person must act)", n)
		}
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out, nil
}

// wants reports whether a sink subscribed to levels receives a. The
// synthetic alert goes to every sink whatever its levels: it proves
// each sink's path works, and a sink it skipped would lose its dead
// man's switch.
func (levels Levels) wants(a Alert) bool {
	return a.Kind == KindSynthetic || len(levels) == 0 || slices.Contains(levels, a.Level)
}

// Subscribe returns s receiving only the alerts of the given levels
// (and the synthetic alert). With no level it receives everything, as s
// alone does.
func Subscribe(s Sink, levels ...incident.Level) Sink {
	return &subscribed{Sink: s, levels: levels}
}

type subscribed struct {
	Sink
	levels Levels
}

// levelsOf is the subscription of s: every level unless Subscribe set one.
func levelsOf(s Sink) Levels {
	if sub, ok := s.(*subscribed); ok {
		return sub.levels
	}
	return nil
}

// SubscribeNames is Subscribe with levels by name ("auto", "human"), as
// the configuration gives them; a bad name is refused by New (Sinks[k]).
func SubscribeNames(s Sink, names []string) Sink {
	levels := make([]incident.Level, len(names))
	for k, n := range names {
		levels[k] = incident.Level(n)
	}
	return Subscribe(s, levels...)
}
