// Package shim is the native driver's supervisor, PID 1 of every native
// sandbox (`corral supervise sandbox BUNDLE`): its bundle (the
// configuration the driver writes and the files the supervisor leaves for
// it), the control socket it serves (status, stop, wait, exec), the lock it
// holds while it lives, the root file system it builds, and the capped
// output of the main process. What both drivers' supervisors share (the
// exec stage) is internal/supervisor.
package shim
