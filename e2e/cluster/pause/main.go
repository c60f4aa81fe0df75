// Command pause is the pod sandbox process for the local e2e cluster: no
// image can be pulled on our machines, so containerd's sandbox_image is built
// from this. It holds the pod's namespaces, reaps orphaned children (it is
// PID 1 when the pod shares its process namespace) and exits on TERM/INT.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
