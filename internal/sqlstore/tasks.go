package sqlstore

import (
	"context"
	"database/sql"
	"strings"

	"github.com/once-run/once/store"
)

// The task index (store.TaskLister): the leases table, one row per task granted a lease, kept
// forever (a released or expired lease keeps its row, Prune never reads the table), read from a
// name on through its primary key.

// TasksQuery is a page of store.TaskLister, before expansion: {t} is the task column as the
// dialect compares it byte for byte (TaskOrderer), the arguments are after and the limit.
const TasksQuery = `SELECT task FROM {p}leases WHERE {t} > ? ORDER BY {t} LIMIT ?`

// TaskOrderer is implemented by dialects whose text may compare in a collation other than byte
// order (PostgreSQL's columns take the database's). TaskOrder returns the expression that compares
// the task column of table leases byte for byte: the column itself when its collation already
// does (a page is a range of the primary key), otherwise the column in a byte-order collation
// (a page reads the whole table, which has one row per task, and keeps the first rows). Dialects
// without it compare the column as it is (MySQL's tables are utf8mb4_bin).
type TaskOrderer interface {
	TaskOrder(ctx context.Context, db *sql.DB, leases string) (string, error)
}

var _ store.TaskLister = (*Store)(nil)

// Tasks lists the tasks granted a lease, from the name after on (store.TaskLister).
func (s *Store) Tasks(ctx context.Context, after string, limit int) ([]string, error) {
	if err := store.CheckTasksPage(limit); err != nil {
		return nil, err
	}
	var out []string
	err := s.Do(ctx, func(ctx context.Context) error {
		q, err := s.TasksQuery(ctx)
		if err != nil {
			return err
		}
		rows, err := s.DB.QueryContext(ctx, q, after, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = out[:0]
		for rows.Next() {
			var task string
			if err := rows.Scan(&task); err != nil {
				return err
			}
			out = append(out, task)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// TasksQuery is TasksQuery expanded for s: the dialect's byte-order comparison of the task column,
// asked once per Store (exported for the backends' plan tests).
func (s *Store) TasksQuery(ctx context.Context) (string, error) {
	s.orderMu.Lock()
	defer s.orderMu.Unlock()
	if s.taskOrder == "" {
		s.taskOrder = "task"
		if o, ok := s.Dialect.(TaskOrderer); ok {
			t, err := o.TaskOrder(ctx, s.DB, s.Prefix+"leases")
			if err != nil {
				s.taskOrder = ""
				return "", err
			}
			s.taskOrder = t
		}
	}
	return s.Q(strings.ReplaceAll(TasksQuery, "{t}", s.taskOrder)), nil
}
