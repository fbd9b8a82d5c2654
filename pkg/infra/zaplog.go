package infra

import (
	"sync/atomic"

	"github.com/rs/zerolog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zerologCore is a zapcore.Core that writes embedded etcd's zap entries to a
// zerolog logger, so a node has one log stream. Entries below minLevel are
// dropped before any field is encoded: etcd is chatty at info.
type zerologCore struct {
	log      zerolog.Logger
	minLevel zapcore.Level
	fields   []zapcore.Field
	// quiet, once set, logs everything at debug: etcd reports its own
	// listeners closing during a normal Close as errors.
	quiet *atomic.Bool
}

func newZapLogger(log zerolog.Logger, minLevel zapcore.Level, quiet *atomic.Bool) *zap.Logger {
	return zap.New(&zerologCore{log: log, minLevel: minLevel, quiet: quiet})
}

// etcdNoise are warnings embedded etcd always prints for a single local
// member; they are expected here and logged at debug.
var etcdNoise = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
}

func (c *zerologCore) Enabled(l zapcore.Level) bool { return l >= c.minLevel }

func (c *zerologCore) With(fields []zapcore.Field) zapcore.Core {
	nc := *c
	nc.fields = append(append([]zapcore.Field(nil), c.fields...), fields...)
	return &nc
}

func (c *zerologCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *zerologCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	var ev *zerolog.Event
	switch {
	case c.quiet.Load() || etcdNoise[e.Message]:
		ev = c.log.Debug()
	case e.Level >= zapcore.ErrorLevel:
		ev = c.log.Error()
	case e.Level == zapcore.WarnLevel:
		ev = c.log.Warn()
	case e.Level == zapcore.InfoLevel:
		ev = c.log.Info()
	default:
		ev = c.log.Debug()
	}
	if e.LoggerName != "" {
		ev = ev.Str("logger", e.LoggerName)
	}
	ev.Fields(enc.Fields).Msg(e.Message)
	return nil
}

func (c *zerologCore) Sync() error { return nil }
