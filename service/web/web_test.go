package web

import (
	"io/fs"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAssetsSelfContained: the embedded page loads only its own files, no CDN: every src/href in
// index.html and every fetch path in app.js is relative or rooted on this service.
func TestAssetsSelfContained(t *testing.T) {
	index, err := fs.ReadFile(FS, "index.html")
	require.NoError(t, err)
	refs := regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(string(index), -1)
	require.NotEmpty(t, refs)
	for _, r := range refs {
		assert.NotRegexp(t, `^(?:[a-z]+:)?//`, r[1], "index.html loads %s from elsewhere", r[1])
		_, err := fs.Stat(FS, r[1])
		assert.NoError(t, err, "index.html names %s, which is not embedded", r[1])
	}
	app, err := fs.ReadFile(FS, "app.js")
	require.NoError(t, err)
	for _, u := range regexp.MustCompile(`https?://[^\s"'`+"`"+`]+`).FindAllString(string(app), -1) {
		assert.Equal(t, "http://www.w3.org/2000/svg", u, "app.js names a URL elsewhere (only the SVG namespace is allowed)")
	}
	for _, p := range regexp.MustCompile(`api\("(?:GET|POST)", "([^"]+)"`).FindAllStringSubmatch(string(app), -1) {
		assert.Regexp(t, `^/v1/`, p[1])
	}
}
