# Multi-stage build: a static binary on a minimal base, run as non-root.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/proxy ./cmd/proxy

FROM gcr.io/distroless/static-debian12:nonroot
WORKDIR /app
COPY --from=build /out/proxy /app/proxy
COPY conf/edge.yaml /app/conf/edge.yaml
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/app/proxy"]
CMD ["-c", "/app/conf/edge.yaml"]
