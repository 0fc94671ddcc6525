package plugin

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"

	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	pb "github.com/collplan/collplan/plugin/proto"
)

// wire is the host's end of the protocol: one method per RPC, domain values in and out. A reply
// that does not decode is an invalidReply.
type wire struct{ c pb.TunerClient }

// invalidReply marks a reply the host refused (garbage edits, bad constants...).
type invalidReply struct{ err error }

func (e *invalidReply) Error() string { return "invalid reply: " + e.err.Error() }
func (e *invalidReply) Unwrap() error { return e.err }

func (w *wire) configure(ctx context.Context, path string) (string, error) {
	r, err := w.c.Configure(ctx, &pb.ConfigureRequest{ConfigPath: path})
	if err != nil {
		return "", err
	}
	return r.GetName(), nil
}

func (w *wire) init(ctx context.Context, t *capabilities.Topology, host Model) (Model, error) {
	r, err := w.c.Init(ctx, &pb.InitRequest{Topology: topologyToProto(t), Model: modelToProto(host)})
	if err != nil {
		return Model{}, err
	}
	var m Model
	if r.GetConstants() != nil {
		k, err := constantsFromProto(r.GetConstants())
		if err != nil {
			return Model{}, &invalidReply{err}
		}
		m.Constants = &k
	}
	if r.GetReplaceCorrections() {
		if m.Factors, err = factorsFromProto(r.GetCorrections()); err != nil {
			return Model{}, &invalidReply{err}
		}
	} else if len(r.GetCorrections()) > 0 {
		return Model{}, &invalidReply{fmt.Errorf("corrections without replace_corrections")}
	}
	return m, nil
}

func (w *wire) tune(ctx context.Context, req *planner.Request, k *costmodel.Constants) ([]planner.Interval, error) {
	r, err := w.c.Tune(ctx, &pb.TuneRequest{Topology: topologyToProto(req.Topology), Class: classToProto(req.Class),
		Menu: menuToProto(req.Menu), Constants: constantsToProto(k)})
	if err != nil {
		return nil, err
	}
	ivs, err := intervalsFromProto(r.GetIntervals())
	if err == nil {
		err = leavesACell(ivs, req.Menu)
	}
	if err != nil {
		return nil, &invalidReply{err}
	}
	return ivs, nil
}

// grpcServer is the plugin's end: it builds the policy at Configure, prices the host's menu again
// so that the policy sees a real planner.Menu, and turns panics into errors.
type grpcServer struct {
	pb.UnimplementedTunerServer
	factory Factory
	log     hclog.Logger

	mu     sync.Mutex
	policy planner.Tuner
}

// recovered turns a policy's panic into an Internal error, logging the stack to the plugin's stderr
// (the host shows it).
func (s *grpcServer) recovered(op string, err *error) {
	r := recover()
	if r == nil {
		return
	}
	s.logger().Error("policy panicked", "op", op, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	*err = status.Errorf(codes.Internal, "policy panicked: %v", r)
}

func (s *grpcServer) logger() hclog.Logger {
	if s.log == nil {
		return hclog.NewNullLogger()
	}
	return s.log
}

func (s *grpcServer) current() (planner.Tuner, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.policy == nil {
		return nil, status.Error(codes.FailedPrecondition, "not configured: Configure must come first")
	}
	return s.policy, nil
}

func (s *grpcServer) Configure(_ context.Context, req *pb.ConfigureRequest) (_ *pb.ConfigureResponse, err error) {
	defer s.recovered("configure", &err)
	if s.factory == nil {
		return nil, status.Error(codes.Internal, "no policy factory")
	}
	pol, err := s.factory(req.GetConfigPath())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	s.mu.Lock()
	s.policy = pol
	s.mu.Unlock()
	return &pb.ConfigureResponse{Name: pol.Name()}, nil
}

func (s *grpcServer) Init(ctx context.Context, req *pb.InitRequest) (_ *pb.InitResponse, err error) {
	defer s.recovered("init", &err)
	pol, err := s.current()
	if err != nil {
		return nil, err
	}
	in, ok := pol.(Initializer)
	if !ok {
		return &pb.InitResponse{}, nil
	}
	t, err := topologyFromProto(req.GetTopology())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	var host Model
	if pk := req.GetModel().GetConstants(); pk != nil {
		k, err := constantsFromProto(pk)
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		host.Constants = &k
	}
	if host.Factors, err = factorsFromProto(req.GetModel().GetCorrections()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	m, err := in.Init(ctx, &t, host)
	if err != nil {
		return nil, err
	}
	out := &pb.InitResponse{}
	if m.Constants != nil {
		out.Constants = constantsToProto(m.Constants)
	}
	if m.Factors != nil {
		out.ReplaceCorrections = true
		out.Corrections = factorsToProto(m.Factors)
	}
	return out, nil
}

func (s *grpcServer) Tune(ctx context.Context, req *pb.TuneRequest) (_ *pb.TuneResponse, err error) {
	defer s.recovered("tune", &err)
	pol, err := s.current()
	if err != nil {
		return nil, err
	}
	r, err := s.request(req)
	if err != nil {
		return nil, err
	}
	ivs, err := pol.Tune(ctx, r)
	if err != nil {
		return nil, err
	}
	out, err := intervalsToProto(ivs)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &pb.TuneResponse{Intervals: out}, nil
}

// request decodes a Tune request and prices the class again with the host's constants and factors;
// the menu must come out identical to the host's.
func (s *grpcServer) request(req *pb.TuneRequest) (*planner.Request, error) {
	t, err := topologyFromProto(req.GetTopology())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	cls, err := classFromProto(req.GetClass())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	k := costmodel.DefaultConstants()
	if req.GetConstants() != nil {
		if k, err = constantsFromProto(req.GetConstants()); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	f, err := menuFactors(cls.Coll, req.GetMenu())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	pl, err := planner.New(&t, planner.Config{Constants: &k, Factors: f, Cells: menuFitted(cls.Coll, req.GetMenu())})
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	m, err := pl.Menu(cls)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := sameMenu(m, req.GetMenu()); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &planner.Request{Topology: pl.Topology(), Class: cls, Menu: m}, nil
}
