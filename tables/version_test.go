package tables

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOverlaySchemaVersion: an overlay carries schema_version at its top, and ApplyOverlay reads
// only the version this build knows (OverlaySchema, 1): a missing, unknown or mistyped
// version is an error naming the file (and the line), before anything else in it is judged.
func TestOverlaySchemaVersion(t *testing.T) {
	base := decodeFile(t, "testdata/overlay/base.toml")
	const cell = "\n[scale.1]\ncomm_n_channels = 24  # measured\n"
	for _, tc := range []struct {
		name, text, want string
	}{
		{"version 1", "schema_version = 1\n" + cell, ""},
		{"version 1 after a comment", "# fitted\n\nschema_version = 1  # calibrate\n" + cell, ""},
		{"missing", cell, "tables: v.fit.toml: schema_version is missing: an overlay starts with schema_version = 1 " +
			"(one written before overlays had versions has the same keys: add that line, or refit it)"},
		{"empty overlay", "", "tables: v.fit.toml: schema_version is missing"},
		{"unknown version", "schema_version = 2\n" + cell,
			"tables: v.fit.toml: line 1: schema_version: 2 is not a version this build reads (it reads 1)"},
		{"version 0", "schema_version = 0\n" + cell, "tables: v.fit.toml: line 1: schema_version: 0 is not a version this build reads (it reads 1)"},
		{"a string", "schema_version = \"1\"\n" + cell, "tables: v.fit.toml: line 1: schema_version: want an integer, got \"1\""},
		{"a float", "schema_version = 1.0\n" + cell, "tables: v.fit.toml: line 1: schema_version: want an integer, got 1"},
		{"inside a table", cell + "schema_version = 1\n", "tables: v.fit.toml: schema_version is missing"},
		{"unknown version before a bad key", "schema_version = 9\n[node]\nbogus = 1\n", "schema_version: 9 is not a version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := ApplyOverlay(base, "v.fit.toml", []byte(tc.text))
			if tc.want == "" {
				require.NoError(t, err)
				assert.Equal(t, "v.fit.toml", n.Overlay)
				assert.Equal(t, 24, n.Scale["1"].CommNChannels)
				return
			}
			require.Error(t, err)
			assert.Nil(t, n)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	// A node table does not carry it: it is an unknown key there, as any other.
	_, err := Decode("t.toml", []byte("schema_version = 1\n"))
	assert.ErrorContains(t, err, "tables: t.toml: line 1: schema_version: unknown key")
}

// TestShippedOverlaysAreVersioned: every embedded overlay is at the current schema version.
func TestShippedOverlaysAreVersioned(t *testing.T) {
	for _, name := range Names() {
		data, err := embedded.ReadFile(name + overlaySuffix)
		if err != nil {
			continue
		}
		v, err := OverlayVersion(name+overlaySuffix, data)
		require.NoError(t, err, name)
		assert.Equal(t, OverlaySchema, v, name)
	}
}
