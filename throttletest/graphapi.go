package throttletest

import (
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

// serveGraphCollection writes a successful GET of a /users collection as
// Microsoft Graph pages it, and reports whether the request was one.
// Other answers keep the server's single-object bodies, which Graph
// clients read as a user (GET /me) or as the created item (POST).
func serveGraphCollection(w http.ResponseWriter, r *http.Request, status int) bool {
	if r.Method != http.MethodGet || !strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), "/users") {
		return false
	}
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
	return true
}
