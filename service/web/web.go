// Package web holds the assets of planner serve's web crossover map (index.html, app.js,
// style.css: plain HTML, JavaScript and CSS, no build step, no CDN), embedded so that go build
// alone makes a binary that serves them at /.
package web

import (
	"embed"
	"io/fs"
)

//go:embed index.html app.js style.css
var assets embed.FS

// FS is the map's assets, rooted at the directory of index.html.
var FS fs.FS = assets
