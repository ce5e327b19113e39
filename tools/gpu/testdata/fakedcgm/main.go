// Command fakedcgm is TestDCGMDiagRun's stand-in for DCGM: built once,
// linked as nv-hostengine and dcgmi, it answers their command lines as
// DCGM 4.6 does (hostengine/src/main.cpp, dcgmi/Command.cpp: the same
// arguments and messages) and prints recorded diagnostic outputs.
//
//	nv-hostengine -n --domain-socket SOCK --pid FILE -f LOG --log-level L
//	    listens on SOCK until SIGTERM; refuses to daemonize (no -n)
//	nv-hostengine --term --pid FILE
//	    SIGTERMs the pid in FILE and waits for it to go
//	dcgmi diag --host unix://SOCK -r N|TEST [-p PARAMS] -j
//	    connects to SOCK, then prints $FAKE_DCGM_DIR/diag-r<N|TEST>.json
//	    and exits 1 if it reports a failure, 0 if not
//
// Every invocation is appended to $FAKE_DCGM_LOG. $FAKE_DCGM_FAIL_START
// makes the host engine fail as one without a usable NVML would.
package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	name := filepath.Base(os.Args[0])
	record(name + " " + strings.Join(os.Args[1:], " "))
	switch name {
	case "nv-hostengine":
		os.Exit(hostEngine(os.Args[1:]))
	case "dcgmi":
		os.Exit(dcgmi(os.Args[1:]))
	}
	fmt.Fprintf(os.Stderr, "fakedcgm: run me as nv-hostengine or dcgmi, not %s\n", name)
	os.Exit(2)
}

func record(line string) {
	p := os.Getenv("FAKE_DCGM_LOG")
	if p == "" {
		return
	}
	f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

// flags reads "--name value" and "-x value" pairs and bare switches.
func flags(args []string, withValue map[string]bool) (map[string]string, error) {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return nil, fmt.Errorf("unexpected argument %q", a)
		}
		if withValue[a] {
			if i+1 >= len(args) {
				return nil, fmt.Errorf("%s needs a value", a)
			}
			out[a] = args[i+1]
			i++
			continue
		}
		out[a] = ""
	}
	return out, nil
}

func hostEngine(args []string) int {
	f, err := flags(args, map[string]bool{"--domain-socket": true, "-d": true, "--pid": true, "-f": true,
		"--log-filename": true, "--log-level": true, "-p": true, "--port": true})
	if err != nil {
		fmt.Fprintf(os.Stderr, "nv-hostengine failed to parse command line arguments: %v\n", err)
		return 1
	}
	pidFile := first(f, "--pid")
	if pidFile == "" {
		pidFile = "/var/run/nvhostengine.pid"
	}
	if _, term := f["--term"]; term {
		return terminate(pidFile)
	}
	if _, ok := f["-n"]; !ok {
		fmt.Fprintln(os.Stderr, "fakedcgm: this stand-in never daemonizes: pass -n")
		return 2
	}
	sock := first(f, "--domain-socket", "-d")
	if sock == "" {
		fmt.Fprintln(os.Stderr, "fakedcgm: this stand-in listens on a Unix socket only: pass --domain-socket")
		return 2
	}
	if logFile := first(f, "-f", "--log-filename"); logFile != "" && os.Getenv("FAKE_DCGM_FAIL_START") != "" {
		_ = os.WriteFile(logFile, []byte("ERROR [1234:1234] Could not load NVML library: libnvidia-ml.so.1: cannot open shared object file\n"), 0o644)
	}
	if os.Getenv("FAKE_DCGM_FAIL_START") != "" {
		fmt.Println("Err: Failed to start DCGM Server: -16")
		return 1
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Printf("Err: Failed to start DCGM Server: %v\n", err)
		return 1
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		fmt.Printf("Host engine failed to write to pid file %s\n", pidFile)
		return 1
	}
	fmt.Printf("Started host engine version 4.6.0 using socket path: %s\n", sock)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("ok\n"))
			c.Close()
		}
	}()
	<-sig
	l.Close() // removes the socket file
	os.Remove(pidFile)
	record("nv-hostengine exited on SIGTERM")
	return 0
}

func terminate(pidFile string) int {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		fmt.Println("Unable to terminate host engine, it may not be running.")
		return 1
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || syscall.Kill(pid, syscall.SIGTERM) != nil {
		fmt.Println("Unable to terminate host engine, it may not be running.")
		return 1
	}
	for range 200 {
		if syscall.Kill(pid, 0) != nil {
			fmt.Println("Host engine successfully terminated.")
			return 0
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Println("Unable to terminate host engine.")
	return 1
}

func dcgmi(args []string) int {
	if len(args) == 0 || args[0] != "diag" {
		fmt.Fprintln(os.Stderr, "fakedcgm: dcgmi stand-in knows diag only")
		return 2
	}
	f, err := flags(args[1:], map[string]bool{"--host": true, "-r": true, "--run": true, "-p": true, "--parameters": true})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	host := first(f, "--host")
	if host == "" {
		host = "localhost"
	}
	sock, ok := strings.CutPrefix(host, "unix://")
	c, derr := net.Dial("unix", sock)
	if !ok || derr != nil {
		fmt.Println("Error: unable to establish a connection to the specified host: " + host)
		fmt.Println("Error: Unable to connect to host engine. Host engine connection invalid/disconnected.")
		return 255
	}
	c.Close()
	if _, j := f["-j"]; !j {
		fmt.Fprintln(os.Stderr, "fakedcgm: dcgmi stand-in has JSON outputs only: pass -j")
		return 2
	}
	out, err := os.ReadFile(filepath.Join(os.Getenv("FAKE_DCGM_DIR"), "diag-r"+first(f, "-r", "--run")+".json"))
	if err != nil {
		fmt.Println("Error: " + err.Error())
		return 1
	}
	os.Stdout.Write(out)
	if bytes.Contains(out, []byte(`"status" : "Fail"`)) {
		return 1
	}
	return 0
}

func first(f map[string]string, keys ...string) string {
	for _, k := range keys {
		if v := f[k]; v != "" {
			return v
		}
	}
	return ""
}
