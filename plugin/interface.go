package plugin

import (
	"context"

	hclog "github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/correction"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	pb "github.com/collplan/collplan/plugin/proto"
)

// ProtocolVersion is the tuner protocol this package speaks (plugin/proto/tuner.proto,
// collplan.tuner.v1). A breaking change adds version 2 to the plugin sets beside version 1.
const ProtocolVersion = 1

// PluginName is the name the tuner is dispensed under in go-plugin's plugin set.
const PluginName = "tuner"

// Handshake is the go-plugin handshake of collplan tuner plugins. The magic cookie is a UX guard
// (running a plugin binary by hand prints a hint instead of hanging), not security. Its key and value
// were chosen once and must never change: every published plugin binary carries them.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "COLLPLAN_TUNER_PLUGIN",
	MagicCookieValue: "3a4af06e7dc3650d15a785b0607d3b39",
}

// Factory builds a policy from its configuration file (--tuner-config; "" when none was given).
// Errors should name the file and line.
type Factory func(configPath string) (planner.Tuner, error)

// Initializer is implemented by policies that replace the host's model for a topology, NCCL's v5
// init constants: Init is called once per topology, before any Tune for it.
type Initializer interface {
	Init(ctx context.Context, t *capabilities.Topology, host Model) (Model, error)
}

// Model is what a planner prices with. In an Init answer nil parts keep the host's.
type Model struct {
	Constants *costmodel.Constants
	// Factors, when set, replace every correction factor of the host.
	Factors *correction.Factors
}

// versionedPlugins are the protocol versions each side serves: the server picks the highest one the
// client offers. factory is nil on the host.
func versionedPlugins(f Factory) map[int]goplugin.PluginSet {
	return map[int]goplugin.PluginSet{
		1: {PluginName: &grpcPlugin{factory: f}},
	}
}

// grpcPlugin is the go-plugin glue: it registers the server on the plugin side and builds the wire
// client on the host. gRPC only.
type grpcPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	factory Factory
	log     hclog.Logger // the plugin's logger (server side)
}

var _ goplugin.GRPCPlugin = (*grpcPlugin)(nil)

func (p *grpcPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterTunerServer(s, &grpcServer{factory: p.factory, log: p.log})
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &wire{c: pb.NewTunerClient(c)}, nil
}
