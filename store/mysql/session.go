package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
)

// setReadCommitted is standard on MySQL and MariaDB alike, unlike the session variable it sets
// (transaction_isolation on MySQL 8, tx_isolation on MariaDB 10).
const setReadCommitted = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"

// readCommitted makes every new connection's session READ COMMITTED, the level each ledger
// transaction needs: one statement per connection instead of one per transaction (go-sql-driver
// sends a transaction's isolation level as a statement of its own before START TRANSACTION).
type readCommitted struct{ driver.Connector }

func (c readCommitted) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := cn.(driver.ExecerContext)
	if !ok {
		cn.Close()
		return nil, errors.New("mysql: the driver's connection cannot execute statements")
	}
	if _, err := ex.ExecContext(ctx, setReadCommitted, nil); err != nil {
		cn.Close()
		return nil, err
	}
	return cn, nil
}
