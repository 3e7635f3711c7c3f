//go:build !linux

package main

import (
	"os"
	"syscall"
)

func childAttr() *syscall.SysProcAttr { return nil }

// -real needs SIGSTOP and a child that dies with its parent: Linux only.
var sigStop, sigCont os.Signal
