package task

// A corrupt record (ErrCorruptRecord: the value under a task's key does
// not decode) cannot be repaired by botctl, and no lifecycle step can
// write it (each one reads it first). It must not stop anything else: each
// reader that meets one skips it and tells the lifecycle (Corrupt), which
// logs it and tells its Corruption (the node's metric and the bot's data
// incident, which asks a person to look). The task itself gets no answer
// from botctl until a person removes or replaces the value.

// Corruption hears of every corrupt record a reader skipped, each time
// (where: CorruptAt*). Called on the delivery path: it must not block.
type Corruption interface {
	CorruptRecord(bot, id, where string, err error)
}

// Where a corrupt record was skipped.
const (
	CorruptAtRebuild = "rebuild" // a pusher's rebuild at its term's start
	CorruptAtPush    = "push"    // a pusher's step of the task
	CorruptAtSpool   = "spool"   // the spool's way out (the entry is dropped)
	CorruptAtSweep   = "sweep"   // the leader's sweep
)

// WithCorruption returns a copy of l that tells c of every corrupt record
// skipped (Corrupt).
func (l *Lifecycle) WithCorruption(c Corruption) *Lifecycle {
	cp := *l
	cp.corruption = c
	return &cp
}

// Corrupt records that a reader (where) skipped task id of bot because
// its record does not decode (err wraps ErrCorruptRecord).
func (l *Lifecycle) Corrupt(bot, id, where string, err error) {
	l.log.Error().Err(err).Str("bot", bot).Str("task", id).Str("where", where).
		Msg("task record does not decode: skipped (no answer for this task until a person removes or replaces it)")
	if l.corruption != nil {
		l.corruption.CorruptRecord(bot, id, where, err)
	}
}
