package wecomsim

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
)

// The "todo" business type: a small part of WeCom's to-dos as the official
// plugin's wecom-todo skill documents them: create_todo, get_todo_list,
// get_todo_detail and delete_todo. The to-dos are the simulator's own,
// per bot, kept while it runs. Times are "YYYY-MM-DD HH:mm:ss" Beijing
// time (MCPTimeLayout). Under the member scope (MCPAccess) the caller is
// the requester: a to-do it creates is its own, and it lists its own
// to-dos only.

// Statuses of a to-do (todo_status) and of a follower in it
// (follower_status), as the skill documents them.
const (
	TodoDone       = 0
	TodoInProgress = 1
	TodoDeleted    = 2

	FollowerRefused  = 0
	FollowerAccepted = 1
	FollowerDone     = 2
)

// mcpMaxTodos bounds the to-dos one bot keeps; mcpMaxTodoDetail the ids
// one get_todo_detail reads (the skill's 20).
const (
	mcpMaxTodos      = 1000
	mcpMaxTodoDetail = 20
)

// Todo is one to-do as get_todo_detail answers it.
type Todo struct {
	TodoID       string       `json:"todo_id"`
	TodoStatus   int          `json:"todo_status"`
	Content      string       `json:"content"`
	FollowerList TodoFollower `json:"follower_list"`
	CreatorID    string       `json:"creator_id"`
	EndTime      string       `json:"end_time,omitempty"`
	CreateTime   string       `json:"create_time"`
}

// TodoFollower is a to-do's follower list.
type TodoFollower struct {
	Followers []TodoFollowerEntry `json:"followers"`
}

// TodoFollowerEntry is one follower and their status.
type TodoFollowerEntry struct {
	FollowerID     string `json:"follower_id"`
	FollowerStatus int    `json:"follower_status"`
}

var todoTools = map[string]mcpTool{
	"create_todo": {
		description: "创建待办，可指定内容、参与人、截止时间",
		inputSchema: map[string]any{"type": "object", "required": []string{"content", "follower_list"}, "properties": map[string]any{
			"content": map[string]any{"type": "string"}, "end_time": map[string]any{"type": "string"},
			"follower_list": map[string]any{"type": "object", "properties": map[string]any{"followers": map[string]any{"type": "array", "items": map[string]any{
				"type": "object", "properties": map[string]any{"follower_id": map[string]any{"type": "string"}, "follower_status": map[string]any{"type": "integer"}}}}}}}},
		handler: todoCreate{},
	},
	"get_todo_list": {
		description: "获取指定用户的待办列表",
		inputSchema: map[string]any{"type": "object", "required": []string{"follower_id"}, "properties": map[string]any{
			"follower_id": map[string]any{"type": "string"}, "todo_status": map[string]any{"type": "integer"}, "cursor": map[string]any{"type": "string"}}},
		handler: todoList{},
	},
	"get_todo_detail": {
		description: "根据待办 ID 列表批量获取待办详情",
		inputSchema: map[string]any{"type": "object", "required": []string{"todo_id_list"}, "properties": map[string]any{
			"todo_id_list": map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}},
		handler: todoDetail{},
	},
	"delete_todo": {
		description: "删除待办",
		inputSchema: map[string]any{"type": "object", "required": []string{"todo_id"}, "properties": map[string]any{"todo_id": map[string]any{"type": "string"}}},
		handler:     todoDelete{},
	},
}

// Todos are bot's to-dos now, oldest first, deleted ones included.
func (s *Server) Todos(bot string) []Todo {
	s.mcp.mu.Lock()
	defer s.mcp.mu.Unlock()
	return slices.Clone(s.mcp.todos[bot])
}

type todoCreate struct{}

func (todoCreate) call(s *Server, cc mcpCall, raw json.RawMessage) (any, error) {
	var q struct {
		Content      string       `json:"content"`
		FollowerList TodoFollower `json:"follower_list"`
		EndTime      string       `json:"end_time"`
	}
	if err := json.Unmarshal(raw, &q); err != nil || q.Content == "" || len(q.FollowerList.Followers) == 0 {
		return nil, bizInvalid("arguments must be {\"content\":…,\"follower_list\":{\"followers\":[{\"follower_id\":…}]},\"end_time\":…}")
	}
	if q.EndTime != "" {
		if _, err := time.ParseInLocation(MCPTimeLayout, q.EndTime, MCPTimeZone); err != nil {
			return nil, bizInvalid("end_time must be YYYY-MM-DD HH:mm:ss")
		}
	}
	for i, f := range q.FollowerList.Followers {
		if f.FollowerID == "" {
			return nil, bizInvalid("follower_list.followers[" + strconv.Itoa(i) + "].follower_id is required")
		}
	}
	if _, err := s.authorize(cc); err != nil {
		return nil, err
	}
	s.mcp.mu.Lock()
	defer s.mcp.mu.Unlock()
	if len(s.mcp.todos[cc.bot]) >= mcpMaxTodos {
		return nil, bizInvalid("the simulator keeps at most " + strconv.Itoa(mcpMaxTodos) + " to-dos a bot")
	}
	if s.mcp.todos == nil {
		s.mcp.todos = map[string][]Todo{}
	}
	t := Todo{TodoID: newID("todo"), TodoStatus: TodoInProgress, Content: q.Content, FollowerList: q.FollowerList,
		CreatorID: cc.requester, EndTime: q.EndTime, CreateTime: s.now().In(MCPTimeZone).Format(MCPTimeLayout)}
	s.mcp.todos[cc.bot] = append(s.mcp.todos[cc.bot], t)
	return map[string]any{"todo_id": t.TodoID}, nil
}

