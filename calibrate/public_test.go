package calibrate

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// publicSource is one [[file]] entry of testdata/public/SOURCES.toml.
type publicSource struct {
	Name        string   `toml:"name"`
	Repository  string   `toml:"repository"`
	Path        string   `toml:"path"`
	Commit      string   `toml:"commit"`
	URL         string   `toml:"url"`
	Licence     string   `toml:"licence"`
	What        string   `toml:"what"`
	Covers      []string `toml:"covers"`
	PinEvidence string   `toml:"pin_evidence"`
}

// keptBack are the repositories whose public sweeps are kept back to validate the calibrator
// independently: no file here may come from them (nor from issue 1453 of NVIDIA/nccl).
var keptBack = []string{
	"yumibyte/cs244c-research",
	"togethercomputer/together-nccl-tests",
	"keitaw/p5-nccl-test-2024-07-19",
	"boeschf/nccl-benchmark-on-alps-2025",
	"eunomia-bpf/nccl-ebpf",
	"aws-samples/aws-efa-eks",
	"lessizzmore/create-a3mega-ztan-fork",
	"thomaslie210/nccl_test_results",
	"github.com/nvidia/nccl/issues/1453",
}

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// publicSetsDir is the one directory testdata/public may hold: sets/NAME/sweeps.toml manifests that
// group the stored files (by reference, ../../FILE) and state what the files do not say.
const publicSetsDir = "sets"

// checkSources checks the SOURCES.toml of dir (rel is dir's name in messages, "testdata/public"):
// every key known, every file of dir (but SOURCES.toml and the subdirectories in skip) named by
// exactly one entry and every entry by a file, each entry saying where it comes from (repository,
// commit with path, or url; licence; what), none from a kept-back repository. It returns the
// entries.
func checkSources(t *testing.T, dir, rel string, skip ...string) []publicSource {
	t.Helper()
	var doc struct {
		File []publicSource `toml:"file"`
	}
	md, err := toml.DecodeFile(filepath.Join(dir, "SOURCES.toml"), &doc)
	require.NoError(t, err)
	assert.Empty(t, md.Undecoded(), "keys %s/SOURCES.toml has but the test does not know", rel)
	require.NotEmpty(t, doc.File)

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	onDisk := map[string]bool{}
	for _, e := range entries {
		if e.Name() == "SOURCES.toml" || (e.IsDir() && slices.Contains(skip, e.Name())) {
			continue
		}
		require.False(t, e.IsDir(), "%s: no directories in %s but %v", e.Name(), rel, skip)
		onDisk[e.Name()] = true
	}
	named := map[string]int{}
	for _, f := range doc.File {
		named[f.Name]++
		assert.True(t, onDisk[f.Name], "%s: named in %s/SOURCES.toml but not in %s", f.Name, rel, rel)
		assert.NotEmpty(t, strings.TrimSpace(f.Repository), "%s: no repository", f.Name)
		assert.True(t, f.Commit != "" || f.URL != "", "%s: neither commit nor url", f.Name)
		if f.Commit != "" {
			assert.Regexp(t, commitRE, f.Commit, "%s: commit", f.Name)
			assert.NotEmpty(t, f.Path, "%s: a commit without a path", f.Name)
		}
		assert.NotEmpty(t, f.Licence, "%s: licence (\"not stated\" where none is)", f.Name)
		assert.NotEmpty(t, f.What, "%s: what", f.Name)
		for _, src := range []string{f.Repository, f.URL} {
			low := strings.ToLower(strings.TrimSuffix(strings.TrimSpace(src), "/"))
			if low == "" {
				continue
			}
			for _, kb := range keptBack {
				assert.False(t, low == kb || strings.HasSuffix(low, "/"+kb) || strings.Contains(low, kb+"/") ||
					strings.HasSuffix(low, "github.com/"+kb),
					"%s: %s is kept back for independent validation", f.Name, src)
			}
		}
	}
	for name := range onDisk {
		assert.Equal(t, 1, named[name], "%s: must have exactly one %s/SOURCES.toml entry", name, rel)
	}
	for name, n := range named {
		assert.LessOrEqual(t, n, 1, "%s: named %d times", name, n)
	}
	return doc.File
}

