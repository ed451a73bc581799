// Command etcd is the etcd server, built from the go.etcd.io/etcd/server/v3
// module pinned in this directory's go.mod (version set in hack/versions.env).
//
// It exists because `go install go.etcd.io/etcd/server/v3@<tag>` is refused:
// the upstream go.mod carries replace directives. As a dependency of this
// module those directives are ignored, so the plain import below builds.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
