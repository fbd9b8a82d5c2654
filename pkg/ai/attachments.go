package ai

import (
	"encoding/base64"
	"fmt"
	"mime"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"
)

// DemoAttachments is the demo backend's account of the files a question
// came with, put before its DemoAnswer: one line per file with its kind,
// name, MIME type, byte size and, for an image, its pixel size. "" for
// none, so a text question's answer is DemoAnswer's alone.
func DemoAttachments(atts []Attachment) string {
	if len(atts) == 0 {
		return ""
	}
	var sb strings.Builder
	noun := "files"
	if len(atts) == 1 {
		noun = "file"
	}
	fmt.Fprintf(&sb, "You sent %d %s:\n", len(atts), noun)
	for _, a := range atts {
		fmt.Fprintf(&sb, "- %s %s: %s, %d bytes", a.Kind, a.Name, a.MIME, a.Size)
		if a.Width > 0 && a.Height > 0 {
			fmt.Fprintf(&sb, ", %d×%d pixels", a.Width, a.Height)
		}
		if a.Quoted {
			sb.WriteString(" (quoted)")
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

// Caps of what the openai backend sends of a question's files.
const (
	// openAIMaxImageBytes: a larger image is described, not sent (data
	// URLs of more are refused by most providers).
	openAIMaxImageBytes = 10 << 20
	// openAIMaxTextBytes: a text file is sent up to this, cut with a note.
	openAIMaxTextBytes = 64 << 10
)

// isText reports whether a file of MIME type typ (or named name) reads
// as text: text/*, JSON, XML, YAML, CSV, markdown, source code.
func isText(typ, name string) bool {
	base, _, _ := mime.ParseMediaType(typ)
	switch {
	case strings.HasPrefix(base, "text/"),
		base == "application/json", base == "application/xml", base == "application/yaml", base == "application/x-yaml",
		base == "application/javascript", base == "application/x-sh", base == "application/toml",
		strings.HasSuffix(base, "+json"), strings.HasSuffix(base, "+xml"):
		return true
	}
	dot := strings.LastIndexByte(name, '.')
	if dot < 0 {
		return false
	}
	switch strings.ToLower(name[dot+1:]) {
	case "txt", "md", "markdown", "csv", "tsv", "json", "jsonl", "yaml", "yml", "toml", "xml", "log", "ini", "go", "py", "js", "ts", "java", "c", "h", "cpp", "rs", "sh", "sql", "html", "css":
		return true
	}
	return false
}

// userParts is the last user message with its files, as content parts:
// the question, each text file's content (up to openAIMaxTextBytes),
// a line per other file (kind, name, type, size), and each image as an
// image input (a data URL) for vision models.
func userParts(question string, atts []Attachment) ([]openai.ChatCompletionContentPartUnionParam, error) {
	var parts []openai.ChatCompletionContentPartUnionParam
	var notes []string
	for _, a := range atts {
		desc := fmt.Sprintf("%s %q (%s, %d bytes", a.Kind, a.Name, a.MIME, a.Size)
		if a.Width > 0 {
			desc += ", " + strconv.Itoa(a.Width) + "×" + strconv.Itoa(a.Height) + " pixels"
		}
		desc += ")"
		if a.Quoted {
			desc += ", from the quoted message"
		}
		switch {
		case a.Kind == "image" && strings.HasPrefix(a.MIME, "image/") && a.Size <= openAIMaxImageBytes && a.Path != "":
			raw, err := os.ReadFile(a.Path)
			if err != nil {
				return nil, fmt.Errorf("%w: read attachment %s: %v", ErrBackend, a.Name, err)
			}
			parts = append(parts, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{
				URL: "data:" + a.MIME + ";base64," + base64.StdEncoding.EncodeToString(raw)}))
			notes = append(notes, "The user sent the image "+desc+", attached.")
		case a.Kind == "file" && isText(a.MIME, a.Name) && a.Path != "":
			raw, err := readUpTo(a.Path, openAIMaxTextBytes)
			if err != nil {
				return nil, fmt.Errorf("%w: read attachment %s: %v", ErrBackend, a.Name, err)
			}
			text := strings.ToValidUTF8(string(raw), "")
			if a.Size > int64(len(raw)) {
				text += fmt.Sprintf("\n[… cut: the first %d of %d bytes]", len(raw), a.Size)
			}
			notes = append(notes, fmt.Sprintf("The user sent the text file %s; its content:\n```\n%s\n```", desc, text))
		default:
			notes = append(notes, "The user sent the "+desc+"; its content is not shown to you.")
		}
	}
	text := strings.Join(notes, "\n")
	if question != "" {
		text += "\n\n" + question
	}
	return append([]openai.ChatCompletionContentPartUnionParam{openai.TextContentPart(text)}, parts...), nil
}

// readUpTo reads at most n bytes of path, cut back to a rune boundary.
func readUpTo(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, n)
	got := 0
	for got < n {
		k, err := f.Read(buf[got:])
		got += k
		if err != nil {
			break
		}
	}
	buf = buf[:got]
	for len(buf) > 0 && !utf8.Valid(buf) && len(buf) > got-utf8.UTFMax {
		buf = buf[:len(buf)-1]
	}
	return buf, nil
}
