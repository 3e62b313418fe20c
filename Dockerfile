# syntax=docker/dockerfile:1
# One Dockerfile, a target per deployable:
#
#   docker build --target controller-manager -t onepool/controller-manager .
#   docker build --target scheduler          -t onepool/scheduler .
#   docker build --target node-agent         -t onepool/slurmd .   # the slurmd worker image
#   docker build --target slurmctld|slurmrestd|slurmdbd|login|mariadb    # the slurm chart's images
#
# Base images are arguments, so the same file builds without a registry
# (`make images` passes images it made from Debian's mirror):
#   GO_IMAGE    a Debian trixie image with Go 1.26 in /usr/local/go (default golang:1.26-trixie)
#   BASE_IMAGE  Debian for the runtime images; its suite is the Slurm release they carry:
#               debian:trixie-slim (the default) Slurm 24.11, debian:sid-slim Slurm 26.05.
#               The jail plugin is compiled on it, against that release's headers (slurmd
#               loads no plugin built for another release); tag such images
#               <version>-slurm26.05, as `make images SLURM=26.05` does.
ARG GO_IMAGE=golang:1.26-trixie
ARG BASE_IMAGE=debian:trixie-slim

FROM ${GO_IMAGE} AS build
# GOMODCACHE may be set to where a mounted module cache sits (make images).
ARG GOMODCACHE=/go/pkg/mod
ENV PATH=/usr/local/go/bin:$PATH GOMODCACHE=${GOMODCACHE}
# The node agent links go-nvml with cgo.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# kube-scheduler reports the Kubernetes version it was built from (as the Makefile stamps it).
ARG K8S_VERSION=v1.35.4
# cgo stays on for all three (glibc is in every runtime image): go-nvml needs
# it, and one build configuration lets a mounted build cache serve them all.
RUN mkdir -p /out \
    && go build -o /out/onepool-controller-manager ./cmd/onepool-controller-manager \
    && go build -o /out/onepool-scheduler \
       -ldflags "-X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=35" \
       ./cmd/onepool-scheduler \
    && go build -o /out/onepool-node-agent ./cmd/onepool-node-agent

# The SPANK jail plugin, against <slurm/spank.h> of the runtime images' own
# Slurm release (spank.h stamps it into plugin_version).
FROM ${BASE_IMAGE} AS jail
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev make libslurm-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY spank/ spank/
RUN make -B -C spank SLURM_INCLUDE=/usr/include onepool_jail.so \
    && plugindir=/out/lib/$(gcc -dumpmachine)/slurm-wlm && mkdir -p "$plugindir" && cp spank/onepool_jail.so "$plugindir/"

FROM ${BASE_IMAGE} AS controller-manager
COPY --from=build /out/onepool-controller-manager /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/onepool-controller-manager"]

FROM ${BASE_IMAGE} AS scheduler
COPY --from=build /out/onepool-scheduler /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/onepool-scheduler"]

# Slurm's images share this stage: Debian's munge and Slurm client tools,
# the slurm user with a fixed uid (slurmctld, slurmdbd and slurmd must agree
# on it), and the small entrypoints in build/slurm/.
FROM ${BASE_IMAGE} AS slurm-common
RUN groupadd -g 64030 slurm && useradd -r -u 64030 -g slurm -d /var/lib/slurm -s /usr/sbin/nologin slurm \
    && apt-get update && apt-get install -y --no-install-recommends munge slurm-client ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY build/slurm/onepool-munged build/slurm/onepool-users build/slurm/onepool-login build/slurm/onepool-slurm-prepare /usr/local/bin/
# The jail plugin, where Slurm's plugstack finds it: slurmd runs it, and
# sbatch/srun load plugstack.conf too (a `required` plugin they cannot
# open fails every submission), so every Slurm image has it. In Debian's
# PluginDir of the build's architecture (/usr/lib/<gcc -dumpmachine>/
# slurm-wlm: x86_64-linux-gnu, aarch64-linux-gnu): plugstack.conf names it
# without a path.
COPY --from=jail /out/lib/ /usr/lib/

# The slurmd worker: slurmd from Debian, the node agent as the entrypoint
# (it finds the GPUs, writes gres.conf and execs slurmd -Z).
FROM slurm-common AS node-agent
RUN apt-get update && apt-get install -y --no-install-recommends slurmd \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/onepool-node-agent /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/onepool-node-agent", "run"]

# The slurm chart's daemons (charts/slurm): each image adds one package.
FROM slurm-common AS slurmctld
RUN apt-get update && apt-get install -y --no-install-recommends slurmctld slurm-wlm-jwt-plugin \
    && rm -rf /var/lib/apt/lists/*
ENTRYPOINT ["/usr/sbin/slurmctld", "-D", "-i"]

# slurmrestd refuses to run as root or SlurmUser: its own user, uid 6820.
FROM slurm-common AS slurmrestd
RUN apt-get update && apt-get install -y --no-install-recommends slurmrestd slurm-wlm-jwt-plugin \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd -g 6820 slurmrestd && useradd -r -u 6820 -g slurmrestd -s /usr/sbin/nologin slurmrestd
USER 6820:6820
ENTRYPOINT ["/usr/sbin/slurmrestd"]

FROM slurm-common AS slurmdbd
RUN apt-get update && apt-get install -y --no-install-recommends slurmdbd slurm-wlm-jwt-plugin mariadb-client \
    && rm -rf /var/lib/apt/lists/*
ENTRYPOINT ["/usr/sbin/slurmdbd", "-D"]

# Where users run sbatch, srun, squeue and sacct (slurm-client).
FROM slurm-common AS login
ENTRYPOINT ["/usr/local/bin/onepool-login"]

# MariaDB for slurmdbd's accounting database.
FROM ${BASE_IMAGE} AS mariadb
RUN apt-get update && apt-get install -y --no-install-recommends mariadb-server \
    && rm -rf /var/lib/apt/lists/*
COPY build/slurm/onepool-mariadb /usr/local/bin/
USER 0
ENTRYPOINT ["/usr/local/bin/onepool-mariadb"]
