package wecomsim_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/botctl/botctl/pkg/wecomsim"
	"github.com/rs/zerolog"
)

func TestGroupRobotWebhook(t *testing.T) {
	sim := wecomsim.New(wecomsim.Config{Logger: zerolog.Nop()})
	srv := httptest.NewServer(sim.Handler())
	defer func() { sim.Close(); srv.Close() }()
	send := func(key, content string) int {
		body, _ := json.Marshal(map[string]any{"msgtype": "markdown", "markdown": map[string]string{"content": content}})
		resp, err := http.Post(srv.URL+"/cgi-bin/webhook/send?key="+key, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct {
			ErrCode int `json:"errcode"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d, %v", resp.StatusCode, err)
		}
		return r.ErrCode
	}
	for i := range wecomsim.RobotRatePerMinute {
		if code := send("k1", "alert "+string(rune('a'+i))); code != 0 {
			t.Fatalf("message %d: errcode %d", i, code)
		}
	}
	if code := send("k1", "one too many"); code != 45009 {
		t.Fatalf("21st message in a minute: errcode %d, want 45009", code)
	}
	if code := send("k2", strings.Repeat("x", wecomsim.RobotMaxContent+1)); code != wecomsim.ErrCodeRobotTooLong {
		t.Fatalf("too long: errcode %d", code)
	}
	if code := send("", "no key"); code == 0 {
		t.Fatal("a send without a key was accepted")
	}
	if got := len(sim.RobotMessages("k1")); got != wecomsim.RobotRatePerMinute {
		t.Fatalf("robot k1 has %d messages", got)
	}
	resp, err := http.Get(srv.URL + "/control/robot?key=k1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Messages []wecomsim.RobotMessage `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Messages) != wecomsim.RobotRatePerMinute || list.Messages[0].Content != "alert a" {
		t.Fatalf("GET /control/robot: %v %+v", err, list)
	}
}
