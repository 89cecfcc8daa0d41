package cli

// Coordination stores compiled into the command (the SQL ones are imported in cli.go).
import (
	_ "github.com/once-run/once/store/etcd"
	_ "github.com/once-run/once/store/redis"
	_ "github.com/once-run/once/store/zk"
)
