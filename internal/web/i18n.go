package web

import (
	"net/http"
	"strings"
	"time"
)

// The dashboard speaks English and 简体中文 (our first users). A page's language is ?lang= (kept
// in a cookie), else the cookie, else the browser's Accept-Language; its times are UTC or the
// browser's local time (?tz=local, done in app.js so that it is the reader's zone, not the
// server's).

const (
	langEN = "en"
	langZH = "zh-CN"
)

var messages = map[string]map[string]string{
	langEN: {
		"status_gone": "holder gone", "gone": "Holder gone",
		"legend_attempts": "Attempts", "legend_overlap": "overlapping (two holders at once)",
		"gone_intro": "These attempts are still recorded as running, but their holder's lease is gone: the holder died or was cut off (kill -9, a host lost), and nobody knows whether its work finished. The task's next run marks each one unknown, and its slot then waits for review. To settle one now, paste one of its commands (once resolve marks the attempt unknown first).",
		"gone_again": "Run it again (add --note TEXT to say why):", "gone_done": "Or mark it done:",
		"gone_held":          "The task is held now ({holder}, token {token}), so once resolve refuses (exit 75) until no grant of the task is live; the task's next run marks this attempt unknown.",
		"pw_hidden":          "The store's password is shown as xxxxx: write it in its place, or set ONCE_STORE and leave --store out.",
		"running_more":       "More attempts are running than the {n} read (the first of the store's index): an attempt whose holder is gone may not be shown here. once status lists the same.",
		"running_unlisted":   "Not listed (an older once ran them and they have not run since; their next run indexes them; once doctor scans history for them): the attempts running in",
		"running_error":      "The attempts running could not be read this time (an attempt whose holder is gone is not shown; once status tries again):",
		"running_unlistable": "This store cannot list the attempts running: an attempt whose holder is gone is not shown here; once doctor finds them.",
		"keys":               "Keys", "keys_intro": "Business idempotency keys (once keys, once effect), by scope. Unknown: claimed two-phase by a run or a claim that ended without saying whether the work happened.",
		"no_scopes": "No business key has been claimed on this store.", "scope": "Scope", "key": "Key", "claimed": "Claimed",
		"key_pending": "pending", "key_unknown": "unknown", "key_done": "done", "all": "all",
		"h_unknown": "Unknown", "h_pending": "Pending",
		"count_max": "Each scope's keys are counted up to {n}; a count with + is of the first {n}.",
		"keys_read": "Read {read} keys of this scope: {shown} shown.", "read_on": "Read on",
		"unknown_hint": "Nobody knows whether an unknown key's work happened. Check downstream; if it did not happen, hand the key out again:",
		"title":        "once", "overview": "Overview", "timeline": "Timeline", "review": "Review", "leases": "Leases",
		"jobs": "Jobs", "login": "Log in", "logout": "Log out", "task": "Task", "status": "Status",
		"last": "Last attempt", "last_success": "Last success", "no_success_in": "none in the newest {n} attempts", "success_unknown": "not known", "next": "Next run", "trend": "Duration trend",
		"slot": "Slot", "attempt": "Attempt", "state": "State", "holder": "Holder", "started": "Started",
		"ended": "Ended", "duration": "Duration", "records": "Records", "checkpoint": "Checkpoint",
		"progress": "Progress", "token": "Token", "run_id": "Run ID", "note": "Note", "exit": "Exit code",
		"expires": "Expires", "acquired": "Acquired", "output": "Output (tail)", "tail on the slot": "on the slot's page", "env": "Environment it saw",
		"history": "History", "resolution": "Resolution", "resolve_ok": "Resolve as succeeded (it is done)",
		"resolve_failed": "Resolve as failed (run it again)", "by": "Who decides", "note_required": "Why (required, kept in history)",
		"no_tasks": "No task has run on this store yet.", "no_review": "No slot is waiting for review.",
		"no_leases": "No lease is held now.", "no_jobs": "This server knows no daemon jobs: start it with --jobs PATH, or use once daemon --http.",
		"overlaps": "Overlapping attempts", "no_overlaps": "No two attempts of one task overlapped in this range.",
		"overlap_with": "ran at the same time as", "from": "From", "to": "To", "show": "Show", "earlier": "Earlier", "later": "Later", "more": "Next page",
		"truncated": "The range holds more entries than one timeline shows: the newest are drawn. Narrow the range.",
		"readonly":  "This server is read-only: start once serve with --token-file to allow changes.",
		"csrf":      "This form is stale or came from another site: reload the page and try again.",
		"busy":      "This server is answering as many requests as it takes at once: reload the page in a moment.",
		"too_many":  "Too many wrong tokens from your address: try again in {n} s.",
		"bad_token": "That is not this server's token.", "token_label": "The token (the contents of the file given to --token-file)",
		"waiting_since": "waiting since", "schedule": "Schedule", "paused": "paused", "active": "active",
		"pause": "Pause", "resume": "Resume", "trigger": "Run now", "running_on": "Running on", "never": "never ran",
		"events": "Events", "store": "Store", "times": "Times", "utc": "UTC", "local": "local",
		"status_running": "running", "status_review": "waiting for review", "status_ok": "succeeded",
		"status_failed": "failed", "status_unknown": "unknown", "status_never": "never ran",
		"live": "updates every second", "evidence": "Evidence", "lease_now": "Lease held now",
		"done": "Done", "resolved": "Recorded", "error": "Error", "back": "Back", "resolved_as": "resolved as",
		"state_running": "running", "state_succeeded": "succeeded", "state_failed": "failed", "state_unknown": "unknown",
		"state_skipped": "skipped", "state_busy": "busy", "state_review": "review", "state_missed": "missed",
	},
	langZH: {
		"status_gone": "持有者已失联", "gone": "持有者已失联",
		"legend_attempts": "尝试", "legend_overlap": "重叠（两个持有者同时运行）",
		"gone_intro": "这些尝试仍记录为运行中，但其持有者的租约已失效：持有者已死亡或被切断（kill -9、主机丢失），没有人知道其工作是否完成。该任务的下一次运行会把它们标记为未知，其时段随后等待人工审核。要现在处理，请粘贴下面的命令之一（once resolve 会先把该尝试标记为未知）。",
		"gone_again": "重新运行（可加 --note TEXT 说明原因）：", "gone_done": "或确认为已完成：",
		"gone_held":          "该任务现在被持有（{holder}，令牌 {token}），在该任务没有有效授权之前 once resolve 会拒绝（退出码 75）；该任务的下一次运行会把这个尝试标记为未知。",
		"pw_hidden":          "存储的密码显示为 xxxxx：请在该处写回密码，或设置 ONCE_STORE 并省略 --store。",
		"running_more":       "正在运行的尝试多于已读取的 {n} 个（按存储索引的前若干个）：持有者已失联的尝试可能未在此显示。once status 列出的是同一份。",
		"running_error":      "本次无法读取正在运行的尝试（持有者已失联的尝试未显示；once status 会重试）：",
		"running_unlisted":   "未列出（由旧版 once 运行且之后未再运行；下一次运行会为其建立索引；once doctor 会扫描历史查找）：以下任务中正在运行的尝试",
		"running_unlistable": "此存储无法列出正在运行的尝试：持有者已失联的尝试不会在此显示；once doctor 可以找到它们。",
		"keys":               "幂等键", "keys_intro": "业务幂等键（once keys、once effect），按作用域列出。未知：两阶段认领的键，其运行或认领已结束，却没有说明工作是否完成。",
		"no_scopes": "此存储上还没有认领过业务键。", "scope": "作用域", "key": "键", "claimed": "认领时间",
		"key_pending": "处理中", "key_unknown": "未知", "key_done": "已完成", "all": "全部",
		"h_unknown": "未知", "h_pending": "处理中",
		"count_max": "每个作用域最多统计 {n} 个键；带 + 的数字只统计了前 {n} 个。",
		"keys_read": "读取了此作用域的 {read} 个键：显示 {shown} 个。", "read_on": "继续读取",
		"unknown_hint": "未知键的工作是否完成无人知晓。请检查下游；若未完成，重新分发该键：",
		"title":        "once", "overview": "总览", "timeline": "时间线", "review": "待审核", "leases": "租约",
		"jobs": "定时任务", "login": "登录", "logout": "退出", "task": "任务", "status": "状态",
		"last": "最近一次尝试", "last_success": "最近成功", "no_success_in": "最近 {n} 次尝试中没有成功", "success_unknown": "未知", "next": "下次运行", "trend": "耗时趋势",
		"slot": "时段", "attempt": "尝试", "state": "状态", "holder": "持有者", "started": "开始",
		"ended": "结束", "duration": "耗时", "records": "记录数", "checkpoint": "检查点",
		"progress": "进度", "token": "令牌", "run_id": "运行 ID", "note": "备注", "exit": "退出码",
		"expires": "到期", "acquired": "获得", "output": "输出（末尾）", "tail on the slot": "见该时段的页面", "env": "运行时环境变量",
		"history": "历史", "resolution": "处理结论", "resolve_ok": "确认为成功（已完成）",
		"resolve_failed": "确认为失败（重新运行）", "by": "处理人", "note_required": "原因（必填，记入历史）",
		"no_tasks": "此存储上还没有任务运行过。", "no_review": "没有等待审核的时段。",
		"no_leases": "当前没有被持有的租约。", "no_jobs": "此服务不知道守护进程的任务：请用 --jobs PATH 启动，或使用 once daemon --http。",
		"overlaps": "重叠的尝试", "no_overlaps": "此范围内同一任务没有两次尝试重叠。",
		"overlap_with": "与之同时运行", "from": "从", "to": "到", "show": "显示", "earlier": "更早", "later": "更晚", "more": "下一页",
		"truncated": "此范围内条目过多，只画出最新的部分。请缩小范围。",
		"readonly":  "此服务为只读：用 --token-file 启动 once serve 才能修改。",
		"csrf":      "表单已过期或来自其他网站：请刷新页面后重试。",
		"busy":      "服务正在处理的请求已达上限：请稍后刷新页面。",
		"too_many":  "您的地址输入错误令牌次数过多：请 {n} 秒后再试。",
		"bad_token": "令牌不正确。", "token_label": "令牌（--token-file 所给文件的内容）",
		"waiting_since": "等待自", "schedule": "计划", "paused": "已暂停", "active": "运行中",
		"pause": "暂停", "resume": "恢复", "trigger": "立即运行", "running_on": "运行节点", "never": "从未运行",
		"events": "事件", "store": "存储", "times": "时间", "utc": "UTC", "local": "本地",
		"status_running": "运行中", "status_review": "等待审核", "status_ok": "成功",
		"status_failed": "失败", "status_unknown": "结果未知", "status_never": "从未运行",
		"live": "每秒更新", "evidence": "证据", "lease_now": "当前租约",
		"done": "完成", "resolved": "已记录", "error": "错误", "back": "返回", "resolved_as": "已确认为",
		"state_running": "运行中", "state_succeeded": "成功", "state_failed": "失败", "state_unknown": "结果未知",
		"state_skipped": "已跳过", "state_busy": "被占用", "state_review": "待审核", "state_missed": "已错过",
	},
}

