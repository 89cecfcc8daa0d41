// Package web is once serve: the HTTP face of a store, for people and for programs. It serves
//
//   - a JSON API under /api/v1 (docs/api.md): tasks, history with keyset pages and filters, the
//     slots waiting for review and their resolution, live leases with progress, the attempts still
//     running with whether each holder's lease is live (running.go), the timeline, and the daemon's
//     jobs with pause, resume and trigger;
//   - /metrics for Prometheus (package internal/metrics);
//   - a dashboard: the overview (an attempt whose holder is gone shown with the once resolve
//     commands that settle it), the timeline (overlapping attempts of one task drawn red, both
//     holders named), the review queue with a resolve form, live leases, run detail and jobs, in
//     English and 简体中文.
//
// It reads the store through package store only, as every command does, so it works for any
// deployment, with or without the daemon.
//
// Access (auth.go): reads need no credentials only on a loopback listener and only when the
// request names a loopback host (a page of another site rebinding its name to 127.0.0.1 gets
// nothing); every change needs the bearer token (Config.Token), and a browser form carries a CSRF
// token bound to the session. A server without a token is read-only. No page, answer, log line or
// metric carries a password: the DSN is shown redacted.
package web
