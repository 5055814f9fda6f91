// Package pipeline composes kiota-http-go's middleware chain with
// middleware.RetryHandler in place of kiota-http-go's own retry handler, in
// a fixed order, and builds an *http.Client or a Kiota request adapter on it.
package pipeline

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	absauth "github.com/microsoft/kiota-abstractions-go/authentication"
	nethttplibrary "github.com/microsoft/kiota-http-go"

	"github.com/kiota-resilience/kiota-resilience-go/middleware"
	"github.com/kiota-resilience/kiota-resilience-go/options"
)

// DefaultTimeout is the overall client timeout NewClient sets, as
// kiota-http-go's default client does.
const DefaultTimeout = 100 * time.Second

// Middlewares returns kiota-http-go's default handlers with retry as the
// first one, always in this order (kiota-http-go ranges over a map, so its
// own order changes from one client to the next):
//
//  1. retry: outermost, so every attempt runs the whole chain below on a
//     fresh copy of the request, and a redirect that ends in a 429 is
//     retried from the original URL;
//  2. redirect;
//  3. parameters name decoding;
//  4. user agent;
//  5. compression: after the handlers that edit the URL and headers, so a
//     retried body is compressed from the original bytes each time;
//  6. headers inspection: last, so it sees the headers as sent.
func Middlewares(retry *middleware.RetryHandler) []nethttplibrary.Middleware {
	return []nethttplibrary.Middleware{
		retry,
		nethttplibrary.NewRedirectHandler(),
		nethttplibrary.NewParametersNameDecodingHandler(),
		nethttplibrary.NewUserAgentHandler(),
		nethttplibrary.NewCompressionHandler(),
		nethttplibrary.NewHeadersInspectionHandler(),
	}
}

// Option configures NewClient and NewRequestAdapter.
type Option func(*config) error

type config struct {
	retryOpts    options.RetryHandlerOptions
	retryOptsSet bool
	retryFills   []func(*options.RetryHandlerOptions)
	retry        *middleware.RetryHandler
	transport    http.RoundTripper
	timeout      time.Duration
	outer        []nethttplibrary.Middleware
	middlewares  []nethttplibrary.Middleware
}

// ErrConflict is wrapped by the error NewClient returns for options that
// contradict each other, such as a second retry handler in the chain.
var ErrConflict = errors.New("conflicting pipeline options")

// WithRetryOptions configures the retry handler the client builds.
// Default: the zero RetryHandlerOptions, that is every documented default.
// It cannot be combined with WithRetryHandler, whose handler has its own.
func WithRetryOptions(o options.RetryHandlerOptions) Option {
	return func(c *config) error { c.retryOpts, c.retryOptsSet = o, true; return nil }
}

// WithRetryDefaults has fill set defaults of its own in the options the
// client builds its retry handler from (WithRetryOptions's, or the zero
// value), after every option is applied, so that a library building on
// this package (graph.NewClient) sets defaults that its users' options
// keep unless they set the field themselves. fill should set only fields
// left at their zero value. Fills run in the order given; a handler given
// with WithRetryHandler is used as it is.
func WithRetryDefaults(fill func(*options.RetryHandlerOptions)) Option {
	return func(c *config) error {
		if fill == nil {
			return errors.New("pipeline.WithRetryDefaults: fill is nil")
		}
		c.retryFills = append(c.retryFills, fill)
		return nil
	}
}

// WithRetryHandler uses h instead of building a handler, so that several
// clients share one handler and its knowledge of the server's throttling.
func WithRetryHandler(h *middleware.RetryHandler) Option {
	return func(c *config) error {
		if h == nil {
			return errors.New("pipeline.WithRetryHandler: handler is nil")
		}
		c.retry = h
		return nil
	}
}

// WithTransport sets the RoundTripper at the end of the chain. Default:
// kiota-http-go's default transport (HTTP/2 attempted, compression on).
func WithTransport(rt http.RoundTripper) Option {
	return func(c *config) error {
		if rt == nil {
			return errors.New("pipeline.WithTransport: transport is nil")
		}
		c.transport = rt
		return nil
	}
}

// WithTimeout sets the client's overall timeout, retries and waits
// included; 0 means none. Default: DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("pipeline.WithTimeout: timeout = %v must not be negative", d)
		}
		c.timeout = d
		return nil
	}
}

