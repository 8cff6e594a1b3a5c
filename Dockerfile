# syntax=docker/dockerfile:1
#
# Spillway's image: the admitter, the worker and spillctl, static binaries on
# distroless, running as a non-root user. One image for every role; compose
# and Kubernetes choose the command:
#
#   docker build -t spillway .
#   docker run --rm spillway admitter --help
#
# The builder's Go version is go.mod's `go` line (test/deployfiles checks
# that they agree, and builds the binaries with this file's flags).

FROM --platform=$BUILDPLATFORM golang:1.26.8-bookworm AS build
WORKDIR /src
# Modules first, in a layer of their own, so a source change does not
# download them again; the cache mounts survive between builds.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=bind,source=go.mod,target=go.mod \
    --mount=type=bind,source=go.sum,target=go.sum \
    go mod download -x
ARG TARGETOS
ARG TARGETARCH
# Static (no cgo, no libc), reproducible paths, no symbol tables.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    --mount=type=bind,target=. \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w" -o /out/ ./cmd/admitter ./cmd/worker ./cmd/spillctl

# distroless/static: CA certificates, /etc/passwd with the nonroot user
# (65532), tzdata; no shell, no package manager. Health checks use
# `spillctl probe URL` for that reason.
FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="spillway" \
      org.opencontainers.image.description="Queue-backed leaky-bucket job admission: admitter, worker and spillctl" \
      org.opencontainers.image.source="https://github.com/spillway-dev/spillway" \
      org.opencontainers.image.url="https://github.com/spillway-dev/spillway" \
      org.opencontainers.image.documentation="https://github.com/spillway-dev/spillway/blob/main/docs/deployment.md" \
      org.opencontainers.image.vendor="spillway-dev"
COPY --from=build /out/admitter /out/worker /out/spillctl /usr/local/bin/
COPY deploy/spillway.yaml /etc/spillway/spillway.yaml
# Numeric, so Kubernetes' runAsNonRoot can check it.
USER 65532:65532
# 8080: the admitter's HTTP door (/v1, /metrics, /livez, /readyz, /ui).
# 9090: the worker's --metrics-listen (/metrics, /livez, /readyz).
EXPOSE 8080 9090
# No ENTRYPOINT: the command names the role, e.g. `worker --config FILE`.
CMD ["admitter", "--config", "/etc/spillway/spillway.yaml"]
