package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"

	abstractions "github.com/microsoft/kiota-abstractions-go"
	"github.com/microsoft/kiota-abstractions-go/authentication"
	msgraphsdk "github.com/microsoftgraph/msgraph-sdk-go"
	msgraphgocore "github.com/microsoftgraph/msgraph-sdk-go-core"
	"github.com/microsoftgraph/msgraph-sdk-go/models"
	"github.com/microsoftgraph/msgraph-sdk-go/users"

	"github.com/kiota-resilience/kiota-resilience-go/graph"
	"github.com/kiota-resilience/kiota-resilience-go/throttletest"
)

// mailboxRule throttles like Outlook, whose budget is per mailbox: every
// /users/{id}/{resource}... request draws from the budget of mailbox {id},
// here 4 requests at once and 5 a second after. A batch that reads a
// mailbox more than 4 times at once has its later items answered 429 on
// their own, while its other items succeed.
func mailboxRule() throttletest.Rule {
	return throttletest.Rule{
		Name: "mailbox",
		Match: func(r *http.Request) (string, bool) {
			seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/") // v1.0, users, {id}, {resource}
			if len(seg) < 4 || seg[1] != "users" {
				return "", false
			}
			return seg[2], true
		},
		Limiter: throttletest.BucketLimiter(throttletest.Bucket{Rate: 5, Burst: 4}),
	}
}

// newBatchAdapter returns a Graph request adapter on this module's client,
// sending to the Graph service root baseURL/v1.0.
func newBatchAdapter(baseURL string) (*msgraphgocore.GraphRequestAdapterBase, error) {
	adapter, err := graph.NewRequestAdapter(&authentication.AnonymousAuthenticationProvider{},
		graph.WithClientOptions(msgraphsdk.GetDefaultClientOptions()))
	if err != nil {
		return nil, err
	}
	adapter.SetBaseUrl(baseURL + "/v1.0")
	return adapter, nil
}

// stepAdder is what msgraph-sdk-go-core's BatchRequest and
// BatchRequestCollection have in common for building a batch.
type stepAdder interface {
	AddBatchRequestStep(abstractions.RequestInformation) (msgraphgocore.BatchItem, error)
}

// mailboxReads are eight Outlook reads of one mailbox.
var mailboxReads = []func(context.Context, *users.UserItemRequestBuilder) (*abstractions.RequestInformation, error){
	func(ctx context.Context, u *users.UserItemRequestBuilder) (*abstractions.RequestInformation, error) {
		return u.Messages().ToGetRequestInformation(ctx, nil)
	},
	func(ctx context.Context, u *users.UserItemRequestBuilder) (*abstractions.RequestInformation, error) {
		return u.Events().ToGetRequestInformation(ctx, nil)
	},
	func(ctx context.Context, u *users.UserItemRequestBuilder) (*abstractions.RequestInformation, error) {
		return u.Contacts().ToGetRequestInformation(ctx, nil)
	},
	func(ctx context.Context, u *users.UserItemRequestBuilder) (*abstractions.RequestInformation, error) {
		return u.MailFolders().ToGetRequestInformation(ctx, nil)
	},
	func(ctx context.Context, u *users.UserItemRequestBuilder) (*abstractions.RequestInformation, error) {
		return u.Calendars().ToGetRequestInformation(ctx, nil)
	},
	func(ctx context.Context, u *users.UserItemRequestBuilder) (*abstractions.RequestInformation, error) {
		return u.ContactFolders().ToGetRequestInformation(ctx, nil)
	},
	func(ctx context.Context, u *users.UserItemRequestBuilder) (*abstractions.RequestInformation, error) {
		return u.Calendar().ToGetRequestInformation(ctx, nil)
	},
	func(ctx context.Context, u *users.UserItemRequestBuilder) (*abstractions.RequestInformation, error) {
		return u.MailFolders().ByMailFolderId("inbox").Messages().ToGetRequestInformation(ctx, nil)
	},
}

// mailboxBatch names three of the 20 steps addMailboxSteps adds.
type mailboxBatch struct {
	draft   msgraphgocore.BatchItem // a POST to adele's mailbox, throttled
	inbox   msgraphgocore.BatchItem // a read of adele's mailbox, throttled
	profile msgraphgocore.BatchItem // adele's profile, after inbox: dependsOn it
}

