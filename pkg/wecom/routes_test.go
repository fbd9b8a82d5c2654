package wecom

import (
	"encoding/json"
	"testing"
	"time"
)

func TestRouteOf(t *testing.T) {
	cases := map[string]string{
		`{"msgid":"m1","chattype":"single","from":{"userid":"alice"}}`:                 RouteDirect,
		`{"msgid":"m2","chattype":"group","chatid":"g1","from":{"userid":"alice"}}`:    "group:g1",
		`{"msgid":"m3","chattype":"group","from":{"userid":"alice"}}`:                  RouteDirect,
		`{"msgid":"m4","msgtype":"event","chattype":"group","chatid":"g2","event":{}}`: "group:g2",
		`{"msgid":"m5","msgtype":"event","event":{"eventtype":"enter_chat"}}`:          RouteDirect,
		`not json`: RouteDirect,
	}
	for body, want := range cases {
		if got := RouteOf(json.RawMessage(body)); got != want {
			t.Errorf("RouteOf(%s) = %q, want %q", body, got, want)
		}
	}
	if !IsGroupRoute("group:g1") || IsGroupRoute(RouteDirect) || IsGroupRoute("group:") {
		t.Error("IsGroupRoute")
	}
}

// Each route counts its own callbacks and its last; past maxRoutes a new
// route is not counted.
func TestRouteCounts(t *testing.T) {
	var r routeCounts
	t1 := time.Unix(100, 0)
	r.heard("group:g1", t1)
	r.heard("group:g1", t1.Add(time.Second))
	r.heard(RouteDirect, t1)
	c := &Conn{}
	c.routes.m = r.m
	got := c.Routes()
	if got["group:g1"].Callbacks != 2 || !got["group:g1"].LastCallback.Equal(t1.Add(time.Second)) || got[RouteDirect].Callbacks != 1 {
		t.Fatalf("routes %+v", got)
	}
	for i := range maxRoutes {
		r.heard("group:"+string(rune('a'+i%26))+string(rune('0'+i/26%10))+string(rune('0'+i/260)), t1)
	}
	if len(r.m) != maxRoutes {
		t.Fatalf("%d routes counted, want at most %d", len(r.m), maxRoutes)
	}
}
