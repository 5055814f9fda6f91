package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	abs "github.com/microsoft/kiota-abstractions-go"
)

// The request builders below have the shape Kiota generates (msgraph-sdk-go's
// users.UsersRequestBuilder and UserItemRequestBuilder): a URL template,
// path parameters, a request configuration carrying headers and request
// options, and the request adapter to send through. The bodies are plain
// JSON, so that the demo needs no serialization library. Each request gets
// its own copy of the path parameters: the request adapter writes the base
// URL into them, and one builder serves every worker.

// user is the part of a Graph user the demo reads back.
type user struct {
	ID          string `json:"id"`
	DisplayName string `json:"displayName,omitempty"`
}

// usersRequestBuilder builds and sends requests to {+baseurl}/users.
type usersRequestBuilder struct{ abs.BaseRequestBuilder }

func newUsersRequestBuilder(adapter abs.RequestAdapter) *usersRequestBuilder {
	return &usersRequestBuilder{*abs.NewBaseRequestBuilder(adapter, "{+baseurl}/users", nil)}
}

// ByUserID returns the builder of one user.
func (b *usersRequestBuilder) ByUserID(id string) *userItemRequestBuilder {
	params := map[string]string{"user%2Did": id}
	return &userItemRequestBuilder{*abs.NewBaseRequestBuilder(b.RequestAdapter, "{+baseurl}/users/{user%2Did}", params)}
}

// Post creates a user from body, a JSON object.
func (b *usersRequestBuilder) Post(ctx context.Context, body []byte, config *abs.RequestConfiguration[abs.DefaultQueryParameters]) (*user, error) {
	info := abs.NewRequestInformationWithMethodAndUrlTemplateAndPathParameters(abs.POST, b.UrlTemplate, maps.Clone(b.PathParameters))
	abs.ConfigureRequestInformation(info, config)
	info.Headers.TryAdd("Accept", "application/json")
	info.SetStreamContentAndContentType(body, "application/json")
	return send(ctx, b.RequestAdapter, info)
}

// userItemRequestBuilder builds and sends requests to one user.
type userItemRequestBuilder struct{ abs.BaseRequestBuilder }

// Get reads the user.
func (b *userItemRequestBuilder) Get(ctx context.Context, config *abs.RequestConfiguration[abs.DefaultQueryParameters]) (*user, error) {
	info := abs.NewRequestInformationWithMethodAndUrlTemplateAndPathParameters(abs.GET, b.UrlTemplate, maps.Clone(b.PathParameters))
	abs.ConfigureRequestInformation(info, config)
	info.Headers.TryAdd("Accept", "application/json")
	return send(ctx, b.RequestAdapter, info)
}

func send(ctx context.Context, adapter abs.RequestAdapter, info *abs.RequestInformation) (*user, error) {
	raw, err := adapter.SendPrimitive(ctx, info, "[]byte", nil)
	if err != nil {
		return nil, err
	}
	b, _ := raw.([]byte)
	var u user
	if err := json.Unmarshal(b, &u); err != nil || u.ID == "" {
		return nil, fmt.Errorf("unexpected body %q", b)
	}
	return &u, nil
}