// addMailboxSteps adds to b 20 steps: eight on adele's mailbox (five
// reads, a draft posted, her inbox, one more read), her profile, which
// depends on the inbox, eight reads of bob's mailbox, and three reads
// outside any mailbox. Under mailboxRule the last four steps on each
// mailbox are throttled, and the profile fails with the inbox.
func addMailboxSteps(ctx context.Context, gsc *msgraphsdk.GraphServiceClient, b stepAdder) (mailboxBatch, error) {
	var infos []*abstractions.RequestInformation
	var buildErr error
	step := func(info *abstractions.RequestInformation, err error) int {
		if err != nil && buildErr == nil {
			buildErr = fmt.Errorf("building batch step %d: %w", len(infos)+1, err)
		}
		infos = append(infos, info)
		return len(infos) - 1
	}
	adele, bob := gsc.Users().ByUserId("adele"), gsc.Users().ByUserId("bob")
	for _, read := range mailboxReads[:5] {
		step(read(ctx, adele))
	}
	message := models.NewMessage()
	message.SetSubject(ptr("Quarterly report"))
	draft := step(adele.Messages().ToPostRequestInformation(ctx, message, nil))
	inbox := step(adele.MailFolders().ByMailFolderId("inbox").ToGetRequestInformation(ctx, nil))
	step(mailboxReads[5](ctx, adele))
	profile := step(adele.ToGetRequestInformation(ctx, nil))
	for _, read := range mailboxReads {
		step(read(ctx, bob))
	}
	step(gsc.Me().ToGetRequestInformation(ctx, nil))
	step(gsc.Users().ByUserId("carol").ToGetRequestInformation(ctx, nil))
	step(gsc.Users().ByUserId("dave").ToGetRequestInformation(ctx, nil))
	if buildErr != nil {
		return mailboxBatch{}, buildErr
	}
	items := make([]msgraphgocore.BatchItem, len(infos))
	for i, info := range infos {
		var err error
		if items[i], err = b.AddBatchRequestStep(*info); err != nil {
			return mailboxBatch{}, fmt.Errorf("adding batch step %d: %w", i+1, err)
		}
	}
	items[profile].DependsOnItem(items[inbox])
	return mailboxBatch{draft: items[draft], inbox: items[inbox], profile: items[profile]}, nil
}

// addReads adds n reads spread over the mailboxes, each mailbox read in
// turn.
func addReads(ctx context.Context, gsc *msgraphsdk.GraphServiceClient, b stepAdder, n int, mailboxes ...string) error {
	for i := range n {
		u := gsc.Users().ByUserId(mailboxes[i%len(mailboxes)])
		info, err := mailboxReads[i/len(mailboxes)%len(mailboxReads)](ctx, u)
		if err != nil {
			return fmt.Errorf("building batch step %d: %w", i+1, err)
		}
		if _, err = b.AddBatchRequestStep(*info); err != nil {
			return fmt.Errorf("adding batch step %d: %w", i+1, err)
		}
	}
	return nil
}

// batchReport is what the batch calls returned, as status counts.
type batchReport struct {
	batch      map[int32]int // BatchRequest's 20 steps by final status
	collection map[int32]int // BatchRequestCollection's 45 steps by final status
}

func (r batchReport) print(w io.Writer) {
	fmt.Fprintf(w, "BatchRequest, 20 steps on two mailboxes: %s\n", statusCounts(r.batch))
	fmt.Fprintf(w, "BatchRequestCollection, 45 steps in 3 batches: %s\n", statusCounts(r.collection))
}

func statusCounts(m map[int32]int) string {
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d answered %d", m[s], s))
	}
	return strings.Join(parts, ", ")
}

func countStatuses(resp msgraphgocore.BatchResponse) map[int32]int {
	out := map[int32]int{}
	for _, s := range resp.GetStatusCodes() {
		out[s]++
	}
	return out
}

// runBatch sends a BatchRequest of addMailboxSteps, then a
// BatchRequestCollection of 45 reads of three other mailboxes, through
// adapter; the retry handler resends their throttled steps, so every step
// comes back with its final status.
func runBatch(ctx context.Context, adapter *msgraphgocore.GraphRequestAdapterBase) (batchReport, error) {
	var r batchReport
	gsc := msgraphsdk.NewGraphServiceClient(adapter)
	batch := msgraphgocore.NewBatchRequest(adapter)
	if _, err := addMailboxSteps(ctx, gsc, batch); err != nil {
		return r, err
	}
	resp, err := batch.Send(ctx, adapter)
	if err != nil {
		return r, fmt.Errorf("BatchRequest.Send: %w", err)
	}
	r.batch = countStatuses(resp)

	collection := msgraphgocore.NewBatchRequestCollection(adapter)
	if err := addReads(ctx, gsc, collection, 45, "carol", "dave", "erin"); err != nil {
		return r, err
	}
	if resp, err = collection.Send(ctx, adapter); err != nil {
		return r, fmt.Errorf("BatchRequestCollection.Send: %w", err)
	}
	r.collection = countStatuses(resp)
	return r, nil
}

// printBatches runs runBatch against a server whose budgets are per
// mailbox, as Outlook's are, so that a batch's items are throttled on
// their own, and writes what Send returned and what the server saw.
func printBatches(ctx context.Context, w io.Writer) error {
	srv := throttletest.NewServer(throttletest.Config{Rules: []throttletest.Rule{mailboxRule()}})
	defer srv.Close()
	adapter, err := newBatchAdapter(srv.URL)
	if err != nil {
		return err
	}
	r, err := runBatch(ctx, adapter)
	if err != nil {
		return err
	}
	r.print(w)
	st := srv.Stats()
	fmt.Fprintf(w, "server: %d item attempts, %d answered 429 and resent, %d resent early\n", st.Attempts, st.Throttled, st.Early)
	return nil
}
