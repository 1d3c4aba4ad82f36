# Multi-stage build: a static binary on a minimal base, run as non-root.
# cmd/proxy's TestImageStartsAsItsUser lays out and runs this file's final
# stage without an engine: keep to the instructions it knows.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/proxy ./cmd/proxy && \
    mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
WORKDIR /app
COPY --from=build /out/proxy /app/proxy
# conf/edge.yaml with the admin listener and data_dir set for a container.
COPY conf/docker.yaml /app/conf/edge.yaml
# The one directory the edge writes (the embedded stand-ins' state), owned by
# the user it runs as: /app stays root's, so the image also runs --read-only.
COPY --from=build --chown=nonroot:nonroot /out/data /var/lib/flashgate
VOLUME ["/var/lib/flashgate"]
# Off loopback so health checks and Prometheus reach it; the edge refuses to
# start on it unless FLASHGATE_ADMIN_TOKEN is set (docker run -e).
ENV FLASHGATE_ADMIN_ADDR=0.0.0.0:9901
USER nonroot:nonroot
EXPOSE 8080 9901
# The base has no shell and no curl: the binary probes its own /healthz.
HEALTHCHECK --interval=10s --timeout=5s --start-period=15s --retries=3 CMD ["/app/proxy", "health", "-c", "/app/conf/edge.yaml"]
ENTRYPOINT ["/app/proxy"]
CMD ["-c", "/app/conf/edge.yaml"]
