package ai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/botctl/botctl/pkg/config"
)

const (
	// openAIMaxErrorText bounds the provider's message quoted in an error.
	openAIMaxErrorText = 300
)

type openAIBackend struct {
	cfg  OpenAIConfig
	key  string
	chat openai.ChatCompletionService
	// tools, when the bot's ai.tools names some: the gateway the model's
	// function calls are run through (openaitools.go).
	tools Tools
}

// newOpenAI builds the openai backend of a validated cfg
// (config.AIOpenAI.validate): the API key is read from its variable now.
func newOpenAI(cfg OpenAIConfig, env func(string) (string, bool)) (*openAIBackend, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = config.OpenAIDefaultBaseURL
	}
	if cfg.APIKeyEnv == "" {
		cfg.APIKeyEnv = config.OpenAIDefaultAPIKeyEnv
	}
	key, _ := env(cfg.APIKeyEnv)
	if key == "" {
		return nil, fmt.Errorf("config key ai.openai.api_key_env: environment variable %s is not set; set it to the endpoint's API key (any non-empty value if the server needs none)", cfg.APIKeyEnv)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = config.OpenAIDefaultTimeout
	}

	// A transport of our own: the SDK's default has a 10 minute header
	// timeout; ours is the answer's Timeout, enforced by the context.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.ResponseHeaderTimeout = 0
	// NewChatCompletionService, not NewClient: NewClient would also read
	// OPENAI_BASE_URL, OPENAI_ORG_ID, OPENAI_CUSTOM_HEADERS… from the
	// environment, behind the configuration's back.
	chat := openai.NewChatCompletionService(
		option.WithHTTPClient(&http.Client{Transport: transport}),
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(key),
		option.WithMaxRetries(0),
	)
	return &openAIBackend{cfg: cfg, key: key, chat: chat}, nil
}

func (b *openAIBackend) Name() string { return KindOpenAI + ":" + b.cfg.Model }

func (b *openAIBackend) params(req Request) (openai.ChatCompletionNewParams, error) {
	msgs := make([]openai.ChatCompletionMessageParamUnion, 0, len(req.Messages)+1)
	if b.cfg.SystemPrompt != "" {
		msgs = append(msgs, openai.SystemMessage(b.cfg.SystemPrompt))
	}
	last := -1 // the question: the last user message carries the files
	for i, m := range req.Messages {
		if m.Role == RoleUser {
			last = i
		}
	}
	for i, m := range req.Messages {
		switch m.Role {
		case RoleSystem:
			msgs = append(msgs, openai.SystemMessage(m.Content))
		case RoleUser:
			if i == last && len(req.Attachments) > 0 {
				parts, err := userParts(m.Content, req.Attachments)
				if err != nil {
					return openai.ChatCompletionNewParams{}, err
				}
				msgs = append(msgs, openai.UserMessage(parts))
				continue
			}
			msgs = append(msgs, openai.UserMessage(m.Content))
		case RoleAssistant:
			msgs = append(msgs, openai.AssistantMessage(m.Content))
		}
	}
	p := openai.ChatCompletionNewParams{Model: b.cfg.Model, Messages: msgs}
	if !b.cfg.NoUsage {
		// The last chunk then carries the answer's usage (usage.go).
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	}
	// 0 is "not sent": the model's own limit and default.
	if b.cfg.MaxTokens > 0 {
		p.MaxTokens = openai.Int(int64(b.cfg.MaxTokens))
	}
	if b.cfg.Temperature > 0 {
		p.Temperature = openai.Float(b.cfg.Temperature)
	}
	return p, nil
}

// Stream sends one streaming chat completion and emits each chunk's content
// (choice 0). The answer is complete when a chunk carries a finish_reason
// ("stop" or "length"); a stream that ends without one was cut: ErrBackend.
// When the model asks for the tools offered (openaitools.go), they are run
// and the model asked again, the answer going on where it was.
func (b *openAIBackend) Stream(ctx context.Context, req Request, emit func(string) error) error {
	if err := req.validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	params, err := b.params(req)
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithTimeoutCause(ctx, b.cfg.Timeout, errAnswerTimeout)
	defer cancel()
	offered := b.offer(runCtx, req, &params)
	for round := 1; ; round++ {
		if round == openAIToolRounds {
			params.Tools = nil // the last round: the model answers
		}
		text, calls, finish, err := b.round(ctx, runCtx, req, params, emit)
		if err != nil {
			return err
		}
		if finish == "tool_calls" && len(calls) > 0 && len(params.Tools) > 0 {
			b.runTools(runCtx, req, &params, offered, text, calls)
			continue
		}
		switch finish {
		case "":
			return fmt.Errorf("%w: %s: task %s: the stream ended before the answer did (no finish_reason)", ErrBackend, b.Name(), req.TaskID)
		case "content_filter":
			return fmt.Errorf("%w: %s: task %s: the provider's content filter stopped the answer", ErrBadRequest, b.Name(), req.TaskID)
		}
		return nil
	}
}

