package harness

import "syscall"

// sysProcAttr makes the kernel kill the server if the test process dies
// without stopping it (a panic, a timeout, ^C), so no server outlives its
// test run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
