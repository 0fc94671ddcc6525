package plugin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/collplan/collplan/internal/cmdline"
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

// UsageError is bad input to a tuner binary (a bad flag, a configuration that -check refuses): its
// main exits with status 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// ExitStatus is the end of a tuner binary's main: it prints err's one line to stderr, prefixed
// "name: " once, and returns the exit status: 0 for nil, 2 for a UsageError, 1 otherwise.
func ExitStatus(stderr io.Writer, name string, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, cmdline.ErrorLine(name, err))
	var ue UsageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// RunCommand is the whole main of a tuner binary but the exit (ExitStatus): with -check FILE it
// loads the configuration with f and reports its problems (with line numbers) or "ok"; with no
// arguments it serves. -h prints the usage to stdout with doc, the binary's configuration format
// (what the file holds, an example, where the whole format is documented), above the flags; a bad
// flag is one line with a hint.
func RunCommand(_ context.Context, name, doc string, f Factory, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := fs.String("check", "", "load and check a configuration file, then exit")
	if err := cmdline.Parse(fs, args, name); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, err = io.WriteString(stdout, cmdline.Usage(fs, usageHead(name, doc)))
			return err
		}
		return UsageError{err}
	}
	if fs.NArg() > 0 {
		return UsageError{cmdline.Hint(name, fmt.Errorf("unexpected argument %q", fs.Arg(0)))}
	}
	if *check != "" {
		pol, err := f(*check)
		var d Detailer
		if errors.As(err, &d) {
			for _, line := range d.Details() {
				fmt.Fprintln(stderr, line)
			}
			return UsageError{fmt.Errorf("%s: %d problems", *check, len(d.Details()))}
		}
		if err != nil {
			return UsageError{err}
		}
		fmt.Fprintf(stdout, "%s: ok (%s)\n", *check, pol.Name())
		return nil
	}
	Serve(f)
	return nil
}

// usageHead is the part of a tuner binary's -h above its flags.
func usageHead(name, doc string) string {
	short := strings.TrimPrefix(name, "tuner-")
	head := fmt.Sprintf(`usage: %[1]s [-check FILE]

%[1]s is a collplan tuner plugin. The planner starts it (planner explain --tuner %[2]s
--tuner-config FILE ...; collbench and planner compare take it too). Run by hand, -check FILE loads
a configuration and prints "ok" or its problems with line numbers; without -check it serves only
under the planner.
`, name, short)
	if doc = strings.TrimSpace(doc); doc != "" {
		head += "\n" + doc + "\n"
	}
	return head
}
