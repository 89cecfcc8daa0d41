package keys

import (
	"context"
	"fmt"
	"time"
)

// SaveCheckpoint stores value as the checkpoint of (task, slot) inside tx, replacing the previous
// one, so a job's progress marker commits or rolls back with the writes it describes. task and slot
// follow the scope rules (at most 255 bytes, no control characters); value is free text.
func (k *Keys) SaveCheckpoint(ctx context.Context, tx Execer, task, slot, value string) error {
	if err := validName("task", task); err != nil {
		return err
	}
	if err := validName("slot", slot); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, k.d.upsertCheckpoint(k.ckpt), task, slot, value, time.Now().UnixMilli()); err != nil {
		return fmt.Errorf("save checkpoint in %s: %w", k.ckpt, err)
	}
	return nil
}

// LoadCheckpoint returns the committed checkpoint of (task, slot) and true, or "" and false when
// none was saved.
func (k *Keys) LoadCheckpoint(ctx context.Context, db Execer, task, slot string) (string, bool, error) {
	rows, err := db.Query(ctx, k.d.rebind("SELECT value FROM "+k.ckpt+" WHERE task = ? AND slot = ?"), task, slot)
	if err != nil {
		return "", false, fmt.Errorf("load checkpoint from %s: %w", k.ckpt, err)
	}
	defer rows.Close()
	var v string
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return "", false, fmt.Errorf("load checkpoint from %s: %w", k.ckpt, err)
		}
		return "", false, nil
	}
	if err := rows.Scan(&v); err != nil {
		return "", false, fmt.Errorf("load checkpoint from %s: %w", k.ckpt, err)
	}
	return v, true, nil
}
