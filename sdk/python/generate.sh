#!/bin/sh
# Regenerates the wire of the Python SDK from proto/ with Debian's protoc
# (protobuf-compiler) and grpc_python_plugin (protobuf-compiler-grpc).
set -eu
cd "$(dirname "$0")"
protoc -I ../../proto --python_out=. --grpc_python_out=. --plugin=protoc-gen-grpc_python="$(command -v grpc_python_plugin)" \
	../../proto/corral/v1/sandbox.proto ../../proto/corral/v1/files.proto ../../proto/corral/v1/tenants.proto \
	../../proto/corral/v1/snapshots.proto
