package graph

import (
	"net/http"
	"strings"
)

// OutlookConcurrentRequests is how many requests Outlook serves at once
// per app and mailbox; more are answered 429 (Microsoft Graph's
// throttling limits for Outlook).
const OutlookConcurrentRequests = 4

// outlookResources are the segments below a user that Outlook serves: mail,
// calendar and contacts, and the actions on them.
var outlookResources = map[string]bool{
	"messages": true, "mailfolders": true, "sendmail": true, "mailboxsettings": true,
	"inferenceclassification": true, "outlook": true, "getmailtips": true,
	"events": true, "calendar": true, "calendars": true, "calendarview": true,
	"calendargroups": true, "findmeetingtimes": true, "reminderview": true,
	"contacts": true, "contactfolders": true,
}

// MailboxConcurrency is an options.QueueOptions.Concurrency that keeps
// Outlook's cap of OutlookConcurrentRequests requests at once per mailbox:
// a request to a user's mail, calendar or contacts (/v1.0/users/{id}/...,
// /v1.0/me/..., or the same under /beta) counts against its mailbox,
// keyed "mailbox:" and the user's id or "me" (lower-cased, as Graph reads
// it). Other requests are uncapped. Like every hold of the queue, the cap
// holds requests only once the host has throttled, and with a Store that
// implements options.SlotStore it is kept across the fleet.
func MailboxConcurrency(req *http.Request) (key string, limit int) {
	p := strings.TrimPrefix(req.URL.Path, "/")
	version, p, ok := strings.Cut(p, "/")
	if !ok || version != "v1.0" && version != "beta" {
		return "", 0
	}
	var user string
	switch first, rest, _ := strings.Cut(p, "/"); strings.ToLower(first) {
	case "me":
		user, p = "me", rest
	case "users":
		if user, p, ok = strings.Cut(rest, "/"); !ok || user == "" {
			return "", 0
		}
	default:
		return "", 0
	}
	resource, _, _ := strings.Cut(p, "/")
	resource, _, _ = strings.Cut(resource, "(") // mailFolders('Inbox')
	if !outlookResources[strings.ToLower(resource)] {
		return "", 0
	}
	return "mailbox:" + strings.ToLower(user), OutlookConcurrentRequests
}
