package media

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"testing"
)

// A strict policy takes https on allowed hosts only; the simulator's
// (not strict) takes http too.
func TestPolicyCheckURL(t *testing.T) {
	strict := Policy{Strict: true}
	hosts := Policy{Strict: true, Hosts: []string{"media.example.com", ".qpic.cn"}}
	for _, tc := range []struct {
		p   Policy
		url string
		ok  bool
	}{
		{strict, "https://wework.qpic.cn/a?b=c", true},
		{strict, "http://wework.qpic.cn/a", false},
		{strict, "ftp://wework.qpic.cn/a", false},
		{Policy{}, "http://127.0.0.1:8080/media/1", true},
		{Policy{}, "gopher://127.0.0.1/", false},
		{hosts, "https://media.example.com/x", true},
		{hosts, "https://MEDIA.example.com./x", true},
		{hosts, "https://x.media.example.com/x", false},
		{hosts, "https://wework.qpic.cn/x", true},
		{hosts, "https://qpic.cn/x", true},
		{hosts, "https://evilqpic.cn/x", false},
		{hosts, "https://attacker.example/x", false},
	} {
		u, _ := url.Parse(tc.url)
		err := tc.p.checkURL(u)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrRefused) {
			t.Errorf("%+v %s: %v, want ok %v", tc.p, tc.url, err, tc.ok)
		}
	}
}

// Only public addresses are dialled by a strict policy: the check is on
// the address the name resolved to.
func TestPolicyDialsPublicAddressesOnly(t *testing.T) {
	for addr, public := range map[string]bool{
		"203.0.113.7:443": true, "[2001:db8::1]:443": true, "1.1.1.1:443": true,
		"127.0.0.1:443": false, "[::1]:443": false, "10.1.2.3:443": false, "172.16.0.9:443": false,
		"192.168.1.1:443": false, "169.254.169.254:80": false, "[fe80::1]:443": false, "0.0.0.0:443": false,
		"100.64.0.1:443": false, "[::ffff:127.0.0.1]:443": false, "[fd00::1]:443": false, "224.0.0.1:443": false,
	} {
		err := Policy{Strict: true}.control("media.example.com", addr)
		if (err == nil) != public {
			t.Errorf("%s: %v, want public %v", addr, err, public)
		}
		if err := (Policy{}).control("media.example.com", addr); err != nil {
			t.Errorf("%s refused without Strict: %v", addr, err)
		}
	}
	if !publicAddr(netip.MustParseAddr("8.8.8.8")) {
		t.Fatal("8.8.8.8 is public")
	}
}

// A host named exactly in Hosts may resolve to a link-local address (as
// Tencent Cloud's object storage does inside Tencent Cloud), and to no
// other address that is not public; a host allowed by a suffix, or by no
// Hosts at all, may not.
func TestPolicyNamedHostMayBeLinkLocal(t *testing.T) {
	p := Policy{Strict: true, Hosts: []string{"Bucket.cos.example.com", ".qpic.cn"}}
	for _, tc := range []struct {
		host, addr string
		ok         bool
	}{
		{"bucket.cos.example.com", "169.254.0.47:443", true},
		{"bucket.cos.example.com.", "[fe80::1]:443", true},
		{"bucket.cos.example.com", "203.0.113.7:443", true},
		{"bucket.cos.example.com", "127.0.0.1:443", false},
		{"bucket.cos.example.com", "10.0.0.5:443", false},
		{"bucket.cos.example.com", "224.0.0.1:443", false},
		{"wework.qpic.cn", "169.254.0.47:443", false},
		{"other.example.com", "169.254.169.254:80", false},
	} {
		if err := p.control(tc.host, tc.addr); (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrRefused) {
			t.Errorf("%s at %s: %v, want ok %v", tc.host, tc.addr, err, tc.ok)
		}
	}
	if err := (Policy{Strict: true}).control("bucket.cos.example.com", "169.254.0.47:443"); err == nil {
		t.Error("a link-local address taken without Hosts naming its host")
	}
}

// The client of a strict policy refuses a server on loopback at dial
// time, and any policy's client refuses a redirect off its hosts.
func TestPolicyClientRefusesLoopbackAndRedirectsOffTheHosts(t *testing.T) {
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("x")) }))
	defer tls.Close()
	if _, err := (Policy{Strict: true}).client().Get(tls.URL); !errors.Is(err, ErrRefused) {
		t.Fatalf("strict GET of a loopback server: %v, want ErrRefused", err)
	}

	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://metadata.internal/latest", http.StatusFound)
	}))
	defer redirect.Close()
	u, _ := url.Parse(redirect.URL)
	_, err := Policy{Hosts: []string{u.Hostname()}}.client().Get(redirect.URL)
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("redirect off the hosts: %v, want ErrRefused", err)
	}
}