type todoList struct{}

func (todoList) call(s *Server, cc mcpCall, raw json.RawMessage) (any, error) {
	var q struct {
		FollowerID string `json:"follower_id"`
		TodoStatus *int   `json:"todo_status"`
		Cursor     string `json:"cursor"`
	}
	if err := json.Unmarshal(raw, &q); err != nil || q.FollowerID == "" {
		return nil, bizInvalid("arguments must be {\"follower_id\":…,\"todo_status\":0|1,\"cursor\":…}")
	}
	acc, err := s.authorize(cc)
	if err != nil {
		return nil, err
	}
	if acc.Scope == MCPScopeMember && q.FollowerID != cc.requester {
		return nil, &mcpBizError{code: ErrCodeMCPUnauthorized, msg: "member " + quote(cc.requester) + " may list their own to-dos only"}
	}
	offset := 0
	if q.Cursor != "" {
		if offset, err = strconv.Atoi(q.Cursor); err != nil || offset < 0 {
			return nil, bizInvalid("cursor " + quote(q.Cursor) + " is not one this server gave")
		}
	}
	type item struct {
		TodoID     string `json:"todo_id"`
		TodoStatus int    `json:"todo_status"`
		Content    string `json:"content"`
		EndTime    string `json:"end_time,omitempty"`
	}
	var out []item
	s.mcp.mu.Lock()
	for _, t := range s.mcp.todos[cc.bot] {
		mine := t.CreatorID == q.FollowerID || slices.ContainsFunc(t.FollowerList.Followers, func(f TodoFollowerEntry) bool { return f.FollowerID == q.FollowerID })
		if t.TodoStatus == TodoDeleted || !mine || (q.TodoStatus != nil && *q.TodoStatus != t.TodoStatus) {
			continue
		}
		out = append(out, item{TodoID: t.TodoID, TodoStatus: t.TodoStatus, Content: t.Content, EndTime: t.EndTime})
	}
	s.mcp.mu.Unlock()
	page, next := pageOf(out, offset)
	return map[string]any{"todo_list": page, "next_cursor": next}, nil
}

type todoDetail struct{}

func (todoDetail) call(s *Server, cc mcpCall, raw json.RawMessage) (any, error) {
	var q struct {
		IDs []string `json:"todo_id_list"`
	}
	if err := json.Unmarshal(raw, &q); err != nil || len(q.IDs) == 0 || len(q.IDs) > mcpMaxTodoDetail {
		return nil, bizInvalid("arguments must be {\"todo_id_list\":[…]}: 1 to " + strconv.Itoa(mcpMaxTodoDetail) + " ids")
	}
	if _, err := s.authorize(cc); err != nil {
		return nil, err
	}
	s.mcp.mu.Lock()
	defer s.mcp.mu.Unlock()
	list := []Todo{}
	for _, t := range s.mcp.todos[cc.bot] {
		if slices.Contains(q.IDs, t.TodoID) {
			list = append(list, t)
		}
	}
	return map[string]any{"data_list": list}, nil
}

type todoDelete struct{}

func (todoDelete) call(s *Server, cc mcpCall, raw json.RawMessage) (any, error) {
	var q struct {
		TodoID string `json:"todo_id"`
	}
	if err := json.Unmarshal(raw, &q); err != nil || q.TodoID == "" {
		return nil, bizInvalid("arguments must be {\"todo_id\":…}")
	}
	acc, err := s.authorize(cc)
	if err != nil {
		return nil, err
	}
	s.mcp.mu.Lock()
	defer s.mcp.mu.Unlock()
	todos := s.mcp.todos[cc.bot]
	for i := range todos {
		if todos[i].TodoID != q.TodoID || todos[i].TodoStatus == TodoDeleted {
			continue
		}
		if acc.Scope == MCPScopeMember && todos[i].CreatorID != cc.requester {
			return nil, &mcpBizError{code: ErrCodeMCPUnauthorized, msg: "member " + quote(cc.requester) + " may delete the to-dos they created only"}
		}
		todos[i].TodoStatus = TodoDeleted
		return map[string]any{}, nil
	}
	return nil, bizInvalid("no to-do " + quote(q.TodoID))
}
