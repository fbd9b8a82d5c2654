package cluster

import "syscall"

// sysProcAttr puts the child in its own process group (so Kill reaches
// anything it starts) and has the kernel SIGKILL it if we die first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