// round streams one completion of params: its text (emitted as it
// comes), the tool calls it asked for and its finish_reason.
func (b *openAIBackend) round(ctx, runCtx context.Context, req Request, params openai.ChatCompletionNewParams, emit func(string) error) (string, []*toolCall, string, error) {
	// Accept: the SDK says application/json; some proxies buffer
	// anything but an event stream.
	stream := b.chat.NewStreaming(runCtx, params, option.WithHeader("Accept", "text/event-stream"))
	defer stream.Close()
	finish := ""
	var text strings.Builder
	var calls toolCalls
	for stream.Next() {
		if u := stream.Current().Usage; u.JSON.PromptTokens.Valid() || u.JSON.CompletionTokens.Valid() {
			ReportUsage(ctx, Usage{In: u.PromptTokens, Out: u.CompletionTokens})
		}
		for _, c := range stream.Current().Choices {
			if c.Index != 0 {
				continue
			}
			if r := openAIReasoning(c.Delta.JSON.ExtraFields); r != "" {
				Think(ctx, r)
			}
			for _, tc := range c.Delta.ToolCalls {
				calls.add(tc)
			}
			if c.Delta.Content != "" {
				// The SDK passes a server's bytes on as they are: those
				// that are not UTF-8 become U+FFFD here.
				delta := strings.ToValidUTF8(c.Delta.Content, "\uFFFD")
				text.WriteString(delta)
				if err := emit(delta); err != nil {
					return "", nil, "", err
				}
			}
			if c.FinishReason != "" {
				finish = c.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		return "", nil, "", b.classify(ctx, runCtx, req, err)
	}
	return text.String(), calls.list(), finish, nil
}

// classify maps a failed stream to ctx.Err() or one of the sentinels.
func (b *openAIBackend) classify(ctx, runCtx context.Context, req Request, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if context.Cause(runCtx) == errAnswerTimeout {
		return fmt.Errorf("%w: %s: task %s: no complete answer within %s (ai.openai.timeout)", ErrTimeout, b.Name(), req.TaskID, b.cfg.Timeout)
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		status := apiErr.StatusCode
		msg := fmt.Sprintf("HTTP %d %s", status, http.StatusText(status))
		if text := b.redact(apiErr.Message); text != "" {
			msg += ": " + text
		}
		switch {
		case status == http.StatusUnauthorized:
			return fmt.Errorf("%w: %s: task %s: %s; check the API key in environment variable %s (ai.openai.api_key_env)", ErrBadRequest, b.Name(), req.TaskID, msg, b.cfg.APIKeyEnv)
		case status == http.StatusRequestTimeout || status == http.StatusConflict || status == http.StatusTooManyRequests || status >= 500:
			return fmt.Errorf("%w: %s: task %s: %s", ErrBackend, b.Name(), req.TaskID, msg)
		case status >= 400:
			return fmt.Errorf("%w: %s: task %s: %s", ErrBadRequest, b.Name(), req.TaskID, msg)
		}
		return fmt.Errorf("%w: %s: task %s: %s", ErrBackend, b.Name(), req.TaskID, msg)
	}
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		// An error event in the middle of the stream: the provider failed
		// after it had started answering.
		return fmt.Errorf("%w: %s: task %s: %s", ErrBackend, b.Name(), req.TaskID, b.redact(streamErr.Message))
	}
	return fmt.Errorf("%w: %s: task %s: %s", ErrBackend, b.Name(), req.TaskID, b.redact(err.Error()))
}

// redact bounds a provider's or transport's message and removes the key,
// should a server echo it.
func (b *openAIBackend) redact(s string) string {
	if len(b.key) >= 6 { // shorter is no secret, and would mangle the text
		s = strings.ReplaceAll(s, b.key, "[redacted]")
	}
	s = strings.TrimSpace(s)
	if len(s) > openAIMaxErrorText {
		s = strings.ToValidUTF8(s[:openAIMaxErrorText], "") + "…"
	}
	return s
}

// openAIReasoning is a delta's reasoning, which the API's schema lacks
// and compatible servers send beside content: reasoning_content
// (DeepSeek, Qwen, vLLM), or reasoning (OpenRouter, Ollama). "" when
// neither is a non-empty string.
func openAIReasoning(extra map[string]respjson.Field) string {
	for _, key := range []string{"reasoning_content", "reasoning"} {
		f, ok := extra[key]
		if !ok || f.Raw() == "" || f.Raw() == "null" {
			continue
		}
		var s string
		if err := json.Unmarshal([]byte(f.Raw()), &s); err == nil && s != "" {
			return s
		}
	}
	return ""
}
