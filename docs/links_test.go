// Package docs_test checks the project's Markdown: every relative link in
// the README and the pages beside it names a file that exists, and every
// #fragment a heading of its page.
package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pages are the Markdown files checked, relative to the repository root.
var pages = []string{"README.md", "CHANGELOG.md", "docs/*.md", "bench/*.md"}

// link matches an inline Markdown link or image, capturing its target.
var link = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

func TestRelativeLinksResolve(t *testing.T) {
	root := ".."
	var files []string
	for _, p := range pages {
		m, err := filepath.Glob(filepath.Join(root, p))
		require.NoError(t, err)
		files = append(files, m...)
	}
	require.NotEmpty(t, files)
	anchors := map[string]map[string]bool{} // file → its headings' anchors
	for _, f := range files {
		text, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, target := range links(string(text)) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, fragment, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(dest); err != nil {
					assert.Failf(t, "broken link", "%s: %s: no such file", f, target)
					continue
				}
			}
			if fragment == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if anchors[dest] == nil {
				b, err := os.ReadFile(dest)
				require.NoError(t, err)
				anchors[dest] = headings(string(b))
			}
			assert.Truef(t, anchors[dest][fragment], "%s: %s: no heading with that anchor", f, target)
		}
	}
}

// links returns the targets of the links in a Markdown text, outside
// fenced code blocks.
func links(text string) []string {
	var out []string
	fenced := false
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range link.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// headings returns the anchors GitHub gives the headings of a Markdown
// text: lower case, spaces as hyphens, other punctuation dropped, and a
// -1, -2 ... suffix on repeats.
func headings(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}
