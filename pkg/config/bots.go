package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/botctl/botctl/jetstream"
	"go.yaml.in/yaml/v3"
)

// BotSettings are what each bot has of its own: its AI backend, who may
// ask it and what its users read, how much of a conversation it keeps,
// and its limits. Each section has the keys of the top-level section of
// the same name (ai, access, memory, limits).
//
// A bot's settings are, field by field, lowest first: the file's top
// level (after the environment and flags, which override it), the bot's
// entry in the file (bots[].ai, bots[].access, …), then the override in
// etcd written by `botctl bots set` (package botsettings), which every
// node watches. A bot that sets only ai.openai.system_prompt keeps the
// top level's kind, model and key.
type BotSettings struct {
	AI     AI     `yaml:"ai"`
	Access Access `yaml:"access"`
	Memory Memory `yaml:"memory"`
	Limits Limits `yaml:"limits"`
}

// Memory bounds the conversation context a bot keeps for multi-turn
// answers (the context bucket, one entry per conversation).
type Memory struct {
	// Turns is how many messages (a question and its answer are two) are
	// kept, oldest dropped first. Default 20. 0 keeps none: every question
	// is asked alone (a backend that keeps its own memory, such as an
	// agent platform's conversation, needs none).
	Turns int `yaml:"turns"`
	// Bytes bounds the kept messages' text. Default 16384 (16 KiB), at
	// most MemoryMaxBytes: every turn is sent again with each question, so
	// more costs tokens on every answer.
	Bytes int `yaml:"bytes"`
	// IdleExpiry forgets a conversation's context once nobody asked
	// anything for this long: the next question starts afresh. Default
	// 24h, which is also the most: the context bucket forgets an entry
	// untouched for 24 h (jetstream.DefaultContextTTL) whatever a bot says.
	IdleExpiry time.Duration `yaml:"idle_expiry"`
}

// MemoryMaxBytes bounds memory.bytes: the context is one value in a
// bucket whose values NATS caps at 1 MiB, beside an answer being stored.
const MemoryMaxBytes = 256 << 10

// Limits protect the operator's bill: a bot's limits on use, per user of
// the bot (user) and for the bot as a whole (bot). A message over one is
// answered with access.limit_text and runs no task. 0 is no limit (the
// default). A day is a UTC day, a minute a calendar minute; the counts are
// kept in JetStream and shared by every node (pkg/limits).
type Limits struct {
	User LimitSet `yaml:"user"`
	Bot  LimitSet `yaml:"bot"`
}

// LimitSet is one scope's limits; 0 is none.
type LimitSet struct {
	// MessagesPerMinute and MessagesPerDay bound the messages admitted
	// (questions that run a task; commands and refusals are not counted).
	MessagesPerMinute int64 `yaml:"messages_per_minute"`
	MessagesPerDay    int64 `yaml:"messages_per_day"`
	// TokensPerDay bounds the tokens (in and out) the backend reported for
	// the day's answers: once reached, the next message is refused. Only a
	// backend that reports usage counts (openai, dify, http with a usage
	// object); with another it never refuses.
	TokensPerDay int64 `yaml:"tokens_per_day"`
	// BytesPerDay bounds the bytes of the files (images, files, videos)
	// sent in a UTC day, counted as each message's files are stored: a
	// message whose files would pass it is refused, its user told, and
	// text messages go on. It keeps one user, or one bot, from filling
	// the media store (media.max_store_bytes) for everyone.
	BytesPerDay int64 `yaml:"bytes_per_day"`
}

// maxLimit bounds every limit: more is no limit worth counting.
const maxLimit = 1 << 40

// maxQuestionLimit is WeCom's largest message content (wecom.MaxContentBytes,
// which this package may not import): a longer limit would accept
// questions WeCom never delivers.
const maxQuestionLimit = 20480

// The bot entry's sections: the keys of BotSettings.
var settingsSections = []string{"ai", "access", "memory", "limits"}

// nodeWide are the keys a bot may not set for itself: they size the node,
// not a bot.
var nodeWide = map[string]string{
	"ai.max_concurrency": "it bounds this node's calls to every backend at once",
}

