// Package service is the planner as an HTTP/JSON service (planner serve): explain and plan one
// call or a batch, map a class's crossovers over node counts, list the node tables, with an
// OpenAPI 3 document (openapi.json, served at /v1/openapi.json), Prometheus metrics, bounded
// caches of priced classes, limits on every input and every wait, and a hot-swapped set of node
// tables, topologies and tuner plugins. docs/service.md describes the API.
//
// The answers are report's: /v1/explain's body for one query is planner explain --json's stdout
// for the same flags in a clean environment (the service never reads its own NCCL_ALGO or
// NCCL_PROTO).
package service
