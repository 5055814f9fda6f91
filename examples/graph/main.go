// Command graph runs Microsoft Graph's own client, msgraph-sdk-go's
// GraphServiceClient, on graph.NewClient against throttletest's Graph-like
// server, which throttles: Me(), every user paged through with
// PageIterator, a POST, per-request retry options passed the way
// generated request configurations take them, and msgraph-sdk-go-core's
// BatchRequest and BatchRequestCollection, whose throttled steps the retry
// handler resends.
//
//	make example
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	abstractions "github.com/microsoft/kiota-abstractions-go"
	"github.com/microsoft/kiota-abstractions-go/authentication"
	nethttplibrary "github.com/microsoft/kiota-http-go"
	msgraphsdk "github.com/microsoftgraph/msgraph-sdk-go"
	msgraphgocore "github.com/microsoftgraph/msgraph-sdk-go-core"
	"github.com/microsoftgraph/msgraph-sdk-go/models"
	"github.com/microsoftgraph/msgraph-sdk-go/users"

	"github.com/kiota-resilience/kiota-resilience-go/graph"
	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/pipeline"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

func main() {
	// 5 requests a second with a burst of 5: paging 25 users 5 at a time
	// runs into the throttle.
	srv := throttletest.NewServer(throttletest.Config{Bucket: throttletest.Bucket{Rate: 5, Burst: 5}})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := run(ctx, srv.URL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "graph example:", err)
		os.Exit(1)
	}
	r.print(os.Stdout)
	st := srv.Stats()
	fmt.Printf("server: %d attempts, %d answered 429, %d retries sent early\n", st.Attempts, st.Throttled, st.Early)

	if err := printBatches(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "graph example:", err)
		os.Exit(1)
	}
}

// report is what the Graph calls returned.
type report struct {
	me       string // Me()'s display name
	users    int    // users seen by the page iterator
	created  string // the id of the POSTed user
	kiotaErr error  // of the call with kiota-http-go's per-request options
	oursErr  error  // of the call with this module's per-request options
}

func (r report) print(w io.Writer) {
	fmt.Fprintf(w, "Me(): %s\n", r.me)
	fmt.Fprintf(w, "PageIterator: %d users, 5 a page\n", r.users)
	fmt.Fprintf(w, "POST /users: created %s\n", r.created)
	fmt.Fprintf(w, "GET with kiota-http-go's RetryHandlerOptions: %s\n", outcome(r.kiotaErr))
	fmt.Fprintf(w, "GET with options.RetryHandlerOptions: %s\n", outcome(r.oursErr))
}

func outcome(err error) string {
	var apiErr interface{ GetStatusCode() int } // Graph's ODataError, kiota-http-go's ApiError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &apiErr):
		return fmt.Sprintf("HTTP %d", apiErr.GetStatusCode())
	}
	return err.Error()
}

// run makes the calls against the server at baseURL, through a client
// built by graph.NewClient(opts...).
func run(ctx context.Context, baseURL string, opts ...pipeline.Option) (report, error) {
	var r report
	// The client msgraph-sdk-go would build, with this module's retry
	// handler; graph.NewRequestAdapter(auth, opts...) does the same in one
	// call.
	client, err := graph.NewClient(append([]pipeline.Option{graph.WithClientOptions(msgraphsdk.GetDefaultClientOptions())}, opts...)...)
	if err != nil {
		return r, err
	}
	adapter, err := msgraphsdk.NewGraphRequestAdapterWithParseNodeFactoryAndSerializationWriterFactoryAndHttpClient(
		&authentication.AnonymousAuthenticationProvider{}, nil, nil, client)
	if err != nil {
		return r, err
	}
	adapter.SetBaseUrl(baseURL + "/v1.0")
	gsc := msgraphsdk.NewGraphServiceClient(adapter)

	me, err := gsc.Me().Get(ctx, nil)
	if err != nil {
		return r, fmt.Errorf("Me(): %w", err)
	}
	r.me = deref(me.GetDisplayName())

	top := int32(5)
	page, err := gsc.Users().Get(ctx, &users.UsersRequestBuilderGetRequestConfiguration{
		QueryParameters: &users.UsersRequestBuilderGetQueryParameters{Top: &top},
	})
	if err != nil {
		return r, fmt.Errorf("GET /users: %w", err)
	}
	it, err := msgraphgocore.NewPageIterator[models.Userable](page, adapter, models.CreateUserCollectionResponseFromDiscriminatorValue)
	if err != nil {
		return r, fmt.Errorf("page iterator: %w", err)
	}
	err = it.Iterate(ctx, func(models.Userable) bool {
		r.users++
		return true
	})
	if err != nil {
		return r, fmt.Errorf("paging /users: %w", err)
	}

	u := models.NewUser()
	u.SetDisplayName(ptr("Ada Lovelace"))
	u.SetUserPrincipalName(ptr("ada@example.com"))
	created, err := gsc.Users().Post(ctx, u, nil)
	if err != nil {
		return r, fmt.Errorf("POST /users: %w", err)
	}
	r.created = deref(created.GetId())

	// Existing Graph code passes kiota-http-go's options; they keep their
	// meaning: at most one retry, and ShouldRetry may refuse it.
	_, r.kiotaErr = gsc.Users().ByUserId("user-03").Get(ctx, &users.UserItemRequestBuilderGetRequestConfiguration{
		Options: []abstractions.RequestOption{&nethttplibrary.RetryHandlerOptions{
			MaxRetries: 1,
			ShouldRetry: func(time.Duration, int, *http.Request, *http.Response) bool {
				return false
			},
		}},
	})
	// This module's own options replace the handler's for one request.
	_, r.oursErr = gsc.Users().ByUserId("user-04").Get(ctx, &users.UserItemRequestBuilderGetRequestConfiguration{
		Options: []abstractions.RequestOption{&options.RetryHandlerOptions{MaxRetries: 2}},
	})
	return r, nil
}

func ptr[T any](v T) *T { return &v }

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
