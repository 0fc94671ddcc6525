package plugin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"

	goplugin "github.com/hashicorp/go-plugin"
)

// TestClient returns a client whose plugin runs in this process over a real gRPC connection
// (go-plugin's TestPluginGRPCConn): the whole protocol without a subprocess. A restart after a
// failure connects a fresh server. For tests of policies and hosts.
func TestClient(t testing.TB, f Factory, cfg Config) *Client {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "in-process"
	}
	c, err := newClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.dial = func(context.Context) (*instance, error) {
		ps := map[string]goplugin.Plugin{PluginName: &grpcPlugin{factory: f}}
		// Closing the client shuts the server down through go-plugin's controller.
		client, _ := goplugin.TestPluginGRPCConn(t, false, ps)
		raw, err := client.Dispense(PluginName)
		if err != nil {
			return nil, fmt.Errorf("dispense: %w", err)
		}
		var done atomic.Bool
		return &instance{w: raw.(*wire), stderr: newTail(1), exited: done.Load, kill: func() {
			done.Store(true)
			_ = client.Close()
		}}, nil
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// MainWithCommands is a TestMain for packages whose tests run this module's commands (the tuner
// plugins, planner, collbench): it builds cmd/NAME for each name with one go build into a fresh
// directory, sets *dir to it, runs the tests, calls after when it is not nil, removes the
// directory and exits with the tests' status. A failed build exits 1 with go's output.
func MainWithCommands(m *testing.M, dir *string, after func(), names ...string) {
	d, err := os.MkdirTemp("", "collplan-commands-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*dir = d
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	args := []string{"build", "-o", d + string(os.PathSeparator)}
	for _, name := range names {
		args = append(args, "github.com/collplan/collplan/cmd/"+name)
	}
	if out, err := exec.Command(goTool, args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building %v: %v\n%s", names, err, out)
		os.RemoveAll(d)
		os.Exit(1)
	}
	code := m.Run()
	if after != nil {
		after()
	}
	os.RemoveAll(d)
	os.Exit(code)
}
