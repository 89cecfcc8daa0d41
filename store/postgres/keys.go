package postgres

import "github.com/once-run/once/store"

// The keys (store.Keys) live in internal/sqlstore, shared with the other SQL backend; migration
// 002_keys.sql creates their table.
var _ store.Keys = (*Store)(nil)
