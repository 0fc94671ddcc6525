// Command tuner-fault is a test-only tuner plugin that misbehaves on purpose, to show that the
// planner survives every way a plugin can fail. It serves the tuner protocol with a raw gRPC server
// (no policy, no panic recovery), so it can put anything on the wire. Its personality is the first
// word of its --tuner-config file, or COLLPLAN_TUNER_FAULT (which wins; the only way to select
// nohandshake):
//
//	ok          answers every call, with no edits
//	panic       panics inside Tune (gRPC does not recover: the process dies, stack on stderr)
//	sleep       sleeps an hour inside Tune, past any deadline
//	garbage     answers Tune with NaN costs, an unknown edit kind and overlapping intervals
//	exit        exits with status 3 inside Tune, after a line on stderr
//	exitonce    exits like exit the first time (it leaves CONFIG.once beside its configuration),
//	            then answers like ok: a plugin that a restart cures
//	exitsecond  answers the first Tune like ok, then exits inside the second (a plugin that dies
//	            between two classes)
//	chatty      writes 100 MB to stderr in 1 KiB lines inside each Tune, then answers like ok
//	illegal     forces a cell the host's menu marks not legal (the planner must refuse it)
//	disableall  disables every cell
//	badinit     answers Init with constants of the wrong shape
//	badconfig   refuses its configuration
//	nohandshake never completes go-plugin's handshake
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync/atomic"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/collplan/collplan/internal/cmdline"
	"github.com/collplan/collplan/plugin"
	pb "github.com/collplan/collplan/plugin/proto"
)

// EnvFault selects the personality, winning over the configuration file.
const EnvFault = "COLLPLAN_TUNER_FAULT"

// usage is -h: what the binary is and its configuration.
const usage = `usage: tuner-fault

tuner-fault is a test-only collplan tuner plugin that misbehaves on purpose; the planner starts it
(planner explain --tuner fault --tuner-config FILE ...). It takes no flags or arguments.

configuration: the first word of the --tuner-config file is the personality, for example a file
holding the one line

  panic

(COLLPLAN_TUNER_FAULT wins over the file; it is the only way to select nohandshake). Personalities:
ok, panic, sleep, garbage, exit, exitonce, illegal, disableall, badinit, badconfig, nohandshake;
what each does: go doc github.com/collplan/collplan/cmd/tuner-fault (cmd/tuner-fault/main.go).
`

func main() {
	err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	os.Exit(plugin.ExitStatus(os.Stderr, "tuner-fault", err))
}

func run(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tuner-fault", flag.ContinueOnError)
	if err := cmdline.Parse(fs, args, "tuner-fault"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, err = io.WriteString(stdout, usage)
			return err
		}
		return plugin.UsageError{Err: err}
	}
	if fs.NArg() > 0 {
		return plugin.UsageError{Err: cmdline.Hint("tuner-fault", fmt.Errorf("unexpected argument %q", fs.Arg(0)))}
	}
	if os.Getenv(EnvFault) == "nohandshake" {
		fmt.Fprintln(stderr, "tuner-fault: never completing the handshake")
		select {}
	}
	go exitWithParent(os.Getppid())
	stderrFD = os.Stderr // go-plugin redirects os.Stderr into a stream that an exit would cut short
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig:  plugin.Handshake,
		VersionedPlugins: map[int]goplugin.PluginSet{1: {plugin.PluginName: &rawPlugin{}}},
		GRPCServer:       goplugin.DefaultGRPCServer,
		Logger:           hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Info, JSONFormat: true}),
	})
	return nil
}

// stderrFD is the process's real stderr.
var stderrFD *os.File

// exitWithParent ends the plugin when its host is gone.
func exitWithParent(ppid int) {
	for range time.Tick(500 * time.Millisecond) {
		if os.Getppid() != ppid {
			if dir := os.Getenv(goplugin.EnvUnixSocketDir); dir != "" {
				_ = os.RemoveAll(dir)
			}
			os.Exit(0)
		}
	}
}

type rawPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
}

