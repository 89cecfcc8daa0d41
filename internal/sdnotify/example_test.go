package sdnotify_test

import (
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/once-run/once/internal/sdnotify"
)

// A daemon's life under a Type=notify unit. Outside systemd every Notify is a no-op.
func Example_daemon() {
	// First, before any command starts: commands must not inherit NOTIFY_SOCKET.
	sdnotify.Unsetenv()

	// … read the jobs file, open the store …
	if _, err := sdnotify.Notify(sdnotify.Ready + "\n" + sdnotify.Status("12 jobs")); err != nil {
		log.Print(err) // the daemon runs on: systemd's start timeout will say it never got ready
	}

	if d, ok := sdnotify.WatchdogInterval(); ok {
		go func() {
			for range time.Tick(d / 2) {
				_, _ = sdnotify.Notify(sdnotify.Watchdog) // from the loop that must stay alive
			}
		}()
	}

	// On SIGHUP:
	_, _ = sdnotify.Notify(sdnotify.Reloading())
	// … reload the jobs file …
	_, _ = sdnotify.Notify(sdnotify.Ready + "\n" + sdnotify.Status("13 jobs"))

	// On SIGTERM:
	_, _ = sdnotify.Notify(sdnotify.Stopping + "\n" + sdnotify.Status("draining 2 running jobs"))
}

// What systemd receives: the test plays the service manager.
func ExampleNotify() {
	dir, _ := os.MkdirTemp("", "sdnotify-example")
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "notify")
	manager, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer manager.Close()
	os.Setenv("NOTIFY_SOCKET", socket) // systemd sets it for the unit's main process
	defer os.Unsetenv("NOTIFY_SOCKET")

	sent, err := sdnotify.Notify(sdnotify.Ready + "\n" + sdnotify.Status("12 jobs"))
	fmt.Println(sent, err)
	buf := make([]byte, 512)
	n, _ := manager.Read(buf)
	fmt.Printf("%q\n", buf[:n])
	// Output:
	// true <nil>
	// "READY=1\nSTATUS=12 jobs"
}
