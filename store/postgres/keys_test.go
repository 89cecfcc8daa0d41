package postgres

import (
	"testing"

	"github.com/once-run/once/internal/sqlstore/sqltest"
)

// TestKeysUpgradeFromV1: a version 1 schema (no keys table) is upgraded to version 2 on open, under
// the migration lock, and keeps its leases.
func TestKeysUpgradeFromV1(t *testing.T) {
	sqltest.KeysUpgradeFromV1(t, withPrefix(t, serverDSN(t)), opener)
}
