package throttletest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// GraphUsers is how many users the server's /users collection holds, so
// that a Graph client pages through it (GET .../users, $top at most 999,
// default 10) with the @odata.nextLink of each page, as Microsoft Graph
// answers.
const GraphUsers = 25

// graphUser is a user as Microsoft Graph returns it.
type graphUser struct {
	ID                string `json:"id"`
	DisplayName       string `json:"displayName"`
	UserPrincipalName string `json:"userPrincipalName"`
}

// graphPage is one page of a Graph collection.
type graphPage struct {
	Context  string      `json:"@odata.context,omitempty"`
	NextLink string      `json:"@odata.nextLink,omitempty"`
	Value    []graphUser `json:"value"`
}

// serveGraph writes the successful answer to a request on a /users
// collection below Graph's version roots (/v1.0, /beta) as Microsoft Graph
// would, and reports whether the request was
// one: a GET is answered a page, a POST the user it created, with the
// display name and principal name of the JSON body it sent. Other answers
// keep the server's single-object bodies, which Graph clients read as a
// user (GET /me).
func serveGraph(w http.ResponseWriter, r *http.Request, status int, body []byte) bool {
	path := strings.TrimSuffix(r.URL.Path, "/")
	if !strings.HasSuffix(path, "/users") || !strings.HasPrefix(path, "/v1.0/") && !strings.HasPrefix(path, "/beta/") {
		return false
	}
	switch r.Method {
	case http.MethodGet:
		servePage(w, r, status)
		return true
	case http.MethodPost:
		var u graphUser
		if json.Unmarshal(body, &u) != nil {
			return false
		}
		sum := sha256.Sum256(body)
		u.ID = "new-" + hex.EncodeToString(sum[:4])
		w.WriteHeader(status)
		writeJSON(w, u)
		return true
	}
	return false
}

// servePage writes one page of the /users collection, from $skiptoken.
func servePage(w http.ResponseWriter, r *http.Request, status int) {
	q := r.URL.Query()
	top, err := strconv.Atoi(q.Get("$top"))
	if err != nil || top < 1 || top > 999 {
		top = 10
	}
	skip, err := strconv.Atoi(q.Get("$skiptoken"))
	if err != nil || skip < 0 {
		skip = 0
	}
	page := graphPage{Value: []graphUser{}}
	for i := skip; i < min(skip+top, GraphUsers); i++ {
		id := fmt.Sprintf("user-%02d", i+1)
		page.Value = append(page.Value, graphUser{ID: id, DisplayName: "User " + id, UserPrincipalName: id + "@example.com"})
	}
	if next := skip + top; next < GraphUsers {
		link := url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path,
			RawQuery: "$top=" + strconv.Itoa(top) + "&$skiptoken=" + strconv.Itoa(next)}
		page.NextLink = link.String()
	}
	w.WriteHeader(status)
	writeJSON(w, page)
}