func (rawPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterTunerServer(s, &server{personality: os.Getenv(EnvFault)})
	return nil
}

func (rawPlugin) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, fmt.Errorf("tuner-fault is a plugin only")
}

type server struct {
	pb.UnimplementedTunerServer
	personality string
	config      string
	tunes       atomic.Int64
}

func (s *server) Configure(_ context.Context, req *pb.ConfigureRequest) (*pb.ConfigureResponse, error) {
	s.config = req.GetConfigPath()
	if s.personality == "" && req.GetConfigPath() != "" {
		data, err := os.ReadFile(req.GetConfigPath())
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		if f := strings.Fields(string(data)); len(f) > 0 {
			s.personality = f[0]
		}
	}
	if s.personality == "badconfig" {
		return nil, status.Errorf(codes.InvalidArgument, "%s:1: badconfig refuses its configuration", req.GetConfigPath())
	}
	return &pb.ConfigureResponse{Name: "fault:" + s.personality}, nil
}

func (s *server) Init(context.Context, *pb.InitRequest) (*pb.InitResponse, error) {
	if s.personality == "badinit" {
		return &pb.InitResponse{Constants: &pb.Constants{BaseLat: []float64{1, 2, math.NaN()}}}, nil
	}
	return &pb.InitResponse{}, nil
}

func (s *server) Tune(_ context.Context, req *pb.TuneRequest) (*pb.TuneResponse, error) {
	n := s.tunes.Add(1)
	switch s.personality {
	case "exitsecond":
		if n == 2 {
			fmt.Fprintln(stderrFD, "tuner-fault: exiting at the second class")
			os.Exit(3)
		}
	case "chatty":
		line := []byte(strings.Repeat("c", 1023) + "\n")
		for range 100 << 10 {
			if _, err := stderrFD.Write(line); err != nil {
				break
			}
		}
	case "panic":
		panic("tuner-fault: panicking inside Tune")
	case "sleep":
		time.Sleep(time.Hour)
	case "exit":
		fmt.Fprintln(stderrFD, "tuner-fault: exiting mid-compile")
		os.Exit(3)
	case "exitonce":
		marker := s.config + ".once"
		if _, err := os.Stat(marker); err != nil {
			_ = os.WriteFile(marker, nil, 0o644)
			fmt.Fprintln(stderrFD, "tuner-fault: exiting mid-compile, once")
			os.Exit(3)
		}
	case "garbage":
		return &pb.TuneResponse{Intervals: []*pb.Interval{
			{Lo: 0, Hi: 1 << 20, Edits: []*pb.Edit{{Kind: pb.EditKind_EDIT_KIND_ADD_COST, Algo: 1, Proto: 2, Value: math.NaN()}}},
			{Lo: 1 << 10, Hi: 1 << 30, Edits: []*pb.Edit{{Kind: pb.EditKind(42), Value: 1}}},
			{Lo: 1 << 12, Hi: 1 << 11, Edits: []*pb.Edit{{Kind: pb.EditKind_EDIT_KIND_CHANNELS, Value: 1e6}}},
		}}, nil
	case "illegal":
		for _, c := range req.GetMenu() {
			if c.GetReason() != "" {
				return &pb.TuneResponse{Intervals: []*pb.Interval{{Lo: 0, Hi: math.MaxInt64, Edits: []*pb.Edit{
					{Kind: pb.EditKind_EDIT_KIND_FORCE, Algo: c.GetAlgo(), Proto: c.GetProto()}}}}}, nil
			}
		}
	case "disableall":
		iv := &pb.Interval{Lo: 0, Hi: math.MaxInt64}
		for _, c := range req.GetMenu() {
			iv.Edits = append(iv.Edits, &pb.Edit{Kind: pb.EditKind_EDIT_KIND_DISABLE, Algo: c.GetAlgo(), Proto: c.GetProto()})
		}
		return &pb.TuneResponse{Intervals: []*pb.Interval{iv}}, nil
	}
	return &pb.TuneResponse{}, nil
}