// runtimeRefused says why key may not be set at run time (botctl bots
// set), or "". What names a command, a file, an environment variable or
// an endpoint stays the config file's: whoever may write botctl's etcd
// keys must not be able to run a program on every node, read a file or
// variable of theirs (a bot secret, an API key) or send a backend's key
// to a server of their choosing.
func runtimeRefused(key string) string {
	last := key[strings.LastIndex(key, ".")+1:]
	switch {
	case strings.HasSuffix(key, "exec."+last) && (last == "command" || last == "env" || last == "dir"): // ai.exec.*, ai.fallback[i].exec.*
		return "it names a program, its environment or its directory on every node"
	case strings.HasSuffix(last, "_file"):
		return "it names a file on every node"
	case strings.HasSuffix(last, "_env"):
		return "it names an environment variable of every node (which may hold a secret)"
	case last == "url" || strings.HasSuffix(last, "_url"):
		return "it is where a backend's key and every question are sent"
	}
	return ""
}

// TopSettings are the file's top-level sections (after the environment
// and flags): the settings of a bot that sets nothing of its own.
func (c Config) TopSettings() BotSettings {
	return BotSettings{AI: c.AI, Access: c.Access, Memory: c.Memory, Limits: c.Limits}
}

// BotSettings are bot id's settings from the file: the top level under
// its entry's sections. A bot not in the file has the top level's (the
// demo's bots). The error names the entry's key (bots[1].ai.demo.paragraphs).
func (c *Config) BotSettings(id string) (BotSettings, error) {
	s := c.TopSettings()
	for i, b := range c.Bots {
		if b.ID != id {
			continue
		}
		out, err := s.Override(b.Settings, false)
		return out, rekey(err, fmt.Sprintf("bots[%d].", i)) // with an error: the keys that could be set, set
	}
	return s, nil
}

// Override returns s with doc's keys set, field by field: doc is a
// mapping of the bot sections (ai, access, memory, limits), as in a bot's
// entry of the file or a `botctl bots set` document. runtime says doc
// comes from etcd: keys that name commands, files, variables or
// endpoints are refused (runtimeRefused). The result is not validated
// (Validate); errors name the key, relative to the bot (ai.demo.paragraphs).
func (s BotSettings) Override(doc map[string]any, runtime bool) (BotSettings, error) {
	if len(doc) == 0 {
		return s, nil
	}
	// Slices are replaced, not appended to, so the copy needs none of its own.
	out := s
	err := setFields("", doc, reflect.ValueOf(&out).Elem(), func(key string) string {
		if why, ok := nodeWide[key]; ok {
			return "this node's, not a bot's: set it at the top level (" + why + ")"
		}
		if runtime {
			if why := runtimeRefused(key); why != "" {
				return "not settable at run time, " + why + ": set it in the bot's entry of the config file"
			}
		}
		return ""
	})
	return out, err
}

// Validate checks a bot's settings; errors name the key relative to the
// bot (config key ai.openai.model, memory.turns, …).
func (s BotSettings) Validate() error {
	var errs []error
	if err := s.AI.Validate(); err != nil {
		errs = append(errs, err)
	}
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config key %s: %s", key, fmt.Sprintf(format, args...)))
	}
	a := s.Access
	if a.MaxQuestionBytes < 0 || a.MaxQuestionBytes > maxQuestionLimit {
		bad("access.max_question_bytes", "%d: want 0 (the default, 8000) to %d (WeCom's longest message)", a.MaxQuestionBytes, maxQuestionLimit)
	}
	if verbs := strings.Count(a.UnsupportedText, "%") - 2*strings.Count(a.UnsupportedText, "%%"); verbs > 1 || verbs == 1 && !strings.Contains(a.UnsupportedText, "%s") {
		bad("access.unsupported_text", "%q: want at most one %%s (the message type), e.g. \"暂不支持 %%s 类型的消息，请发送文字。\"", a.UnsupportedText)
	}
	for key, text := range map[string]string{"access.receipt_text": a.ReceiptText, "access.busy_text": a.BusyText, "access.welcome_text": a.WelcomeText, "access.late_note": a.LateNote, "access.limit_text": a.LimitText} {
		if len(text) > maxQuestionLimit {
			bad(key, "%d bytes: at most %d (WeCom's longest message)", len(text), maxQuestionLimit)
		}
	}
	for key, n := range map[string]int64{
		"limits.user.messages_per_minute": s.Limits.User.MessagesPerMinute, "limits.user.messages_per_day": s.Limits.User.MessagesPerDay,
		"limits.user.tokens_per_day": s.Limits.User.TokensPerDay, "limits.bot.messages_per_minute": s.Limits.Bot.MessagesPerMinute,
		"limits.bot.messages_per_day": s.Limits.Bot.MessagesPerDay, "limits.bot.tokens_per_day": s.Limits.Bot.TokensPerDay,
		"limits.user.bytes_per_day": s.Limits.User.BytesPerDay, "limits.bot.bytes_per_day": s.Limits.Bot.BytesPerDay,
	} {
		if n < 0 || n > maxLimit {
			bad(key, "%d: want 0 (no limit, the default) to %d", n, int64(maxLimit))
		}
	}
	if v := a.ReportedVersion; len(v) > 64 || strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		bad("access.reported_version", "%q: want at most 64 bytes without spaces or control characters, e.g. \"1.2.0\" (empty: botctl's version)", v)
	}
	if msg := checkCard(a.WelcomeCard); msg != "" {
		bad("access.welcome_card", "%s", msg)
	}
	m := s.Memory
	if m.Turns < 0 || m.Turns > 1000 {
		bad("memory.turns", "%d: want 0 (keep none) to 1000", m.Turns)
	}
	if m.Bytes < 1024 || m.Bytes > MemoryMaxBytes {
		bad("memory.bytes", "%d: want 1024 to %d", m.Bytes, MemoryMaxBytes)
	}
	if m.IdleExpiry < time.Minute || m.IdleExpiry > jetstream.DefaultContextTTL {
		bad("memory.idle_expiry", "%s: want 1m to %s (the context bucket forgets a conversation untouched that long anyway)", m.IdleExpiry, jetstream.DefaultContextTTL)
	}
	return errors.Join(errs...)
}

