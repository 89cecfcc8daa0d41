//go:build tools

// Package tools pins modules that packages under construction will import. Removed once they do.
package tools

import (
	_ "github.com/anishathalye/porcupine"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/go-zookeeper/zk"
	_ "github.com/jackc/pgx/v5"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/robfig/cron/v3"
	_ "github.com/spf13/cobra"
	_ "go.etcd.io/etcd/client/v3"
	_ "golang.org/x/sys/unix"
	_ "modernc.org/sqlite"
)
