package config

import (
	"net/url"
	"os"
	"strings"
	"time"
)

// Alert is where alerts go and how they are grouped (pkg/heal/alert). With no
// sink configured, incidents are still recorded (botctl incidents) but
// nobody is paged, and the node says so at start.
type Alert struct {
	// WeComRobotURLFile is a file holding the WeCom group robot's webhook
	// URL (https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=…; the key
	// is a secret, so it is read from a file, never given in argv).
	WeComRobotURLFile string `yaml:"wecom_robot_url_file"`
	// WebhookURL is a generic JSON webhook (the alert as JSON); a
	// credential in it is redacted in logs. WebhookURLFile reads it from
	// a file instead.
	WebhookURL     string `yaml:"webhook_url"`
	WebhookURLFile string `yaml:"webhook_url_file"`
	// WeComRobotLevels and WebhookLevels are the alert levels each sink
	// receives: auto (botctl is fixing it), human (a person must act),
	// or both (the default). The synthetic alert reaches every sink
	// whatever its levels. A group that pages people takes [human].
	WeComRobotLevels []string `yaml:"wecom_robot_levels"`
	WebhookLevels    []string `yaml:"webhook_levels"`
	// Window merges outages of several bots (default 60s); EscalateAfter
	// escalates an automatic recovery still failing (default 5m);
	// FlapWindow damps a flapping bot (default 10m); Synthetic is the
	// synthetic alert's interval (default 24h; 0 turns it off).
	Window        time.Duration `yaml:"window"`
	EscalateAfter time.Duration `yaml:"escalate_after"`
	FlapWindow    time.Duration `yaml:"flap_window"`
	Synthetic     time.Duration `yaml:"synthetic"`
}

func alertDefaults() Alert {
	return Alert{WeComRobotLevels: []string{"auto", "human"}, WebhookLevels: []string{"auto", "human"}, Window: 60 * time.Second, EscalateAfter: 5 * time.Minute, FlapWindow: 10 * time.Minute, Synthetic: 24 * time.Hour}
}

var alertKeys = []Key{
	{Name: "alert.wecom_robot_url_file", Flag: "alert-wecom-robot-url-file", Usage: "file holding the WeCom group robot webhook URL alerts go to", set: str(func(c *Config) *string { return &c.Alert.WeComRobotURLFile })},
	{Name: "alert.webhook_url", Flag: "alert-webhook-url", Usage: "generic JSON webhook alerts go to", set: str(func(c *Config) *string { return &c.Alert.WebhookURL })},
	{Name: "alert.webhook_url_file", Flag: "alert-webhook-url-file", Usage: "file holding the generic JSON webhook URL", set: str(func(c *Config) *string { return &c.Alert.WebhookURLFile })},
	{Name: "alert.wecom_robot_levels", Flag: "alert-wecom-robot-levels", Usage: "alert levels the WeCom group robot receives: auto, human, or both, comma-separated (a YAML list in the file)", set: func(c *Config, s string) error {
		c.Alert.WeComRobotLevels = splitList(s)
		return nil
	}, list: func(c *Config, items []string) { c.Alert.WeComRobotLevels = items }},
	{Name: "alert.webhook_levels", Flag: "alert-webhook-levels", Usage: "alert levels the JSON webhook receives: auto, human, or both, comma-separated (a YAML list in the file)", set: func(c *Config, s string) error {
		c.Alert.WebhookLevels = splitList(s)
		return nil
	}, list: func(c *Config, items []string) { c.Alert.WebhookLevels = items }},
	{Name: "alert.window", Flag: "alert-window", Usage: "outages of several bots within this become one merged alert", set: dur(func(c *Config) *time.Duration { return &c.Alert.Window })},
	{Name: "alert.escalate_after", Flag: "alert-escalate-after", Usage: "an automatic recovery still failing after this pages a person", set: dur(func(c *Config) *time.Duration { return &c.Alert.EscalateAfter })},
	{Name: "alert.flap_window", Flag: "alert-flap-window", Usage: "a flapping bot gets one summary alert per this", set: dur(func(c *Config) *time.Duration { return &c.Alert.FlapWindow })},
	{Name: "alert.synthetic", Flag: "alert-synthetic", Usage: "interval of the synthetic alert through every sink (0 off)", set: dur(func(c *Config) *time.Duration { return &c.Alert.Synthetic })},
}

func init() { Keys = append(Keys, alertKeys...) }

// AlertSinks returns the configured sinks' URLs (read from their files).
func (a Alert) AlertSinks() (robot, webhook string, err error) {
	read := func(path string) (string, error) {
		raw, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(raw)), nil
	}
	if a.WeComRobotURLFile != "" {
		if robot, err = read(a.WeComRobotURLFile); err != nil {
			return "", "", err
		}
	}
	webhook = a.WebhookURL
	if a.WebhookURLFile != "" {
		if webhook, err = read(a.WebhookURLFile); err != nil {
			return "", "", err
		}
	}
	return robot, webhook, nil
}

func (c *Config) validateAlert(bad func(key, format string, args ...any)) {
	a := c.Alert
	checkURL := func(key, u string) {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			bad(key, "want an http:// or https:// URL")
		}
	}
	if a.WeComRobotURLFile != "" {
		raw, err := os.ReadFile(a.WeComRobotURLFile)
		switch {
		case err != nil:
			bad("alert.wecom_robot_url_file", "%v", err)
		default:
			u := strings.TrimSpace(string(raw))
			checkURL("alert.wecom_robot_url_file", u)
			if p, err := url.Parse(u); err == nil && p.Query().Get("key") == "" {
				bad("alert.wecom_robot_url_file", "the URL has no ?key=: copy the robot's whole webhook address")
			}
		}
	}
	if a.WebhookURL != "" && a.WebhookURLFile != "" {
		bad("alert.webhook_url", "set alert.webhook_url or alert.webhook_url_file, not both")
	}
	if a.WebhookURL != "" {
		checkURL("alert.webhook_url", a.WebhookURL)
	}
	if a.WebhookURLFile != "" {
		if raw, err := os.ReadFile(a.WebhookURLFile); err != nil {
			bad("alert.webhook_url_file", "%v", err)
		} else {
			checkURL("alert.webhook_url_file", strings.TrimSpace(string(raw)))
		}
	}
	checkLevels := func(key string, levels []string) {
		if len(levels) == 0 {
			bad(key, "is empty: give auto, human or both (remove the sink to send it nothing)")
		}
		for _, l := range levels {
			if l != "auto" && l != "human" {
				bad(key, "%q is not a level: use auto (botctl is fixing it), human (a person must act), or both", l)
			}
		}
	}
	checkLevels("alert.wecom_robot_levels", a.WeComRobotLevels)
	checkLevels("alert.webhook_levels", a.WebhookLevels)
	if a.Window <= 0 {
		bad("alert.window", "must be positive, got %s", a.Window)
	}
	if a.EscalateAfter <= a.Window {
		bad("alert.escalate_after", "%s must be longer than alert.window %s", a.EscalateAfter, a.Window)
	}
	if a.FlapWindow <= 0 {
		bad("alert.flap_window", "must be positive, got %s", a.FlapWindow)
	}
	if a.Synthetic < 0 {
		bad("alert.synthetic", "must be 0 (off) or positive, got %s", a.Synthetic)
	}
}
