// Package api holds the generated gRPC code of corral's API. Regenerate it
// after editing proto/ with: go generate ./api
package api

//go:generate go run github.com/bufbuild/buf/cmd/buf@v1.75.0 generate --template ../buf.gen.yaml --output .. ..
