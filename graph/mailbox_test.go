package graph_test

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kiota-resilience/kiota-resilience-go/graph"
)

func TestMailboxConcurrency(t *testing.T) {
	tests := []struct {
		path string
		key  string // "": uncapped
	}{
		{"/v1.0/users/Adele@contoso.com/messages", "mailbox:adele@contoso.com"},
		{"/v1.0/users/adele@contoso.com/mailFolders/inbox/messages/AAMk", "mailbox:adele@contoso.com"},
		{"/v1.0/users/adele@contoso.com/mailFolders('Inbox')/messages", "mailbox:adele@contoso.com"},
		{"/beta/users/8f2c/events", "mailbox:8f2c"},
		{"/v1.0/users/8f2c/sendMail", "mailbox:8f2c"},
		{"/v1.0/users/8f2c/calendarView", "mailbox:8f2c"},
		{"/v1.0/users/8f2c/contactFolders/x/contacts", "mailbox:8f2c"},
		{"/v1.0/me/messages", "mailbox:me"},
		{"/v1.0/ME/Calendar/events", "mailbox:me"},
		{"/v1.0/users/8f2c", ""},                     // Identity, not Outlook
		{"/v1.0/users/8f2c/drive/root/children", ""}, // OneDrive
		{"/v1.0/users/8f2c/memberOf", ""},
		{"/v1.0/users", ""},
		{"/v1.0/users//messages", ""},
		{"/v1.0/sites/root/lists", ""},
		{"/v2/users/8f2c/messages", ""}, // not Graph's versions
		{"/users/8f2c/messages", ""},
		{"/", ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			key, limit := graph.MailboxConcurrency(httptest.NewRequest("GET", "https://graph.microsoft.com"+tt.path, nil))
			assert.Equal(t, tt.key, key)
			if tt.key == "" {
				assert.Zero(t, limit)
			} else {
				assert.Equal(t, graph.OutlookConcurrentRequests, limit)
			}
		})
	}
}
