// Package graph builds an *http.Client for Microsoft Graph whose pipeline
// keeps msgraph-sdk-go-core's Graph handlers and kiota-http-go's defaults,
// with middleware.RetryHandler in place of kiota-http-go's retry handler.
//
// A Graph user switches by building the request adapter here instead of
// with msgraphsdk.NewGraphRequestAdapter:
//
//	adapter, err := graph.NewRequestAdapter(auth, graph.WithClientOptions(msgraphsdk.GetDefaultClientOptions()))
//	client := msgraphsdk.NewGraphServiceClient(adapter)
//
// or by passing NewClient's client to msgraph-sdk-go's
// NewGraphRequestAdapterWithParseNodeFactoryAndSerializationWriterFactoryAndHttpClient.
package graph

import (
	"fmt"
	"net/http"

	absauth "github.com/microsoft/kiota-abstractions-go/authentication"
	nethttplibrary "github.com/microsoft/kiota-http-go"
	msgraphgocore "github.com/microsoftgraph/msgraph-sdk-go-core"

	"github.com/kiota-resilience/kiota-resilience-go/options"
	"github.com/kiota-resilience/kiota-resilience-go/pipeline"
)

// NewClient returns an *http.Client for Microsoft Graph. Its handlers run in
// this order:
//
//  1. Graph telemetry (SdkVersion and client-request-id headers): once per
//     request, so every retry carries the request's one client-request-id;
//  2. URL replacement (/users/me-token-to-replace becomes /me): before
//     the retry handler, so the throttle queue sees the path Graph sees;
//  3. middleware.RetryHandler, then kiota-http-go's redirect, parameters
//     name decoding, user agent, compression and headers inspection
//     handlers, as pipeline.Middlewares orders them.
//
// The retry handler it builds keeps Outlook's concurrency cap
// (MailboxConcurrency) unless the retry options name a cap of their own in
// options.QueueOptions.Concurrency; options.NoConcurrency turns it off. A
// handler given with pipeline.WithRetryHandler is used as it is.
//
// opts configure it as they do pipeline.NewClient (WithClientOptions sets
// the telemetry's library version); it returns the same errors, a second
// retry handler among them. pipeline.WithOuterMiddlewares replaces the
// Graph handlers: include Middlewares(o) in its list to keep them.
func NewClient(opts ...pipeline.Option) (*http.Client, error) {
	return pipeline.NewClient(append([]pipeline.Option{
		WithClientOptions(msgraphgocore.GraphClientOptions{}),
		pipeline.WithRetryDefaults(graphDefaults),
	}, opts...)...)
}

// graphDefaults fills the retry options NewClient builds its handler from
// with what Microsoft Graph's documented limits call for.
func graphDefaults(o *options.RetryHandlerOptions) {
	if o.Queue.Concurrency == nil {
		o.Queue.Concurrency = MailboxConcurrency
	}
}

// Middlewares returns the handlers NewClient places before the retry
// handler: Graph telemetry described by o, then URL replacement.
func Middlewares(o msgraphgocore.GraphClientOptions) []nethttplibrary.Middleware {
	return []nethttplibrary.Middleware{
		msgraphgocore.NewGraphTelemetryHandler(&o),
		nethttplibrary.NewUrlReplaceHandler(true, msgraphgocore.ReplacementPairs),
	}
}

// WithClientOptions describes the Graph service library in the SdkVersion
// header, as msgraph-sdk-go does with
// WithClientOptions(msgraphsdk.GetDefaultClientOptions()). Default: the zero
// GraphClientOptions, which names msgraph-sdk-go-core alone.
func WithClientOptions(o msgraphgocore.GraphClientOptions) pipeline.Option {
	return pipeline.WithOuterMiddlewares(Middlewares(o)...)
}

// NewRequestAdapter returns a Graph request adapter that sends through
// NewClient(opts...), for msgraphsdk.NewGraphServiceClient. It is what
// msgraphsdk.NewGraphRequestAdapter builds, on this module's client.
func NewRequestAdapter(auth absauth.AuthenticationProvider, opts ...pipeline.Option) (*msgraphgocore.GraphRequestAdapterBase, error) {
	client, err := NewClient(opts...)
	if err != nil {
		return nil, err
	}
	adapter, err := msgraphgocore.NewGraphRequestAdapterBaseWithParseNodeFactoryAndSerializationWriterFactoryAndHttpClient(
		auth, msgraphgocore.GraphClientOptions{}, nil, nil, client)
	if err != nil {
		return nil, fmt.Errorf("graph.NewRequestAdapter: %w", err)
	}
	return adapter, nil
}
