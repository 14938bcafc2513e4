// Command etcd is etcd's server, built from go.etcd.io/etcd/server/v3 at the version go.mod pins.
//
// server/v3's own go.mod replaces its sibling modules with local paths, so `go install
// go.etcd.io/etcd/server/v3@v3.6.x` is refused; this one-line main over etcdmain (the package
// etcd's own main calls: server/main.go upstream) builds the same binary from the published modules.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
