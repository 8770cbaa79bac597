#!/usr/bin/env bash
# Builds the Ordo container image: a static ordo binary in an image FROM
# scratch (deploy/docker/Dockerfile). Needs Go and the Docker engine; pulls
# nothing from any registry.
#
#   scripts/docker-build.sh [TAG]      TAG defaults to ordo:dev
#
# The binary is built here (CGO_ENABLED=0, -trimpath, -ldflags "-s -w") for
# linux/$GOARCH (GOARCH defaults to the host's), then copied with an empty
# data dir into a temp build context, so the context is a few MB and never
# holds the repository, .cluster/ or certificates.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tag=${1:-ordo:dev}
[ $# -le 1 ] || { echo "usage: $(basename "$0") [TAG]" >&2; exit 2; }
command -v docker >/dev/null 2>&1 || { echo "docker not found" >&2; exit 1; }

ctx=$(mktemp -d "${TMPDIR:-/tmp}/ordo-docker-XXXXXX")
trap 'rm -rf "$ctx"' EXIT

(cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH=${GOARCH:-$(go env GOARCH)} \
  go build -trimpath -ldflags "-s -w" -o "$ctx/ordo" ./cmd/ordo)
mkdir -p "$ctx/rootfs" && mkdir -m 0700 "$ctx/rootfs/data"
cp "$root/deploy/docker/Dockerfile" "$ctx/Dockerfile"

# -q prints only the image id; errors still go to stderr.
docker build -q -t "$tag" "$ctx" >/dev/null
echo "built $tag ($(du -h "$ctx/ordo" | cut -f1) binary)"
