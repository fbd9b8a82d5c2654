package wecomsim

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"time"

	"github.com/botctl/botctl/pkg/wecom"
)

// counters are a bot's totals since the start; Stats is their JSON view.
type counters struct {
	Connections     int64
	Kicks           int64
	AuthFailures    int64
	QuotaRejections int64
	QuotaDrops      int64 // frames over the quota acked 0 and dropped (drop mode)
	ExpiredUpdates  int64
	InvalidReqIDs   int64
	Undelivered     int64
	Malformed       int64
	NotSubscribed   int64
	Oversized       int64
	FinishedFrames  int64
	ChatNotFound    int64
	Drops           int64
	LateAcks        int64 // acks sent late by the late_acks fault
	SubRefusals     int64 // subscribes refused by the refuse_subscribe fault
	Unsubscribed    int64 // subscriptions ended by the unsubscribe fault
	MediaDownloads  int64 // media GETs served
	MediaExpired    int64 // media GETs refused: the URL had expired
	Frames          map[string]int64
	Errors          map[int]int64
}

// reqKind is what a callback req_id may be answered with.
type reqKind int

const (
	reqMsg   reqKind = iota // aibot_msg_callback → aibot_respond_msg
	reqEvent                // aibot_event_callback → welcome / update
)

// pendingReq is a req_id the server issued in a callback.
type pendingReq struct {
	kind      reqKind
	eventType string
	connID    uint64
	chat      string // transcript key: user id (single) or chat id (group)
	group     bool   // chat is a group chat
	msgid     string
	at        time.Time
	used      bool // welcome / update already accepted
	// taskID is a template_card_event's task_id: the card an update
	// replaces must carry it.
	taskID string
}

// event is a user action posted (PostEvent): its callback, sent again as
// it was when the event is replayed.
type event struct {
	chat string // transcript key, as pendingReq's
	cb   wecom.EventCallback
}

// chatInfo is a conversation a user opened by talking to the bot.
type chatInfo struct {
	key      string
	chatType string // wecom.ChatSingle or wecom.ChatGroup
}

// stream is a streamed reply in progress (or finished).
type stream struct {
	reqID    string
	start    time.Time // first accepted frame
	finished bool
	entry    *TranscriptEntry
}

// message is a user message as history keeps it.
type message struct {
	HistoryMessage
	at      time.Time
	msgType string
	media   *mediaBody // image, file, video, mixed, quote (media.go)
}

// bot is one bot's state; everything is guarded by mu.
type bot struct {
	id     string
	secret string

	mu           sync.Mutex
	revoked      bool
	live         *conn // the subscribed connection, if any
	seq          int64
	reqs         map[string]*pendingReq
	chats        map[string]*chatInfo
	transcripts  map[string][]*TranscriptEntry
	streams      map[string]*stream
	messages     []*message
	byMsgID      map[string]*message
	events       map[string]*event      // events posted, by msgid (a replay sends one again)
	sent         map[string][]time.Time // conversation → accepted frame times
	uploadTimes  []time.Time            // accepted upload inits, oldest first
	quotaMode    string                 // "" (the server's Config.QuotaMode), QuotaRefuse or QuotaDrop
	noStream     map[string]bool        // chats whose stream frames get 600039 (stream_unsupported)
	dropOnReply  map[string]bool        // msgids whose first reply drops the connection (drop_on_reply)
	feedbackIDs  map[string]bool        // feedback.ids accepted on streams' first frames
	uploads      map[string]*upload
	media        map[string]*UploadInfo // finished uploads by media_id
	stallUntil   time.Time
	silenceUntil time.Time
	// group_silence: group callbacks are withheld from the connection
	// groupSilentConn (0: none), or from any connection until
	// groupSilentUntil.
	groupSilentConn  uint64
	groupSilentUntil time.Time
	lateUntil        time.Time     // late_acks: acks decided before this are delayed…
	lateDelay        time.Duration // …by this much (wall clock)
	refuseUntil      time.Time     // refuse_subscribe: subscribes before this are refused…
	refuseCode       int           // …with this errcode
	version          string        // the version the bot last reported (ww_ai_robot_enter_event)
	stats            counters
}

func newBot(id, secret string) *bot {
	return &bot{
		id:          id,
		secret:      secret,
		reqs:        make(map[string]*pendingReq),
		chats:       make(map[string]*chatInfo),
		transcripts: make(map[string][]*TranscriptEntry),
		streams:     make(map[string]*stream),
		byMsgID:     make(map[string]*message),
		events:      make(map[string]*event),
		sent:        make(map[string][]time.Time),
		uploads:     make(map[string]*upload),
		media:       make(map[string]*UploadInfo),
		noStream:    make(map[string]bool),
		dropOnReply: make(map[string]bool),
		feedbackIDs: make(map[string]bool),
		stats: counters{
			Frames: make(map[string]int64),
			Errors: make(map[int]int64),
		},
	}
}

// consume records an accepted frame for chat's quota. Call with mu held.
func (b *bot) consume(chat string, now time.Time) {
	b.sent[chat] = append(b.sent[chat], now)
}

// addEntry appends to chat's transcript with the next seq. Call with mu held.
func (b *bot) addEntry(chat string, e TranscriptEntry) *TranscriptEntry {
	b.seq++
	e.Seq = b.seq
	p := &e
	b.transcripts[chat] = append(b.transcripts[chat], p)
	return p
}

// newID is a unique id with a readable prefix.
func newID(prefix string) string {
	var buf [12]byte
	_, _ = rand.Read(buf[:])
	return prefix + "_" + hex.EncodeToString(buf[:])
}

// newReqID makes a req_id as WeCom does: <cmd>_<unix ms>_<random>.
func newReqID(cmd string, now time.Time) string {
	var buf [4]byte
	_, _ = rand.Read(buf[:])
	return cmd + "_" + strconv.FormatInt(now.UnixMilli(), 10) + "_" + hex.EncodeToString(buf[:])
}
