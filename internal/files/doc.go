// Package files does a sandbox's file operations in a root directory:
// copies in and out as tar streams, read, atomic write, list, stat,
// remove, mkdir and watch. Inside a running sandbox the exec stage runs
// them (Builtin) after applying the sandbox's policy, so they act as the
// sandbox's user under its Landlock rules; for a stopped sandbox the
// gateway runs them on the host, on the sandbox's /sandbox directory. Each
// operation is one command line (Argv), with its input on stdin, its
// output on stdout and an error as one line on stderr (Err).
package files
