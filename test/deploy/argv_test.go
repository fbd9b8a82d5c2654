package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// argvSecrets are the ways a secret gets into a command line, where every
// user of the machine can read it (ps, /proc/PID/cmdline) and the shell's
// history keeps it. The forms that name a file or an environment variable
// instead (--bot ID with $BOTCTL_BOT_<ID>_SECRET, --password-file,
// --token-file, curl -H @file) are what the documents show.
var argvSecrets = []struct {
	why    string
	re     *regexp.Regexp
	except string // a match that starts with it is not one (a boolean flag)
}{
	{"--bot ID:SECRET (use --bot ID with $BOTCTL_BOT_<ID>_SECRET, or secret_file)", regexp.MustCompile(`--bot[= ]+[^\s:$]+:\S+`), ""},
	{"a password, secret or token as a flag's value (use its -file form, or the environment)",
		regexp.MustCompile(`--(?:[a-z0-9]+-)*(?:password|passwd|secret|token|api-?key)(?:[= ])`), "--no-"},
	{"user:password as a flag's value (etcdctl --user, curl -u)", regexp.MustCompile(`(?:^|\s)(?:-u|--user)[= ]+[^\s:$<]+:\S+`), ""},
	{"a bearer token in a curl header (use -H @FILE)", regexp.MustCompile(`-H\s*["']?Authorization:\s*Bearer`), ""},
	{"credentials in a URL (use the user and password-file keys)", regexp.MustCompile(`[a-z][a-z0-9+.-]*://[^/\s:@'"<>]+:[^/\s@'"<>]+@`), ""},
}

// argvSecret is the first secret in argv the command line s shows, and
// what to do instead ("": none).
func argvSecret(s string) (match, why string) {
	for _, p := range argvSecrets {
		for _, m := range p.re.FindAllString(s, -1) {
			if p.except == "" || !strings.HasPrefix(strings.TrimSpace(m), p.except) {
				return m, p.why
			}
		}
	}
	return "", ""
}

// code is what a reader may paste into a shell from text at path, with
// the line each piece starts on: a Markdown file's fenced blocks and
// inline code spans; any other file whole (a unit's ExecStart, a script,
// a configuration).
func code(path, text string) map[int][]string {
	out := map[int][]string{}
	lines := strings.Split(text, "\n")
	if !strings.HasSuffix(path, ".md") {
		for i, l := range lines {
			out[i+1] = append(out[i+1], l)
		}
		return out
	}
	inline := regexp.MustCompile("`([^`]+)`")
	fenced := false
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced {
			out[i+1] = append(out[i+1], l)
			continue
		}
		for _, m := range inline.FindAllStringSubmatch(l, -1) {
			out[i+1] = append(out[i+1], m[1])
		}
	}
	return out
}

// No example in README.md, docs/, deploy/ or scripts/ puts a secret in
// argv (or a URL): what operators copy is what they run. No allowlist:
// a document that explains a refused form describes it in words.
func TestNoSecretInArgv(t *testing.T) {
	r := repo(t)
	files := []string{filepath.Join(r, "README.md")}
	for _, dir := range []string{"docs", "deploy", "scripts"} {
		err := filepath.WalkDir(filepath.Join(r, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			switch filepath.Ext(p) {
			case ".png", ".jpg", ".svg":
				return nil
			}
			files = append(files, p)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	checked := 0
	for _, p := range files {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(r, p)
		for line, pieces := range code(rel, string(raw)) {
			for _, piece := range pieces {
				checked++
				if m, why := argvSecret(piece); m != "" {
					t.Errorf("%s:%d: %q: %s", rel, line, m, why)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no code found to check")
	}
}

// The patterns find what they are for, and not the file and environment
// forms the documents recommend.
func TestArgvSecretPatterns(t *testing.T) {
	bad := []string{
		"botctl serve --bot b1:s3cret",
		"botctl sim --bot=demo:demo-secret",
		"nats --password hunter2 stream ls",
		"botctl serve --api-token=0123456789abcdef",
		"etcdctl --user root:hunter2 get /botctl",
		`curl -H "Authorization: Bearer $(cat /etc/botctl/api.token)" http://127.0.0.1:8391/v1/exec`,
		"botctl serve --nats nats://ops:hunter2@10.0.0.11:4222",
	}
	good := []string{
		"botctl serve --bot b1",
		"BOTCTL_BOT_B1_SECRET=s botctl serve --bot b1 --etcd http://127.0.0.1:2379",
		"botctl serve --api-token-file /etc/botctl/api.token --nats-password-file /run/credentials/botctl.service/nats.pw",
		"etcdctl --user ops get /botctl --prefix",
		"etcdctl user add node-a --no-password",
		"curl -H @$HOME/.botctl-auth https://10.0.0.11:8391/status",
		"journalctl -u botctl -n 200",
		"read -rs NATS_PASSWORD && export NATS_PASSWORD   # the nats CLI reads it as --password",
	}
	hit := func(s string) string { m, _ := argvSecret(s); return m }
	for _, s := range bad {
		if hit(s) == "" {
			t.Errorf("not caught: %s", s)
		}
	}
	for _, s := range good {
		if m := hit(s); m != "" {
			t.Errorf("caught %q in a safe form: %s", m, s)
		}
	}
}