// ParseSettings reads a bot's settings document: YAML or JSON (JSON is
// YAML), a mapping of ai, access, memory and limits. Keys are checked
// when it is applied (Override).
func ParseSettings(raw []byte) (map[string]any, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("bot settings: not YAML or JSON: %w", err)
	}
	for k := range doc {
		if !slices.Contains(settingsSections, k) {
			return nil, fmt.Errorf("bot settings: unknown key %s (want %s)", k, strings.Join(settingsSections, ", "))
		}
	}
	return doc, nil
}

// SetKey sets key (dotted, e.g. ai.openai.system_prompt) to value in doc,
// making the mappings on its way: `botctl bots set --set KEY=VALUE`. The
// value is YAML ("[a, b]" is a list, "12" a number); whether the key
// exists is checked when doc is applied (Override).
func SetKey(doc map[string]any, key, value string) error {
	parts := strings.Split(key, ".")
	if !slices.Contains(settingsSections, parts[0]) || len(parts) < 2 || slices.Contains(parts, "") {
		return fmt.Errorf("key %q: want SECTION.KEY, SECTION one of %s (e.g. ai.openai.system_prompt)", key, strings.Join(settingsSections, ", "))
	}
	var v any
	if err := yaml.Unmarshal([]byte(value), &v); err != nil || v == nil {
		v = value // not YAML (or empty): the text itself
	}
	if _, isMap := v.(map[string]any); isMap {
		v = value
	}
	m := doc
	for _, p := range parts[:len(parts)-1] {
		sub, ok := m[p].(map[string]any)
		if !ok {
			sub = map[string]any{}
			m[p] = sub
		}
		m = sub
	}
	m[parts[len(parts)-1]] = v
	return nil
}

// Doc renders s as a settings document: every field not zero, by its
// key, durations as "10s" (what ParseSettings reads back).
func (s BotSettings) Doc() map[string]any {
	doc, _ := docOf(reflect.ValueOf(s)).(map[string]any)
	if doc == nil {
		doc = map[string]any{}
	}
	return doc
}

var durationType = reflect.TypeFor[time.Duration]()

// setByTag sets the field of c at the dotted key (by yaml tags) from a
// YAML value: a key of the file's bot sections that the key table lacks.
func (c *Config) setByTag(key string, val any) error {
	v := reflect.ValueOf(c).Elem()
	for _, part := range strings.Split(key, ".") {
		if v.Kind() != reflect.Struct || v.Type() == durationType {
			return fmt.Errorf("config key %s: unknown", key)
		}
		f, ok := fieldByTag(v, part)
		if !ok {
			return fmt.Errorf("config key %s: unknown: %s", key, didYouMean(key))
		}
		v = f
	}
	if v.Kind() == reflect.Struct && v.Type() != durationType {
		return fmt.Errorf("config key %s: want a mapping of %s", key, strings.Join(tags(v), ", "))
	}
	if isStructList(v) {
		return setStructList(key, val, v, func(string) string { return "" })
	}
	if err := setLeaf(v, val); err != nil {
		return fmt.Errorf("config key %s: %w", key, err)
	}
	return nil
}

