#!/usr/bin/env bash
# Regenerates the Python code of every .proto under proto/: messages (*_pb2.py), gRPC stubs (*_pb2_grpc.py)
# and typed stubs for both (*.pyi, mypy-protobuf); and the Go code of the protos the Go scheduler plugin uses
# (*.pb.go, *_grpc.pb.go, into the scheduler/ module, at the path their go_package names). The generated files
# are committed; the generator versions are pinned (Python: pyproject.toml's `test` extra; Go: scheduler/go.mod's
# tool lines) because their output embeds them.
#
#   tools/regen_protos.sh           regenerate in place (and delete generated files whose .proto is gone)
#   tools/regen_protos.sh --check   regenerate into a scratch folder; exit 1 when anything would change
set -euo pipefail
cd "$(dirname "$0")/.."

# Each directory of .proto files names the Python package its code is generated into. The package, not the
# proto path, becomes the import path the generated code uses (k8s.io/... is not importable). A new .proto in a
# listed directory is picked up as it is; a new directory needs its line here, and the script says so.
declare -A PACKAGE_FOR=(
  ["k8s.io/kubelet/pkg/apis/podresources/v1"]="agent/podresources/v1"
  ["kubenexus/placement/v1"]="placement/api/v1"
)
# The proto directories with Go code: their go_package is under the scheduler/ module (kubenexus.io/scheduler).
GO_PROTO_DIRS=("kubenexus/placement/v1")
GO_MODULE=kubenexus.io/scheduler
GENERATED_GLOBS=('*_pb2.py' '*_pb2.pyi' '*_pb2_grpc.py' '*_pb2_grpc.pyi' 'scheduler/*.pb.go')

mode=write
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

mapfile -t proto_dirs < <(find proto -name '*.proto' -printf '%h\n' | sed 's|^proto/||' | sort -u)
for dir in "${proto_dirs[@]}"; do
  package=${PACKAGE_FOR[$dir]:-}
  if [[ -z $package ]]; then
    echo "error: proto/$dir has .proto files but no Python package; add it to PACKAGE_FOR in $0" >&2
    exit 2
  fi
  mapfile -t protos < <(find "proto/$dir" -maxdepth 1 -name '*.proto' | sort)
  # -I<package>=<dir> makes protoc see each file as <package>/<name>.proto, so the generated imports are
  # `from <package as dotted path> import ..._pb2`.
  python -m grpc_tools.protoc "-I$package=proto/$dir" \
    --python_out="$scratch" --grpc_python_out="$scratch" \
    --mypy_out="$scratch" --mypy_grpc_out="$scratch" \
    "${protos[@]}" 2> >(grep -v '^Writing mypy to ' >&2)
done

# Go: protoc-gen-go and protoc-gen-go-grpc built at the versions scheduler/go.mod pins, the same protoc.
mkdir -p "$scratch/.bin" "$scratch/scheduler"
(cd scheduler && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -o "$scratch/.bin/" \
  google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc)
for dir in "${GO_PROTO_DIRS[@]}"; do
  mapfile -t protos < <(find "proto/$dir" -maxdepth 1 -name '*.proto' | sort)
  python -m grpc_tools.protoc -Iproto \
    --plugin=protoc-gen-go="$scratch/.bin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$scratch/.bin/protoc-gen-go-grpc" \
    --go_out="$scratch/scheduler" --go_opt=module=$GO_MODULE \
    --go-grpc_out="$scratch/scheduler" --go-grpc_opt=module=$GO_MODULE \
    "${protos[@]}"
done
rm -rf "$scratch/.bin"

# Generated files the work tree holds now (committed or not), to spot stale ones.
mapfile -t existing < <(git ls-files --cached --others --exclude-standard -- "${GENERATED_GLOBS[@]}" | sort -u)
mapfile -t generated < <(cd "$scratch" && find . -type f -printf '%P\n' | sort)

if [[ $mode == check ]]; then
  status=0
  for file in "${generated[@]}"; do
    if ! cmp -s "$scratch/$file" "$file"; then
      echo "out of date: $file" >&2
      status=1
    fi
  done
  for file in "${existing[@]}"; do
    if [[ ! -e $scratch/$file ]]; then
      echo "stale (its .proto is gone): $file" >&2
      status=1
    fi
  done
  if ((status)); then
    echo "generated protobuf code differs from proto/; run tools/regen_protos.sh and commit the result" >&2
  fi
  exit "$status"
fi

for file in "${existing[@]}"; do
  [[ -e $scratch/$file ]] || rm -f -- "$file"
done
for file in "${generated[@]}"; do
  mkdir -p "$(dirname "$file")"
  cp "$scratch/$file" "$file"
done
echo "regenerated ${#generated[@]} files from ${#proto_dirs[@]} proto directories"
