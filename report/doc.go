// Package report builds what planner explain shows for one collective call: the topology a query
// names (a node table at a node count, or a topology file) and the explain JSON of a plan. The
// planner command and the planner service both use it, so that an answer over HTTP is the
// command's output byte for byte.
package report
