package redact_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/botctl/botctl/pkg/heal/backfill"
	"github.com/botctl/botctl/pkg/wecom"
)

// The errors of the places that dial a configured URL carry no credential.
func TestDialErrorsAreRedacted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: the dial fails
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err = wecom.Dial(ctx, wecom.Config{URL: "ws://u:hunter2@" + addr + "/?token=hunter2", BotID: "b", Secret: "s", DialTimeout: 2 * time.Second}, nil)
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), addr) {
		t.Errorf("wecom dial: %v", err)
	}
	h := &backfill.SimHistory{Base: "http://u:hunter2@" + addr + "/?key=hunter2&"}
	_, err = h.History(ctx, "b", time.Now().Add(-time.Minute), time.Now())
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("history: %v", err)
	}
}
