package main

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeWebMap: the planner binary serves the embedded map at / (no file beside the binary is
// read), with each asset's content type.
func TestServeWebMap(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, []string{"--listen", "127.0.0.1:0"}, io.Discard, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("planner serve ended before listening: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("planner serve did not listen within 10 s")
	}
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	for _, tc := range []struct{ path, ctype, has string }{
		{"/", "text/html; charset=utf-8", `<script src="app.js">`},
		{"/app.js", "text/javascript; charset=utf-8", `"/v1/map"`},
		{"/style.css", "text/css; charset=utf-8", "#menu"},
	} {
		resp, err := http.Get("http://" + addr + tc.path)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode, tc.path)
		assert.Equal(t, tc.ctype, resp.Header.Get("Content-Type"), tc.path)
		assert.Contains(t, string(body), tc.has, tc.path)
	}
	resp, err := http.Get("http://" + addr + "/v1/nothing")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "/v1/ paths are the API's, never assets")
}
