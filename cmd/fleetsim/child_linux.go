package main

import (
	"os"
	"syscall"
)

// childAttr makes the server process die with the parent, whatever ends it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// The signals that pause and resume the server process.
var sigStop, sigCont os.Signal = syscall.SIGSTOP, syscall.SIGCONT
