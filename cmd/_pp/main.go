package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/collplan/collplan/emuhost"
)

func main() {
	switch os.Args[1] {
	case "lab":
		ctx := context.Background()
		lab, err := emuhost.Create(ctx, emuhost.Spec{Hosts: 2, Name: "pp"})
		if err != nil {
			panic(err)
		}
		defer lab.Close()
		exe, _ := os.Executable()
		for _, mode := range []string{"block", "spin", "block", "spin"} {
			srv := lab.Command(ctx, 1, exe, "server", mode)
			srv.Stderr = os.Stderr
			srv.Env = append(os.Environ(), "GOMAXPROCS=1")
			srv.Start()
			time.Sleep(300 * time.Millisecond)
			cl := lab.Command(ctx, 0, exe, "client", mode, lab.Addr(1).String()+":7777")
			cl.Stdout, cl.Stderr = os.Stdout, os.Stderr
			cl.Env = append(os.Environ(), "GOMAXPROCS=1")
			cl.Run()
			srv.Process.Kill()
			srv.Wait()
		}
		_ = exec.Command
	case "server":
		ln, err := net.Listen("tcp", ":7777")
		if err != nil {
			panic(err)
		}
		c, _ := ln.Accept()
		c.(*net.TCPConn).SetNoDelay(true)
		serve(c, os.Args[2] == "spin")
	case "client":
		c, err := net.Dial("tcp", os.Args[3])
		if err != nil {
			panic(err)
		}
		c.(*net.TCPConn).SetNoDelay(true)
		client(c, os.Args[2] == "spin")
	}
}

func rawFd(c net.Conn) int {
	f, _ := c.(*net.TCPConn).File()
	fd := int(f.Fd())
	syscall.SetNonblock(fd, true)
	return fd
}

func readFull(c net.Conn, fd int, b []byte, spin bool) {
	n := 0
	for n < len(b) {
		if spin {
			k, err := syscall.Read(fd, b[n:])
			if err == syscall.EAGAIN {
				continue
			}
			if err != nil || k == 0 {
				os.Exit(0)
			}
			n += k
		} else {
			k, err := c.Read(b[n:])
			if err != nil {
				os.Exit(0)
			}
			n += k
		}
	}
}

func write(c net.Conn, fd int, b []byte, spin bool) {
	if spin {
		syscall.Write(fd, b)
	} else {
		c.Write(b)
	}
}

func serve(c net.Conn, spin bool) {
	fd := -1
	if spin {
		fd = rawFd(c)
	}
	b := make([]byte, 64)
	for {
		readFull(c, fd, b, spin)
		write(c, fd, b, spin)
	}
}

func client(c net.Conn, spin bool) {
	fd := -1
	if spin {
		fd = rawFd(c)
	}
	b := make([]byte, 64)
	var ts []float64
	for i := 0; i < 20000; i++ {
		t0 := time.Now()
		write(c, fd, b, spin)
		readFull(c, fd, b, spin)
		if i >= 1000 {
			ts = append(ts, float64(time.Since(t0).Nanoseconds())/1000)
		}
	}
	sort.Float64s(ts)
	fmt.Println("mode spin="+strconv.FormatBool(spin), "rtt us p10", ts[len(ts)/10], "p50", ts[len(ts)/2], "p90", ts[len(ts)*9/10])
}
