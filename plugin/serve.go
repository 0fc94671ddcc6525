package plugin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
)

// Serve runs a policy as a plugin: it answers the host's handshake and serves the tuner protocol
// until the host ends the process. Log lines go to stderr as hclog JSON, which the host renders.
// Run by hand (without the host's magic cookie), it prints a hint and exits with status 1.
func Serve(f Factory) {
	log := hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Info, JSONFormat: true})
	go exitWithParent(os.Getppid(), 500*time.Millisecond)
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		VersionedPlugins: map[int]goplugin.PluginSet{
			1: {PluginName: &grpcPlugin{factory: f, log: log}},
		},
		GRPCServer: goplugin.DefaultGRPCServer,
		Logger:     log,
	})
}

// exitWithParent ends the plugin when its host is gone (the process was reparented): a host that
// exits without Close must not leave its plugin behind.
//
// It also removes the directory the host made for the plugin's socket (go-plugin passes it in
// PLUGIN_UNIX_SOCKET_DIR), which the host can no longer remove.
func exitWithParent(ppid int, every time.Duration) {
	for range time.Tick(every) {
		if os.Getppid() != ppid {
			if dir := os.Getenv(goplugin.EnvUnixSocketDir); dir != "" {
				_ = os.RemoveAll(dir)
			}
			os.Exit(0)
		}
	}
}

// Detailer is an error that lists every problem it stands for (a configuration's bad lines);
// RunCommand's -check prints them all, one a line.
type Detailer interface {
	Details() []string
}

// RunCommand is the whole main of a tuner binary: with -check FILE it loads the configuration
// with f and reports the first problems (with line numbers) or "ok"; with no arguments it serves.
func RunCommand(_ context.Context, name string, f Factory, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := fs.String("check", "", "load and check a configuration file, then exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s [-check FILE]\n\n%s is a collplan tuner plugin: the planner starts it (--tuner %s --tuner-config FILE).\n\n", name, name, name)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *check != "" {
		pol, err := f(*check)
		var d Detailer
		if errors.As(err, &d) {
			for _, line := range d.Details() {
				fmt.Fprintln(stderr, line)
			}
			return fmt.Errorf("%s: %d problems", *check, len(d.Details()))
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: ok (%s)\n", *check, pol.Name())
		return nil
	}
	Serve(f)
	return nil
}
