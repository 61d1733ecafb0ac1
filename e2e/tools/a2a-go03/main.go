// a2a-go03: the A2A 0.3 client of the official Go SDK (github.com/a2aproject/a2a-go v0.3.3)
// as a command, for runtime/test/a2a/a2a-v03.test.ts. Built into the tool cache by
// e2e/tools/tools.ts. It resolves the agent card at $A2A_BASE with the SDK's resolver, makes
// its client from the card (JSON-RPC, as the card prefers) and runs one operation, printing
// each result or event as a line of JSON; an error is printed as {"error": "..."} and exit 1.
//
//	A2A_BASE=https://host A2A_TOKEN=... A2A_CA=ca.pem a2a-go03 card|send TEXT|get ID|stream TEXT|cancel ID|resubscribe ID
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"
)

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}

func print(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(b))
}

func fail(err error) {
	b, _ := json.Marshal(map[string]string{"error": err.Error()})
	fmt.Println(string(b))
	os.Exit(1)
}

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: a2a-go03 card|send TEXT|get ID|stream TEXT|cancel ID|resubscribe ID"))
	}
	arg := ""
	if len(os.Args) > 2 {
		arg = os.Args[2]
	}
	pool := x509.NewCertPool()
	if ca := os.Getenv("A2A_CA"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			fail(err)
		}
		pool.AppendCertsFromPEM(pem)
	}
	httpClient := &http.Client{
		Timeout:   60 * time.Second,
		Transport: bearer{os.Getenv("A2A_TOKEN"), &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	card, err := agentcard.NewResolver(httpClient).Resolve(ctx, os.Getenv("A2A_BASE"))
	if err != nil {
		fail(fmt.Errorf("resolving the card: %w", err))
	}
	if os.Args[1] == "card" {
		print(card)
		return
	}
	client, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(httpClient))
	if err != nil {
		fail(fmt.Errorf("making the client: %w", err))
	}
	defer client.Destroy()
	blocking := false
	switch os.Args[1] {
	case "send":
		res, err := client.SendMessage(ctx, &a2a.MessageSendParams{
			Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: arg}),
			Config:  &a2a.MessageSendConfig{Blocking: &blocking},
		})
		if err != nil {
			fail(err)
		}
		print(res)
	case "get":
		task, err := client.GetTask(ctx, &a2a.TaskQueryParams{ID: a2a.TaskID(arg)})
		if err != nil {
			fail(err)
		}
		print(task)
	case "cancel":
		task, err := client.CancelTask(ctx, &a2a.TaskIDParams{ID: a2a.TaskID(arg)})
		if err != nil {
			fail(err)
		}
		print(task)
	case "stream", "resubscribe":
		events := client.ResubscribeToTask(ctx, &a2a.TaskIDParams{ID: a2a.TaskID(arg)})
		if os.Args[1] == "stream" {
			events = client.SendStreamingMessage(ctx, &a2a.MessageSendParams{
				Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.TextPart{Text: arg}),
			})
		}
		for ev, err := range events {
			if err != nil {
				fail(err)
			}
			print(map[string]any{"type": fmt.Sprintf("%T", ev), "event": ev})
		}
	default:
		fail(fmt.Errorf("unknown operation %s", os.Args[1]))
	}
}