// setFields sets doc's keys on the struct v by their yaml tags, and only
// those: the fields doc does not name keep their values. prefix names
// the keys in errors; refuse says why a key may not be set ("" if it may).
func setFields(prefix string, doc map[string]any, v reflect.Value, refuse func(key string) string) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(doc)) {
		key := prefix + name
		f, ok := fieldByTag(v, name)
		if !ok {
			errs = append(errs, fmt.Errorf("config key %s: unknown: %s", key, didYouMean(key)))
			continue
		}
		if f.Kind() == reflect.Struct && f.Type() != durationType {
			sub, ok := doc[name].(map[string]any)
			if !ok {
				errs = append(errs, fmt.Errorf("config key %s: want a mapping of %s", key, strings.Join(tags(f), ", ")))
				continue
			}
			if err := setFields(key+".", sub, f, refuse); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if isStructList(f) {
			if err := setStructList(key, doc[name], f, refuse); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if why := refuse(key); why != "" {
			errs = append(errs, fmt.Errorf("config key %s: %s", key, why))
			continue
		}
		if err := setLeaf(f, doc[name]); err != nil {
			errs = append(errs, fmt.Errorf("config key %s: %w", key, err))
		}
	}
	return errors.Join(errs...)
}

// isStructList: f is a list of mappings (ai.fallback).
func isStructList(f reflect.Value) bool {
	return f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct && f.Type().Elem() != durationType
}

// setStructList sets the list f from a YAML list of mappings, each entry
// from its own keys only (key[i].name in errors); the list replaces f's.
func setStructList(key string, val any, f reflect.Value, refuse func(key string) string) error {
	if val == nil {
		f.Set(reflect.Zero(f.Type()))
		return nil
	}
	items, ok := val.([]any)
	if !ok {
		return fmt.Errorf("config key %s: want a list of mappings of %s", key, strings.Join(tags(reflect.New(f.Type().Elem()).Elem()), ", "))
	}
	out := reflect.MakeSlice(f.Type(), len(items), len(items))
	var errs []error
	for i, it := range items {
		sub, ok := it.(map[string]any)
		if !ok {
			errs = append(errs, fmt.Errorf("config key %s[%d]: want a mapping of %s", key, i, strings.Join(tags(out.Index(i)), ", ")))
			continue
		}
		errs = append(errs, setFields(fmt.Sprintf("%s[%d].", key, i), sub, out.Index(i), refuse))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	f.Set(out)
	return nil
}

func fieldByTag(v reflect.Value, name string) (reflect.Value, bool) {
	for i := 0; i < v.NumField(); i++ {
		if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ","); tag == name && tag != "-" {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

func tags(v reflect.Value) []string {
	var out []string
	for i := 0; i < v.NumField(); i++ {
		if tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
			out = append(out, tag)
		}
	}
	if len(out) == 0 {
		return []string{"(none yet)"}
	}
	return out
}

// setLeaf sets one field from a YAML or JSON value (JSON numbers are
// float64; a duration is a string such as "10s").
func setLeaf(f reflect.Value, val any) error {
	switch {
	case f.Kind() == reflect.Pointer: // an optional value (nil: not set)
		if val == nil {
			f.Set(reflect.Zero(f.Type()))
			return nil
		}
		p := reflect.New(f.Type().Elem())
		if err := setLeaf(p.Elem(), val); err != nil {
			return err
		}
		f.Set(p)
	case f.Kind() == reflect.Map && f.Type().Key().Kind() == reflect.String && f.Type().Elem().Kind() == reflect.String:
		m, ok := val.(map[string]any)
		if !ok && val != nil {
			return fmt.Errorf("want a mapping of text, got %v", val)
		}
		out := reflect.MakeMapWithSize(f.Type(), len(m))
		for k, v := range m {
			out.SetMapIndex(reflect.ValueOf(k).Convert(f.Type().Key()), reflect.ValueOf(scalar(v)).Convert(f.Type().Elem()))
		}
		f.Set(out)
	case f.Type() == durationType:
		s, ok := val.(string)
		d, err := time.ParseDuration(s)
		if !ok || err != nil {
			return fmt.Errorf("%v is not a duration (e.g. \"20s\", \"5m\")", val)
		}
		f.SetInt(int64(d))
	case f.Kind() == reflect.String:
		if _, isList := val.([]any); isList || val == nil {
			if val == nil {
				f.SetString("")
				return nil
			}
			return fmt.Errorf("want text, got a list")
		}
		f.SetString(scalar(val))
	case f.CanInt():
		var n int64
		switch x := val.(type) {
		case int:
			n = int64(x)
		case float64:
			if x != float64(int64(x)) {
				return fmt.Errorf("%v is not an integer", x)
			}
			n = int64(x)
		case string:
			p, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return fmt.Errorf("%q is not an integer", x)
			}
			n = p
		default:
			return fmt.Errorf("%v is not an integer", val)
		}
		if f.OverflowInt(n) {
			return fmt.Errorf("%d is out of range", n)
		}
		f.SetInt(n)
	case f.CanUint():
		var n uint64
		switch x := val.(type) {
		case int:
			if x < 0 {
				return fmt.Errorf("%d is negative", x)
			}
			n = uint64(x)
		case float64:
			if x < 0 || x != float64(uint64(x)) {
				return fmt.Errorf("%v is not a non-negative integer", x)
			}
			n = uint64(x)
		default:
			return fmt.Errorf("%v is not a non-negative integer", val)
		}
		if f.OverflowUint(n) {
			return fmt.Errorf("%d is out of range", n)
		}
		f.SetUint(n)
	case f.CanFloat():
		switch x := val.(type) {
		case int:
			f.SetFloat(float64(x))
		case float64:
			f.SetFloat(x)
		default:
			return fmt.Errorf("%v is not a number", val)
		}
	case f.Kind() == reflect.Bool:
		b, ok := val.(bool)
		if !ok {
			return fmt.Errorf("%v is not true or false", val)
		}
		f.SetBool(b)
	case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
		var items []string
		switch x := val.(type) {
		case []any:
			for _, it := range x {
				items = append(items, scalar(it))
			}
		case string:
			items = splitList(x) // as the environment and flags give a list
		case nil:
		default:
			return fmt.Errorf("want a list, got %v", val)
		}
		f.Set(reflect.ValueOf(items))
	default:
		return fmt.Errorf("cannot be set in a bot's settings (type %s)", f.Type())
	}
	return nil
}

// docOf renders v by yaml tags, leaving out zero values.
func docOf(v reflect.Value) any {
	switch {
	case v.Type() == durationType:
		if v.Int() == 0 {
			return nil
		}
		return shortDuration(time.Duration(v.Int()))
	case v.Kind() == reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return v.Elem().Interface() // set, even to zero: it says so
	case v.Kind() == reflect.Struct:
		m := map[string]any{}
		for i := 0; i < v.NumField(); i++ {
			tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			if x := docOf(v.Field(i)); x != nil {
				m[tag] = x
			}
		}
		if len(m) == 0 {
			return nil
		}
		return m
	case v.IsZero():
		return nil
	case v.Kind() == reflect.Slice:
		out := make([]any, v.Len())
		for i := range out {
			if e := v.Index(i); e.Kind() == reflect.Struct && e.Type() != durationType {
				if out[i] = docOf(e); out[i] == nil {
					out[i] = map[string]any{}
				}
				continue
			}
			out[i] = v.Index(i).Interface()
		}
		return out
	}
	return v.Interface()
}

// shortDuration drops zero units: 6m, not 6m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// rekey puts prefix before every key an error names ("config key ai.…"
// becomes "config key bots[1].ai.…"), error by error.
func rekey(err error, prefix string) error {
	if err == nil {
		return nil
	}
	var parts []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			parts = append(parts, rekey(e, prefix))
		}
		return errors.Join(parts...)
	}
	msg := strings.ReplaceAll(err.Error(), "config key ", "config key "+prefix)
	return errors.New(strings.ReplaceAll(msg, didYouMeanText, didYouMeanText+prefix))
}

// checkCard says what is wrong with a template card's JSON ("" nothing,
// or no card).
func checkCard(card string) string {
	if strings.TrimSpace(card) == "" {
		return ""
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(card), &obj); err != nil {
		return fmt.Sprintf("not a JSON object (%v): want a WeCom template card such as {\"card_type\":\"text_notice\",\"main_title\":{\"title\":\"你好\"}}", err)
	}
	if _, ok := obj["card_type"]; !ok {
		return `no "card_type": want text_notice, news_notice, button_interaction, vote_interaction or multiple_interaction`
	}
	if len(card) > 16<<10 {
		return fmt.Sprintf("%d bytes: at most %d", len(card), 16<<10)
	}
	return ""
}