// lang picks the page's language and keeps an explicit choice in a cookie.
func lang(w http.ResponseWriter, r *http.Request) string {
	if l := r.URL.Query().Get("lang"); l == langEN || l == langZH {
		http.SetCookie(w, &http.Cookie{Name: "once_lang", Value: l, Path: "/", MaxAge: 365 * 24 * 3600, SameSite: http.SameSiteLaxMode})
		return l
	}
	if c, err := r.Cookie("once_lang"); err == nil && (c.Value == langEN || c.Value == langZH) {
		return c.Value
	}
	if strings.HasPrefix(strings.ToLower(r.Header.Get("Accept-Language")), "zh") {
		return langZH
	}
	return langEN
}

// zone is "local" or "utc": the times a page shows.
func zone(w http.ResponseWriter, r *http.Request) string {
	if z := r.URL.Query().Get("tz"); z == "local" || z == "utc" {
		http.SetCookie(w, &http.Cookie{Name: "once_tz", Value: z, Path: "/", MaxAge: 365 * 24 * 3600, SameSite: http.SameSiteLaxMode})
		return z
	}
	if c, err := r.Cookie("once_tz"); err == nil && c.Value == "local" {
		return "local"
	}
	return "utc"
}

// tr returns the translator of r's language (without setting cookies: for error pages).
func (s *Server) tr(r *http.Request) func(string) string {
	l := langEN
	if c, err := r.Cookie("once_lang"); err == nil && c.Value == langZH {
		l = langZH
	}
	return translator(l)
}

func translator(l string) func(string) string {
	m := messages[l]
	return func(k string) string {
		if v, ok := m[k]; ok {
			return v
		}
		return messages[langEN][k]
	}
}

// fmtDur shows a duration to a person: 850ms, 12.3s, 4m05s, 2h10m.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}
