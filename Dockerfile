# Builds every onepool binary under cmd/ into one small image.
# syntax=docker/dockerfile:1
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# cmd/ holds one main per deployable; while none exists this installs nothing.
RUN mkdir -p /out && if ls cmd/*/main.go >/dev/null 2>&1; then CGO_ENABLED=0 GOBIN=/out go install ./cmd/...; fi

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER nonroot:nonroot
