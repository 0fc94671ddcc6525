package plugin

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOpen: the checks of a --tuner specification, each error naming the flag or file at fault.
func TestOpen(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "tuner-x")
	require.NoError(t, os.WriteFile(exe, []byte("#!/bin/sh\nexit 1\n"), 0o755))
	conf := filepath.Join(t.TempDir(), "x.conf")
	require.NoError(t, os.WriteFile(conf, nil, 0o644))
	for _, tc := range []struct {
		name string
		spec Spec
		err  string // "" for success
	}{
		{"none", Spec{Name: "none"}, ""},
		{"empty", Spec{}, ""},
		{"config without tuner", Spec{Config: conf}, "need --tuner"},
		{"timeout without tuner", Spec{Timeout: time.Second}, "need --tuner"},
		{"pin without tuner", Spec{SHA256: "00"}, "need --tuner"},
		{"unknown", Spec{Name: "nosuchpolicy"}, `tuner "nosuchpolicy" not found`},
		{"negative timeout", Spec{Name: exe, Timeout: -time.Second}, "must be positive"},
		{"short pin", Spec{Name: exe, SHA256: "abc"}, "want 64 hex digits"},
		{"missing config", Spec{Name: exe, Config: "/nonexistent.conf"}, "/nonexistent.conf"},
		{"not executable", Spec{Name: conf}, "not an executable file"},
		{"ok", Spec{Name: exe, Config: conf, Timeout: time.Second, SHA256: "00000000000000000000000000000000000000000000000000000000000000ff"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Open(tc.spec, io.Discard)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				assert.Nil(t, c)
				return
			}
			require.NoError(t, err)
			if tc.spec.None() {
				assert.Nil(t, c)
				return
			}
			require.NotNil(t, c)
			assert.Equal(t, "x", c.Name())
			assert.Len(t, c.cfg.SHA256, 32)
			assert.Equal(t, time.Second, c.cfg.CallTimeout)
			require.NoError(t, c.Close())
		})
	}
	assert.Equal(t, "none", Spec{}.String())
	assert.Equal(t, "rules (a.conf)", Spec{Name: "rules", Config: "a.conf"}.String())
}