// WithMiddlewares replaces the handlers that follow the retry handler
// (default: the rest of Middlewares' list), for a chain of one's own. The
// list must not hold a retry handler: two in one chain multiply each
// other's attempts.
func WithMiddlewares(m ...nethttplibrary.Middleware) Option {
	return func(c *config) error {
		if err := checkMiddlewares("pipeline.WithMiddlewares", m); err != nil {
			return err
		}
		c.middlewares = m
		return nil
	}
}

// WithOuterMiddlewares replaces the handlers that run before the retry
// handler, once per request whatever retries follow, such as handlers that
// rewrite the URL or stamp a request id every attempt must share. Default:
// none for NewClient; graph.NewClient sets Microsoft Graph's. The list must
// not hold a retry handler.
func WithOuterMiddlewares(m ...nethttplibrary.Middleware) Option {
	return func(c *config) error {
		if err := checkMiddlewares("pipeline.WithOuterMiddlewares", m); err != nil {
			return err
		}
		c.outer = m
		return nil
	}
}

// checkMiddlewares rejects nil handlers and retry handlers, ours or
// kiota-http-go's, which would retry each of the chain's retries.
func checkMiddlewares(op string, m []nethttplibrary.Middleware) error {
	for i, h := range m {
		switch h.(type) {
		case nil:
			return fmt.Errorf("%s: handler %d is nil", op, i)
		case *middleware.RetryHandler, *nethttplibrary.RetryHandler, nethttplibrary.RetryHandler:
			return fmt.Errorf("%w: %s: handler %d is a %T, but the chain already has its retry handler (set it with WithRetryHandler or WithRetryOptions)", ErrConflict, op, i, h)
		}
	}
	return nil
}

func newConfig(opts []Option) (*config, error) {
	c := &config{timeout: DefaultTimeout}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	if c.retryOptsSet && c.retry != nil {
		return nil, fmt.Errorf("%w: pipeline: both WithRetryOptions and WithRetryHandler given; the handler's own options would silently win (pass the options to middleware.NewRetryHandler instead)", ErrConflict)
	}
	if c.retry == nil {
		for _, fill := range c.retryFills {
			fill(&c.retryOpts)
		}
		h, err := middleware.NewRetryHandler(c.retryOpts)
		if err != nil {
			return nil, fmt.Errorf("pipeline: %w", err)
		}
		c.retry = h
	}
	if c.transport == nil {
		c.transport = nethttplibrary.GetDefaultTransport()
	}
	return c, nil
}

func (c *config) chain() []nethttplibrary.Middleware {
	inner := c.middlewares
	if inner == nil {
		inner = Middlewares(c.retry)[1:]
	}
	chain := make([]nethttplibrary.Middleware, 0, len(c.outer)+1+len(inner))
	chain = append(chain, c.outer...)
	chain = append(chain, c.retry)
	return append(chain, inner...)
}

// NewClient returns an *http.Client whose transport runs the chain of
// Middlewares. Like kiota-http-go's default client it does not follow
// redirects itself (the redirect handler does) and times out after
// DefaultTimeout. It returns an error wrapping ErrConflict, naming the
// conflict, when a handler list holds another retry handler or when both
// WithRetryOptions and WithRetryHandler are given.
func NewClient(opts ...Option) (*http.Client, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &http.Client{
		Transport:     nethttplibrary.NewCustomTransportWithParentTransport(c.transport, c.chain()...),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       c.timeout,
	}, nil
}

// NewRequestAdapter returns a Kiota request adapter that sends through
// NewClient(opts...), ready for a Kiota-generated client. Microsoft Graph's
// client needs Graph's own handlers too: use graph.NewRequestAdapter.
func NewRequestAdapter(auth absauth.AuthenticationProvider, opts ...Option) (*nethttplibrary.NetHttpRequestAdapter, error) {
	client, err := NewClient(opts...)
	if err != nil {
		return nil, err
	}
	adapter, err := nethttplibrary.NewNetHttpRequestAdapterWithParseNodeFactoryAndSerializationWriterFactoryAndHttpClient(auth, nil, nil, client)
	if err != nil {
		return nil, fmt.Errorf("pipeline.NewRequestAdapter: %w", err)
	}
	return adapter, nil
}