// TestPublicSources checks that testdata/public holds only files SOURCES.toml accounts for, none
// of them from a kept-back repository, and that together they cover what the calibrator's
// validation needs. sets/ holds manifests (TestPublicSets); logs/ has its own SOURCES.toml
// (TestPublicLogSources).
func TestPublicSources(t *testing.T) {
	files := checkSources(t, filepath.Join("testdata", "public"), "testdata/public", publicSetsDir, "logs")
	known := map[string]bool{"pcie-pinned": true, "nvswitch-ring": true, "nvswitch-default": true,
		"multinode-scaling": true, "nccl-log": true}
	repos := map[string]bool{}
	covered := map[string]bool{}
	for _, f := range files {
		repos[strings.ToLower(f.Repository)] = true
		for _, c := range f.Covers {
			assert.True(t, known[c], "%s: unknown covers value %q", f.Name, c)
			covered[c] = true
		}
	}
	for _, c := range []string{"pcie-pinned", "nvswitch-ring", "nvswitch-default", "multinode-scaling"} {
		assert.True(t, covered[c], "no file covers %s", c)
	}
	assert.GreaterOrEqual(t, len(repos), 5, "distinct repositories: %v", repos)
}

// TestPublicSets checks every testdata/public/sets/NAME: it holds only a sweeps.toml, whose entries
// all name a file stored one level up beside SOURCES.toml (no copies), and which loads with every
// file read (each giving at least one run) and no disagreement between the manifest and the files.
// At least one set must span three node counts of one collective (issue 12's multi-node scaling
// set).
func TestPublicSets(t *testing.T) {
	dir := filepath.Join("testdata", "public")
	sets, err := os.ReadDir(filepath.Join(dir, publicSetsDir))
	require.NoError(t, err)
	require.NotEmpty(t, sets)
	maxNodeCounts := 0
	for _, set := range sets {
		t.Run(set.Name(), func(t *testing.T) {
			require.True(t, set.IsDir(), "%s: sets/ holds directories", set.Name())
			setDir := filepath.Join(dir, publicSetsDir, set.Name())
			files, err := os.ReadDir(setDir)
			require.NoError(t, err)
			for _, f := range files {
				assert.Equal(t, ManifestName, f.Name(), "%s: a set holds only its manifest", set.Name())
			}
			man, err := LoadManifest(filepath.Join(setDir, ManifestName))
			require.NoError(t, err)
			for _, e := range man.Sweeps {
				assert.Equal(t, filepath.Join("..", "..", filepath.Base(e.File)), filepath.Clean(e.File),
					"%s line %d: name a file of testdata/public as ../../FILE", ManifestName, e.Line)
				_, err := os.Stat(filepath.Join(dir, filepath.Base(e.File)))
				assert.NoError(t, err, "%s line %d", ManifestName, e.Line)
			}
			sweeps, probs, err := LoadSweeps(filepath.Join(setDir, ManifestName))
			require.NoError(t, err)
			for _, p := range probs {
				// applyEntry files every manifest-versus-file disagreement under the manifest.
				assert.NotEqual(t, man.File, p.File, "manifest and file disagree: %s", p)
			}
			// Every listed file gives at least one run (a file of section runs gives several).
			fromFile := map[string]bool{}
			for _, s := range sweeps {
				fromFile[filepath.Base(s.File)] = true
			}
			for _, e := range man.Sweeps {
				assert.True(t, fromFile[filepath.Base(e.File)], "%s line %d: no run read from %s", ManifestName, e.Line, e.File)
			}
			nodes := map[string]map[int]bool{}
			for _, s := range sweeps {
				if !s.CollKnown {
					continue
				}
				k := s.Coll.String()
				if nodes[k] == nil {
					nodes[k] = map[int]bool{}
				}
				nodes[k][s.Nodes] = true
			}
			for _, ns := range nodes {
				maxNodeCounts = max(maxNodeCounts, len(ns))
			}
		})
	}
	assert.GreaterOrEqual(t, maxNodeCounts, 3, "no set spans 3 node counts of one collective")
}

// TestPublicLogSources checks testdata/public/logs the way TestPublicSources checks
// testdata/public: every file has exactly one entry in logs/SOURCES.toml, none is from a kept-back
// repository, and each entry says where it is from and covers nccl-log.
func TestPublicLogSources(t *testing.T) {
	for _, f := range checkSources(t, filepath.Join("testdata", "public", "logs"), "testdata/public/logs") {
		assert.Equal(t, []string{"nccl-log"}, f.Covers, "%s: covers", f.Name)
	}
}
