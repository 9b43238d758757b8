package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corralv1 "github.com/corral-sandbox/corral/api/corralv1"
	"github.com/corral-sandbox/corral/internal/testenv"
)

// The data of the files benchmark (-quick: 64 MiB and 1,000 files).
var (
	filesBig   int64 = 1 << 30 // one file of random bytes
	filesSmall       = 10000   // small files (1–4 KiB), 100 to a directory
)

// filesOps are the copies the files benchmark times, per driver.
var filesOps = []string{"1 GiB file in", "1 GiB file out", "10,000 files in", "10,000 files out"}

// quickFiles makes the files benchmark short, for -quick.
func quickFiles() {
	filesBig, filesSmall = 64<<20, 1000
	filesOps = []string{"64 MiB file in", "64 MiB file out", "1,000 files in", "1,000 files out"}
}

// benchFiles times `corral sandbox cp` of a 1 GiB file and of 10,000 small
// files into a sandbox and back out, on the Docker driver and on the
// native one, beside `docker cp` of the same data into and out of a
// container's volume; it checks the bytes that come back, and samples the
// gateway's RSS while each copy runs.
func benchFiles(bin, home string, n, warmup int) (*table, []*figure, error) {
	data := filepath.Join(home, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, nil, err
	}
	bigSum, err := writeBig(filepath.Join(data, "big"))
	if err != nil {
		return nil, nil, err
	}
	if err := writeSmall(filepath.Join(data, "small")); err != nil {
		return nil, nil, err
	}
	peer := "corral-bench-files-peer"
	_ = exec.Command("docker", "rm", "-f", "-v", peer).Run()
	if out, err := exec.Command("docker", "run", "-d", "--name", peer, "-v", "/data", testenv.TestImage, "sleep", "100000").CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("docker run: %v: %s", err, out)
	}
	defer exec.Command("docker", "rm", "-f", "-v", peer).Run()

	var ops []string
	for _, d := range []string{"docker", "native"} {
		for _, op := range filesOps {
			ops = append(ops, d+" driver: "+op)
		}
	}
	t := newTable("files: corral sandbox cp (Docker and native drivers) vs docker cp of the same data", ops, []string{"docker cp", "docker exec cat"})
	var figs []*figure
	for _, driver := range []string{"docker", "native"} {
		args := []string{"--driver", driver}
		if driver == "docker" {
			args = append(args, "--default-image", testenv.TestImage, "--image-pull-policy", "never")
		}
		ghome := filepath.Join(home, "gateway-"+driver)
		g, err := startGateway(bin, ghome, args...)
		if err != nil {
			return nil, nil, err
		}
		if _, err := g.create("files", &corralv1.SandboxSpec{Command: []string{"sleep", "100000"}}); err != nil {
			g.close()
			return nil, nil, err
		}
		corralCp := func(src, dst string) error { return runCmd(bin, "--home", ghome, "sandbox", "cp", src, dst) }
		corralRm := func() error {
			return runCmd(bin, "--home", ghome, "sandbox", "exec", "files", "--", "rm", "-rf", "/sandbox/big", "/sandbox/small")
		}
		growth := map[string]float64{}
		for i := range n + warmup {
			out := filepath.Join(home, "out")
			for _, who := range []string{"corral", "docker cp"} {
				os.RemoveAll(out)
				if err := os.MkdirAll(out, 0o755); err != nil {
					return nil, nil, err
				}
				cp, inside, rm := corralCp, "files:/sandbox/", corralRm
				if who == "docker cp" {
					cp = func(src, dst string) error { return runCmd("docker", "cp", src, dst) }
					inside, rm = peer+":/data/", func() error { return runCmd("docker", "exec", peer, "rm", "-rf", "/data/big", "/data/small") }
				}
				steps := []struct{ src, dst string }{
					{filepath.Join(data, "big"), inside}, {inside + "big", out},
					{filepath.Join(data, "small"), inside}, {inside + "small", out},
				}
				for k, s := range steps {
					d, rss, err := sampled(g.cmd.Process.Pid, func() error { return cp(s.src, s.dst) })
					if err != nil {
						g.close()
						return nil, nil, fmt.Errorf("%s %s %s → %s: %w", driver, who, filesOps[k], s.dst, err)
					}
					if i >= warmup {
						t.add(driver+" driver: "+filesOps[k], who, d)
						if who == "corral" {
							growth[filesOps[k]] = max(growth[filesOps[k]], rss)
						}
					}
				}
				if i == warmup { // the first measured run checks what came back
					if sum, err := sha256File(filepath.Join(out, "big")); err != nil || sum != bigSum {
						return nil, nil, fmt.Errorf("%s %s: the big file came back as %s, %v; want %s", driver, who, sum, err, bigSum)
					}
					if err := sameSmall(filepath.Join(data, "small"), filepath.Join(out, "small")); err != nil {
						return nil, nil, fmt.Errorf("%s %s: %w", driver, who, err)
					}
				}
				if who == "docker cp" && i >= warmup {
					// the engine's exec stream alone: the floor of whatever
					// goes out through docker exec, as corral's copies do
					d, _, err := sampled(0, func() error {
						return runCmd("sh", "-c", "docker exec "+peer+" cat /data/big > "+filepath.Join(out, "big.exec"))
					})
					if err != nil {
						return nil, nil, err
					}
					t.add(driver+" driver: "+filesOps[1], "docker exec cat", d)
				}
				if err := rm(); err != nil {
					return nil, nil, err
				}
			}
		}
		for k, op := range filesOps {
			size := float64(filesBig)
			if k >= 2 {
				size = float64(smallBytes)
			}
			key := driver + " driver: " + op
			ours := size / stats(t.Times[key]["corral"])[0].Seconds() / 1e6
			theirs := size / stats(t.Times[key]["docker cp"])[0].Seconds() / 1e6
			ok := ours >= 0.8*theirs
			lean := growth[op] < 50
			figs = append(figs,
				&figure{Name: key + ", corral", Value: ours, Unit: "MB/s"},
				&figure{Name: key + ", docker cp", Value: theirs, Unit: "MB/s"},
				&figure{Name: key + ", corral / docker cp", Value: ours / theirs, Unit: "×", Goal: "≥ 0.8", Met: &ok},
				&figure{Name: key + ", gateway RSS growth during the copy", Value: growth[op], Unit: "MB", Goal: "< 50", Met: &lean})
		}
		if err := g.remove("files"); err == nil {
			_ = g.waitPhase("files", "")
		}
		g.close()
	}
	return t, figs, nil
}

