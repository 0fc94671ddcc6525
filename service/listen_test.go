package service

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serveOn runs s on ln until the test ends, and fails the test if Serve returns an error.
func serveOn(t *testing.T, s *Server, ln net.Listener) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return within 10 s of its context ending")
		}
	})
}

// rawRequest sends a POST /v1/plan with one extra header of n bytes over a plain connection and
// returns the response's status, content type and body.
func rawRequest(t *testing.T, addr string, n int) (int, string, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	body := `{"node":"h100","bytes":8}`
	req := fmt.Sprintf("POST /v1/plan HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\nX-Big: %s\r\n\r\n%s",
		len(body), strings.Repeat("a", n), body)
	go func() { _, _ = io.WriteString(c, req) }() // the server may answer before it has read it all
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// TestHeaderLimit: a header block over --max-header-bytes gets the service's JSON 431 naming the
// limit (valid against the OpenAPI document); one just under it is answered; one past the limit
// plus headerSlack is cut off by Go's server with its own plain-text 431, as documented.
func TestHeaderLimit(t *testing.T) {
	cfg := testConfig()
	cfg.MaxHeaderBytes = 4096
	s := newTestServer(t, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveOn(t, s, ln)
	addr := ln.Addr().String()

	code, ctype, body := rawRequest(t, addr, 3000)
	assert.Equal(t, 200, code, body)

	code, ctype, body = rawRequest(t, addr, 5000)
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, code, body)
	assert.Equal(t, "application/json", ctype)
	var e Error
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	assert.Equal(t, "headers", e.Field)
	assert.Contains(t, e.Error, "4096-byte limit (--max-header-bytes)")
	req, err := http.NewRequest("POST", "http://127.0.0.1:7480/v1/plan", strings.NewReader(`{"node":"h100","bytes":8}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	assert.NoError(t, validate(t, req, code, http.Header{"Content-Type": {ctype}}, []byte(body)))

	code, ctype, body = rawRequest(t, addr, 4096+headerSlack+8192)
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, code, body)
	assert.True(t, strings.HasPrefix(ctype, "text/plain"), "Go's own answer past the slack: %q", ctype)
}

// selfSigned writes a certificate for 127.0.0.1 and its key under dir, and returns their paths and
// a pool that trusts the certificate.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "collplan test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestServeTLSOffLoopback runs the service as it runs off loopback: listening on every
// interface (0.0.0.0, an ephemeral port), with TLS and a bearer token, and talks to it through
// 127.0.0.1, so no traffic leaves the machine. HTTPS with the token is answered; without it, or
// with a wrong one, 401 naming Authorization; /healthz needs no token; plain HTTP gets no answer
// from the API; a client that does not trust the certificate fails its handshake.
func TestServeTLSOffLoopback(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	cfg := testConfig()
	cfg.Listen, cfg.TLSCert, cfg.TLSKey = "0.0.0.0:0", certFile, keyFile
	cfg.TokenFile = writeTemp(t, "tls-token-0123456789abcdef\n")
	s := newTestServer(t, cfg)
	ln, err := s.Listen()
	require.NoError(t, err)
	_, port, err := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)
	serveOn(t, s, ln)
	base := "https://127.0.0.1:" + port

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	post := func(token string) (int, string) {
		req, err := http.NewRequest("POST", base+"/v1/plan", strings.NewReader(`{"node":"h100","bytes":"1M"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NotNil(t, resp.TLS, "answered over TLS")
		return resp.StatusCode, string(b)
	}
	code, body := post("tls-token-0123456789abcdef")
	require.Equal(t, 200, code, body)
	var d map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &d))
	assert.Equal(t, "builtin", d["policy"])
	for _, tok := range []string{"", "tls-token-0123456789abcdeX"} {
		code, body = post(tok)
		assert.Equal(t, 401, code, body)
		var e Error
		require.NoError(t, json.Unmarshal([]byte(body), &e), body)
		assert.Equal(t, "Authorization", e.Field)
	}
	resp, err := client.Get(base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode, "/healthz is open")

	// Plain HTTP to the TLS port: Go's server answers 400 and nothing reaches the API.
	resp, err = (&http.Client{Timeout: 10 * time.Second}).Post("http://127.0.0.1:"+port+"/v1/plan", "application/json", strings.NewReader(`{"node":"h100","bytes":8}`))
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, 400, resp.StatusCode, string(b))
		assert.NotContains(t, string(b), `"algo"`)
	}
	// A client that does not trust the certificate fails the handshake.
	_, err = (&http.Client{Timeout: 10 * time.Second}).Get(base + "/healthz")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate")
}
