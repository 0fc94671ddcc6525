package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/report"
	"github.com/collplan/collplan/service"
)

// serverBatch is how many queries planner query --server sends in one request.
const serverBatch = 1000

// serverLine is one stdin query waiting for its answer.
type serverLine struct {
	line   int
	isJSON bool
	q      service.Query
}

// queryServer is planner query --server URL: the same stdin and the same rows as planning here,
// the plans made by a running planner serve, in batches. The topology flags become the queries'
// fields: --node NAME, --topology FILE (the service names it by its base name), --nodes,
// --gpus-per-node, --fabric NAME, --no-overlay, --algo, --proto and --tuner NAME (one of the
// service's tuners). The service never reads NCCL_ALGO/NCCL_PROTO, so with one of them set here
// the command refuses rather than answer without it.
func queryServer(ctx context.Context, c *command, server, tokenFile string, stdin io.Reader, stdout, stderr io.Writer) error {
	base, err := serverURL(server)
	if err != nil {
		return err
	}
	tmpl, err := serverTemplate(c)
	if err != nil {
		return err
	}
	var token string
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return usagef("--token-file: %v", err)
		}
		token = strings.TrimSpace(string(b))
	}
	client := &http.Client{Timeout: 2 * time.Minute}
	rw := newRowWriter(stdout)
	defer rw.w.Flush()
	var pending []serverLine
	var failed []string
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		answers, err := postBatch(ctx, client, base, token, pending)
		if err != nil {
			return err
		}
		for i, a := range answers {
			p := pending[i]
			row := answerJSON{Coll: a.Query.Coll, Bytes: a.Query.Bytes, Op: a.Query.Op, Dtype: a.Query.Dtype,
				PipeOps: a.Query.PipeOps, Algo: a.Algo, Proto: a.Proto, TimeUS: a.TimeUS, Channels: a.Channels,
				Threads: a.Threads, ChunkBytes: a.ChunkBytes, SliceBytes: a.SliceBytes, Policy: a.Policy, TunerNote: a.TunerNote}
			if tmpl.Tuner != "" && a.Policy == report.BuiltinPolicy {
				failed = append(failed, fmt.Sprintf("stdin:%d", p.line))
			}
			if err := rw.write(row, p.isJSON); err != nil {
				return err
			}
		}
		pending = pending[:0]
		return nil
	}
	err = scanQueries(stdin, &c.cf, func(line int, isJSON bool, cls planner.Class, n int64) error {
		q := tmpl
		pipeOps := cls.PipeOps
		q.Coll, q.Op, q.Dtype, q.PipeOps, q.RegBuff = cls.Coll.String(), cls.Op.String(), cls.Dtype.String(), &pipeOps, cls.RegBuff
		q.Bytes = json.RawMessage(strconv.FormatInt(n, 10))
		pending = append(pending, serverLine{line: line, isJSON: isJSON, q: q})
		if len(pending) == serverBatch {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := flush(); err != nil {
		return err
	}
	if len(failed) > 0 {
		return usagef("the tuner failed for %d rows (first at %s): they came from the built-in policy", len(failed), failed[0])
	}
	return nil
}

// serverURL checks --server: an http or https URL with a host and no path beyond "/".
func serverURL(s string) (string, error) {
	s = strings.TrimSuffix(s, "/")
	if !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://") {
		return "", usagef("--server %q: want an http:// or https:// URL, such as http://127.0.0.1:7480", s)
	}
	return s, nil
}

// serverTemplate is the query fields the topology flags set.
func serverTemplate(c *command) (service.Query, error) {
	tf := &c.tf
	var q service.Query
	switch {
	case tf.table != "":
		return q, usagef("--server: the service has no --table FILE; name an embedded table (--node) or a topology it serves (--topology)")
	case tf.node != "" && tf.topology != "", tf.node == "" && tf.topology == "":
		return q, usagef("give exactly one of --node, --table or --topology")
	case tf.node != "":
		q.Node = tf.node
	default:
		q.Topology = strings.TrimSuffix(filepath.Base(tf.topology), ".toml")
	}
	if tf.nccl != "" {
		return q, usagef("--server: --nccl %s: the service prices NCCL 2.30.7's model only; plan offline (without --server) for another release", tf.nccl)
	}
	sp := tf.spec(c.fs)
	if sp.NodesGiven {
		n := tf.nodes
		q.Nodes = &n
	}
	if sp.GPUsPerNodeGiven {
		g := tf.gpn
		q.GPUsPerNode = &g
	}
	if tf.fabric != "" && (strings.HasSuffix(tf.fabric, ".toml") || strings.ContainsRune(tf.fabric, os.PathSeparator)) {
		return q, usagef("--server: --fabric %s: name an embedded fabric table; the service reads no file a request names", tf.fabric)
	}
	q.Fabric, q.NoOverlay, q.Algo, q.Proto = tf.fabric, tf.noOverlay, tf.algo, tf.proto
	if !tf.tuner.None() {
		if strings.ContainsRune(tf.tuner.Name, os.PathSeparator) || tf.tuner.Config != "" || tf.tuner.SHA256 != "" || tf.tuner.Timeout != 0 {
			return q, usagef("--server: --tuner names one of the service's tuners (GET /v1/tables lists them); its binary, configuration and deadline are the service's")
		}
		q.Tuner = tf.tuner.Name
	}
	for _, v := range []struct{ env, flag, given string }{{"NCCL_ALGO", "--algo", tf.algo}, {"NCCL_PROTO", "--proto", tf.proto}} {
		if val, ok := os.LookupEnv(v.env); ok && val != "" && v.given == "" {
			return q, usagef("--server: %s=%q is set here, and the service does not read this environment: pass it as %s, or unset it", v.env, val, v.flag)
		}
	}
	return q, nil
}

// batchField is a batch error's query index: "[3].nodes" -> 3.
var batchField = regexp.MustCompile(`^\[(\d+)\]`)

// postBatch sends one batch to /v1/plan and returns its answers in order; a refused query is a
// usage error naming its stdin line.
func postBatch(ctx context.Context, client *http.Client, base, token string, lines []serverLine) ([]report.Decision, error) {
	qs := make([]service.Query, len(lines))
	for i := range lines {
		qs[i] = lines[i].q
	}
	body, err := json.Marshal(qs)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/plan", bytes.NewReader(body))
	if err != nil {
		return nil, usagef("--server: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("--server: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("--server: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e service.Error
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			return nil, fmt.Errorf("--server: %s answered %s", base, resp.Status)
		}
		if m := batchField.FindStringSubmatch(e.Field); m != nil {
			i, _ := strconv.Atoi(m[1])
			if i < len(lines) {
				return nil, usagef("stdin:%d: %s", lines[i].line, e.Error)
			}
		}
		if resp.StatusCode >= 500 {
			return nil, fmt.Errorf("--server: %s: %s", resp.Status, e.Error)
		}
		return nil, usagef("--server: %s: %s", resp.Status, e.Error)
	}
	var out service.Batch[report.Decision]
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("--server: the answer is not a batch of plans: %w", err)
	}
	if len(out.Results) != len(lines) {
		return nil, fmt.Errorf("--server: %d answers to %d queries", len(out.Results), len(lines))
	}
	return out.Results, nil
}
