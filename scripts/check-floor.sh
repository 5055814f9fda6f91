#!/bin/sh
# Checks that a consumer declaring the oldest supported Go release (FLOOR,
# default 1.25) keeps its go directive when it depends on this module and on
# redisstore: a newer directive here or among the requirements would bump it
# on `go get`.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
floor=${FLOOR:-1.25}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/go.mod" <<MOD
module example.com/consumer

go $floor

replace github.com/kiota-resilience/kiota-resilience-go => $root

replace github.com/kiota-resilience/kiota-resilience-go/redisstore => $root/redisstore
MOD
cat >"$dir/main.go" <<'SRC'
package main

import (
	_ "github.com/kiota-resilience/kiota-resilience-go/graph"
	_ "github.com/kiota-resilience/kiota-resilience-go/pipeline"
	_ "github.com/kiota-resilience/kiota-resilience-go/redisstore"
)

func main() {}
SRC
cd "$dir"
mods="github.com/kiota-resilience/kiota-resilience-go@v0.0.0-00010101000000-000000000000
	github.com/kiota-resilience/kiota-resilience-go/redisstore@v0.0.0-00010101000000-000000000000"
GOTOOLCHAIN=local GOFLAGS=-mod=mod go get $mods >/dev/null 2>&1 ||
	GOTOOLCHAIN=local GOFLAGS=-mod=mod go get $mods
GOTOOLCHAIN=local go mod tidy
got=$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod)
if [ "$got" != "$floor" ]; then
	echo "check-floor: a consumer declaring go $floor was moved to go $got" >&2
	exit 1
fi
GOTOOLCHAIN=local go build ./...
echo "check-floor: a consumer declaring go $floor keeps it"
