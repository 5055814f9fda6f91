package middleware

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// seekOnly hides strings.Reader's other methods, as a Kiota adapter's
// body does.
type seekOnly struct{ io.ReadSeeker }

func (seekOnly) Close() error { return nil }

// TestSeekView_ReadAfterReplaced checks what a transport that is still
// reading an attempt's body gets once a newer attempt, or the end of the
// request, replaced that body: the end of the body when the attempt
// already had all of it (net/http reads on past a known length to check
// that the body ends there), an error otherwise.
func TestSeekView_ReadAfterReplaced(t *testing.T) {
	const payload = "0123456789"
	tests := []struct {
		name    string
		length  int64 // the request's ContentLength
		read    int   // bytes the attempt read before it was replaced
		readEOF bool  // the attempt read on until the seeker said EOF
		by      string
		want    error
	}{
		{"whole known length, request finished", 10, 10, false, "finish", io.EOF},
		{"whole known length, newer attempt", 10, 10, false, "retry", io.EOF},
		{"part of a known length, request finished", 10, 4, false, "finish", errStaleBody},
		{"part of a known length, newer attempt", 10, 4, false, "retry", errStaleBody},
		{"unknown length read to EOF", 0, 10, true, "finish", io.EOF},
		{"unknown length, all bytes but no EOF yet", 0, 10, false, "finish", errStaleBody},
		{"unknown length, part", 0, 4, false, "retry", errStaleBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/", nil)
			require.NoError(t, err)
			req.Body = seekOnly{strings.NewReader(payload)}
			req.ContentLength = tt.length
			r := newReplayer(req)
			require.True(t, r.rewindable())
			body, err := r.next()
			require.NoError(t, err)
			buf := make([]byte, tt.read)
			_, err = io.ReadFull(body, buf)
			require.NoError(t, err)
			assert.Equal(t, payload[:tt.read], string(buf))
			if tt.readEOF {
				n, err := body.Read(make([]byte, 1))
				require.Equal(t, 0, n)
				require.ErrorIs(t, err, io.EOF)
			}

			switch tt.by {
			case "finish":
				r.finish()
			case "retry":
				newer, err := r.next()
				require.NoError(t, err)
				got, err := io.ReadAll(newer)
				require.NoError(t, err)
				assert.Equal(t, payload, string(got), "the newer attempt sends the whole body")
			}
			n, err := body.Read(make([]byte, 4))
			assert.Equal(t, 0, n)
			assert.ErrorIs(t, err, tt.want)
		})
	}
}
