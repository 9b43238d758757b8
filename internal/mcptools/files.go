package mcptools

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/capped"
)

// defaultReadBytes is what fs_read returns of a file unless asked for
// more (at most maxOutputBytes).
const defaultReadBytes = 256 << 10

type pathIn struct {
	Name string `json:"name" jsonschema:"the sandbox's name or id"`
	Path string `json:"path" jsonschema:"a path in the sandbox; a relative one is under its workdir, /sandbox"`
}

type readIn struct {
	pathIn
	MaxBytes int `json:"max_bytes,omitempty" jsonschema:"return at most this many bytes (default 262144, at most 1048576)"`
}

type readOut struct {
	Content   string `json:"content"`
	Encoding  string `json:"encoding" jsonschema:"utf-8, or base64 for a file that is not text"`
	Size      int64  `json:"size" jsonschema:"the file's size in bytes"`
	Truncated bool   `json:"truncated" jsonschema:"true when the file is longer than what content holds"`
}

type writeIn struct {
	pathIn
	Content  string `json:"content" jsonschema:"the file's new content, whole"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
	Mode     string `json:"mode,omitempty" jsonschema:"permission bits in octal, such as 0755 (default 0644)"`
}

type removeIn struct {
	pathIn
	Recursive bool `json:"recursive,omitempty" jsonschema:"remove a directory and everything in it"`
}

type mkdirIn struct {
	pathIn
	Parents bool `json:"parents,omitempty" jsonschema:"make the missing directories above it too, as mkdir -p"`
}

// fileInfo is a file as the tools return it.
type fileInfo struct {
	Name     string    `json:"name"`
	Path     string    `json:"path"`
	Type     string    `json:"type" jsonschema:"file, dir, symlink or other"`
	Size     int64     `json:"size"`
	Mode     string    `json:"mode" jsonschema:"permission bits, in octal"`
	Modified time.Time `json:"modified"`
	Link     string    `json:"link,omitempty" jsonschema:"a symlink's target"`
}

type listDirOut struct {
	Entries []fileInfo `json:"entries"`
}

type removeOut struct {
	Removed string `json:"removed"`
}

func info(i *client.FileInfo) fileInfo {
	if i == nil {
		return fileInfo{}
	}
	return fileInfo{Name: i.Name, Path: i.Path, Type: i.Type, Size: i.Size, Mode: fmt.Sprintf("%04o", i.Mode&0o7777),
		Modified: i.GetMtime().AsTime(), Link: i.Link}
}

// inSandbox is p as an absolute path of the sandbox: a relative one is
// under /sandbox (the core refuses a ".." in it).
func inSandbox(p string) (string, error) {
	if p == "" {
		return "", errors.New("no path given")
	}
	if !strings.HasPrefix(p, "/") {
		p = "/sandbox/" + p
	}
	return p, nil
}

func (t *Tools) addFileTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "fs_read", Description: "Read a file of a sandbox (running or stopped). Text comes as utf-8, anything else as base64."}, t.read)
	mcp.AddTool(s, &mcp.Tool{Name: "fs_write", Description: "Write a file of a sandbox whole (made, or replaced atomically), as the sandbox's user under its policy; " +
		"missing directories above it are made."}, t.write)
	mcp.AddTool(s, &mcp.Tool{Name: "fs_list", Description: "List a directory of a sandbox."}, t.listDir)
	mcp.AddTool(s, &mcp.Tool{Name: "fs_stat", Description: "Describe a file of a sandbox: type, size, mode, modification time."}, t.stat)
	mcp.AddTool(s, &mcp.Tool{Name: "fs_remove", Description: "Remove a file of a sandbox, or a directory (an empty one, or with recursive a whole tree)."}, t.remove)
	mcp.AddTool(s, &mcp.Tool{Name: "fs_mkdir", Description: "Make a directory in a sandbox."}, t.mkdir)
}

func (t *Tools) read(ctx context.Context, _ *mcp.CallToolRequest, in readIn) (*mcp.CallToolResult, readOut, error) {
	p, err := inSandbox(in.Path)
	if err != nil {
		return nil, readOut{}, err
	}
	limit := bounded(in.MaxBytes, defaultReadBytes, maxOutputBytes)
	buf := capped.New(limit)
	if err := t.c.ReadFileTo(ctx, in.Name, p, buf); err != nil {
		return nil, readOut{}, toolError(err)
	}
	out := readOut{Size: int64(buf.Len()), Truncated: buf.Cut}
	if buf.Cut {
		if st, err := t.c.Stat(ctx, in.Name, p); err == nil {
			out.Size = st.Size
		}
	}
	data := buf.Bytes()
	if utf8.Valid(data) || (buf.Cut && utf8.Valid(trimRune(data))) {
		out.Content, out.Encoding = string(data), "utf-8"
	} else {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(data), "base64"
	}
	return nil, out, nil
}

// trimRune is data without the incomplete rune a cut may leave at its end.
func trimRune(data []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(data) > 0; i++ {
		if utf8.Valid(data) {
			break
		}
		data = data[:len(data)-1]
	}
	return data
}

func (t *Tools) write(ctx context.Context, _ *mcp.CallToolRequest, in writeIn) (*mcp.CallToolResult, fileInfo, error) {
	p, err := inSandbox(in.Path)
	if err != nil {
		return nil, fileInfo{}, err
	}
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "utf-8":
	case "base64":
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, fileInfo{}, errors.New("content is not valid base64: " + err.Error())
		}
	default:
		return nil, fileInfo{}, errors.New(`encoding: want "utf-8" or "base64"`)
	}
	mode, err := parseMode(in.Mode)
	if err != nil {
		return nil, fileInfo{}, err
	}
	i, err := t.c.WriteFile(ctx, in.Name, p, bytes.NewReader(data), mode)
	if status.Code(err) == codes.NotFound && path.Dir(p) != "/" {
		// its directory is missing (the sandbox itself is there: the write reached it)
		if _, merr := t.c.MkDir(ctx, in.Name, path.Dir(p), true); merr == nil {
			i, err = t.c.WriteFile(ctx, in.Name, p, bytes.NewReader(data), mode)
		}
	}
	return nil, info(i), toolError(err)
}

// parseMode reads octal permission bits; "" is 0 (the default).
func parseMode(s string) (fs.FileMode, error) {
	if s == "" {
		return 0, nil
	}
	var m uint32
	for _, c := range strings.TrimPrefix(s, "0o") {
		if c < '0' || c > '7' || m > 0o777 {
			return 0, errors.New("mode " + s + ": want octal permission bits, such as 0644")
		}
		m = m*8 + uint32(c-'0')
	}
	if m > 0o7777 {
		return 0, errors.New("mode " + s + ": want octal permission bits, such as 0644")
	}
	return fs.FileMode(m), nil
}

func (t *Tools) listDir(ctx context.Context, _ *mcp.CallToolRequest, in pathIn) (*mcp.CallToolResult, listDirOut, error) {
	p, err := inSandbox(in.Path)
	if err != nil {
		return nil, listDirOut{}, err
	}
	entries, err := t.c.ListDir(ctx, in.Name, p)
	if err != nil {
		return nil, listDirOut{}, toolError(err)
	}
	out := listDirOut{Entries: make([]fileInfo, len(entries))}
	for i, e := range entries {
		out.Entries[i] = info(e)
	}
	return nil, out, nil
}

func (t *Tools) stat(ctx context.Context, _ *mcp.CallToolRequest, in pathIn) (*mcp.CallToolResult, fileInfo, error) {
	p, err := inSandbox(in.Path)
	if err != nil {
		return nil, fileInfo{}, err
	}
	i, err := t.c.Stat(ctx, in.Name, p)
	return nil, info(i), toolError(err)
}

func (t *Tools) remove(ctx context.Context, _ *mcp.CallToolRequest, in removeIn) (*mcp.CallToolResult, removeOut, error) {
	p, err := inSandbox(in.Path)
	if err != nil {
		return nil, removeOut{}, err
	}
	if err := t.c.Remove(ctx, in.Name, p, in.Recursive); err != nil {
		return nil, removeOut{}, toolError(err)
	}
	return nil, removeOut{Removed: p}, nil
}

func (t *Tools) mkdir(ctx context.Context, _ *mcp.CallToolRequest, in mkdirIn) (*mcp.CallToolResult, fileInfo, error) {
	p, err := inSandbox(in.Path)
	if err != nil {
		return nil, fileInfo{}, err
	}
	i, err := t.c.MkDir(ctx, in.Name, p, in.Parents)
	return nil, info(i), toolError(err)
}
