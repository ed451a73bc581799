// Command goclient calls a Joulie extender verb the way kube-scheduler's HTTPExtender does (Go's
// net/http client, one keep-alive connection, one call at a time) and prints, as JSON, the
// seconds each call took until the answer was read and until it was decoded into the extender
// API's types. bench.extender runs it with --go-client; it uses the standard library only.
//
//	goclient -url http://127.0.0.1:PORT/prioritize -verb prioritize -n 2000 -warmup 100 BODY...
//
// The bodies (files) are sent in turn.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// The extender API's answers as kube-scheduler decodes them (k8s.io/kube-scheduler/extender/v1).
type hostPriority struct {
	Host  string
	Score int64
}

type filterResult struct {
	Nodes                      *json.RawMessage
	NodeNames                  *[]string
	FailedNodes                map[string]string
	FailedAndUnresolvableNodes map[string]string
	Error                      string
}

type timings struct {
	Answered []float64 `json:"answered"`
	Decoded  []float64 `json:"decoded"`
}

func main() {
	url := flag.String("url", "", "the verb's URL")
	verb := flag.String("verb", "prioritize", "filter or prioritize (how to decode the answer)")
	n := flag.Int("n", 2000, "calls timed")
	warmup := flag.Int("warmup", 100, "calls before the timed ones")
	flag.Parse()
	if *url == "" || flag.NArg() == 0 {
		fail("usage: goclient -url URL [-verb V] [-n N] [-warmup W] BODY...")
	}
	var bodies [][]byte
	for _, path := range flag.Args() {
		body, err := os.ReadFile(path)
		if err != nil {
			fail(err.Error())
		}
		bodies = append(bodies, body)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	out := timings{Answered: make([]float64, 0, *n), Decoded: make([]float64, 0, *n)}
	for i := 0; i < *warmup+*n; i++ {
		started := time.Now()
		answer := call(client, *url, bodies[i%len(bodies)])
		answered := time.Since(started)
		decode(*verb, answer)
		if i >= *warmup {
			out.Answered = append(out.Answered, answered.Seconds())
			out.Decoded = append(out.Decoded, time.Since(started).Seconds())
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail(err.Error())
	}
}

func call(client *http.Client, url string, body []byte) []byte {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		fail(err.Error())
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		fail(err.Error())
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		fail(err.Error())
	}
	if resp.StatusCode != http.StatusOK {
		fail(fmt.Sprintf("HTTP %d: %.300s", resp.StatusCode, answer))
	}
	return answer
}

func decode(verb string, answer []byte) {
	var err error
	switch verb {
	case "prioritize":
		var result []hostPriority
		err = json.Unmarshal(answer, &result)
	case "filter":
		var result filterResult
		err = json.Unmarshal(answer, &result)
	default:
		fail("verb " + verb + ": expected filter or prioritize")
	}
	if err != nil {
		fail(err.Error())
	}
}

func fail(message string) {
	fmt.Fprintln(os.Stderr, "goclient:", message)
	os.Exit(1)
}