// smallBytes is what writeSmall writes in all.
var smallBytes int64

func writeBig(path string) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(f, h), rand.Reader, filesBig); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), f.Close()
}

func writeSmall(dir string) error {
	buf := make([]byte, 4096)
	smallBytes = 0
	for i := range filesSmall {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", i/100))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			return err
		}
		size := 1024 + (i*37)%3072
		rand.Read(buf[:size])
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d", i)), buf[:size], 0o644); err != nil {
			return err
		}
		smallBytes += int64(size)
	}
	return nil
}

// sameSmall checks that got holds every file of want, with its bytes.
func sameSmall(want, got string) error {
	n := 0
	err := filepath.Walk(want, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(want, p)
		a, _ := os.ReadFile(p)
		b, err := os.ReadFile(filepath.Join(got, rel))
		if err != nil || string(a) != string(b) {
			return fmt.Errorf("the small file %s came back different (%v)", rel, err)
		}
		n++
		return nil
	})
	if err == nil && n != filesSmall {
		err = fmt.Errorf("%d small files, want %d", n, filesSmall)
	}
	return err
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil)), err
}

// runCmd runs a command, its output kept for an error.
func runCmd(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// sampled times f and returns how far pid's resident set grew above where
// it was when f began, sampled every 20 ms and taken from the peak
// (VmHWM) too.
func sampled(pid int, f func() error) (time.Duration, float64, error) {
	before, hwm0 := memMB(pid)
	var peak float64
	var mu sync.Mutex
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				rss, _ := memMB(pid)
				mu.Lock()
				peak = max(peak, rss)
				mu.Unlock()
			}
		}
	}()
	t0 := time.Now()
	err := f()
	d := time.Since(t0)
	close(stop)
	<-done
	_, hwm1 := memMB(pid)
	growth := max(peak-before, 0)
	if hwm1 > hwm0 { // a new lifetime peak: it grew at least that far above the old one
		growth = max(growth, hwm1-before)
	}
	return d, growth, err
}

// memMB is a process's VmRSS and VmHWM in MB.
func memMB(pid int) (rss, hwm float64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		for key, v := range map[string]*float64{"VmRSS:": &rss, "VmHWM:": &hwm} {
			if s, ok := strings.CutPrefix(line, key); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), " kB"), 64)
				*v = kb / 1024
			}
		}
	}
	return rss, hwm
}
