package plugin

import (
	"context"
	"fmt"
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
