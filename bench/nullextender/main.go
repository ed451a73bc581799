// Command nullextender is a scheduler extender that decides nothing: filter passes every node it
// is sent, prioritize answers an empty list (no node gets a score), preempt keeps kube-scheduler's
// own victims. It reads and decodes each body and writes a valid answer, the least any extender
// must do, in Go's standard library (as upstream's Go extender serves). bench.extender puts it in
// kube-scheduler's configuration in place of Joulie ("-null" setups) to measure what an extender
// call costs kube-scheduler on the machine whatever the extender does.
//
//	nullextender -addr 127.0.0.1:PORT
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
)

// The request's fields an extender reads (k8s.io/kube-scheduler/extender/v1 ExtenderArgs, in the
// nodeCacheCapable form); the pod is decoded as raw JSON, which still checks and scans it.
type extenderArgs struct {
	Pod       json.RawMessage
	NodeNames *[]string
}

type filterResult struct {
	NodeNames                  *[]string
	FailedNodes                map[string]string
	FailedAndUnresolvableNodes map[string]string
	Error                      string
}

type preemptionArgs struct {
	Pod                   json.RawMessage
	NodeNameToMetaVictims map[string]json.RawMessage
}

type preemptionResult struct {
	NodeNameToMetaVictims map[string]json.RawMessage
}

// verb decodes each body into an A and writes what answer makes of it.
func verb[A any](answer func(A) any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var args A
		if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(answer(args)); err != nil {
			log.Printf("writing the answer: %v", err)
		}
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to serve on")
	flag.Parse()
	http.HandleFunc("POST /filter", verb(func(args extenderArgs) any {
		return filterResult{NodeNames: args.NodeNames}
	}))
	http.HandleFunc("POST /prioritize", verb(func(extenderArgs) any {
		return []struct{}{}
	}))
	http.HandleFunc("POST /preempt", verb(func(args preemptionArgs) any {
		return preemptionResult{NodeNameToMetaVictims: args.NodeNameToMetaVictims}
	}))
	http.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	log.Fatal(http.ListenAndServe(*addr, nil))
}
