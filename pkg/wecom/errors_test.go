package wecom_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/botctl/botctl/pkg/wecom"
)

func TestIsConnectionError(t *testing.T) {
	ack := func(code int) error {
		return fmt.Errorf("push task t1: %w", &wecom.AckError{Cmd: wecom.CmdSendMsg, ReqID: "r", ErrCode: code})
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"846609 not subscribed", ack(wecom.ErrCodeNotSubscribed), true},
		{"-1 system busy", ack(wecom.ErrCodeSystemBusy), true},
		{"6000 command conflict", ack(wecom.ErrCodeCommandConflict), true},
		{"846601 transient", ack(wecom.ErrCodeTransient1), true},
		{"846602 transient", ack(wecom.ErrCodeTransient2), true},
		{"closed", fmt.Errorf("x: %w", &wecom.CloseError{Reason: wecom.ReasonNetwork}), true},
		{"ack timeout", fmt.Errorf("x: %w", wecom.ErrAckTimeout), true},
		{"ack unknown", fmt.Errorf("x: %w", wecom.ErrAckUnknown), true},
		{"subscribe refused", &wecom.SubscribeError{ErrCode: 6000}, true},
		{"846605 invalid req_id", ack(wecom.ErrCodeInvalidReqID), false},
		{"846608 stream expired", ack(wecom.ErrCodeStreamExpired), false},
		{"40008 invalid msgtype", ack(wecom.ErrCodeInvalidMsgType), false},
		{"40058 invalid param", ack(wecom.ErrCodeInvalidParam), false},
		{"40060 content too long", ack(wecom.ErrCodeContentTooLong), false},
		{"45009 rate limited", ack(wecom.ErrCodeRateLimited), false},
		{"846604 chat not found", ack(wecom.ErrCodeChatNotFound), false},
		{"content too large (local)", fmt.Errorf("x: %w", wecom.ErrContentTooLarge), false},
		{"invalid frame (local)", wecom.ErrInvalidFrame, false},
		{"context canceled", context.Canceled, false},
		{"auth failed", &wecom.AuthError{ErrCode: 40001}, false},
	} {
		if got := wecom.IsConnectionError(tc.err); got != tc.want {
			t.Errorf("%s: IsConnectionError(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestSubscribeErrorsAreDistinct(t *testing.T) {
	auth := error(&wecom.AuthError{BotID: "b", ErrCode: wecom.ErrCodeInvalidCredential})
	refused := error(&wecom.SubscribeError{BotID: "b", ErrCode: wecom.ErrCodeCommandConflict})
	if !errors.Is(auth, wecom.ErrAuthFailed) || errors.Is(auth, wecom.ErrSubscribeRefused) {
		t.Errorf("AuthError: Is(ErrAuthFailed) %v, Is(ErrSubscribeRefused) %v", errors.Is(auth, wecom.ErrAuthFailed), errors.Is(auth, wecom.ErrSubscribeRefused))
	}
	if errors.Is(refused, wecom.ErrAuthFailed) || !errors.Is(refused, wecom.ErrSubscribeRefused) {
		t.Errorf("SubscribeError: Is(ErrAuthFailed) %v, Is(ErrSubscribeRefused) %v", errors.Is(refused, wecom.ErrAuthFailed), errors.Is(refused, wecom.ErrSubscribeRefused))
	}
	if !wecom.IsAuthErrCode(wecom.ErrCodeInvalidCredential) {
		t.Error("40001 is not an auth errcode")
	}
	for _, code := range []int{wecom.ErrCodeCommandConflict, wecom.ErrCodeSystemBusy, wecom.ErrCodeTransient1, wecom.ErrCodeInvalidParam} {
		if wecom.IsAuthErrCode(code) {
			t.Errorf("%d taken for an auth errcode", code)
		}
	}
}
