# onepool — every command users and CI rely on. `make help` lists them.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

LAB_DIR ?= $(CURDIR)/.lab
LAB_NODES ?= 4
LAB_EXTRA_NODES ?= 0
export ONEPOOL_LAB_DIR := $(LAB_DIR)
export ONEPOOL_LAB_NODES := $(LAB_NODES)
export ONEPOOL_LAB_EXTRA_NODES := $(LAB_EXTRA_NODES)
# The Slurm release the lab runs: 24.11 (Debian trixie) or 26.05 (sid).
SLURM ?= 24.11
export ONEPOOL_LAB_SLURM := $(SLURM)
# The release's rootfs (test/lab/release.go names them).
# The Kubernetes release of the lab's API server: 1.35 (the one onepool is
# built from; every other Kubernetes binary of the lab is 1.35) or 1.36 (its
# own tool module, test/tools/kube-1.36). make test's second lane runs 1.36.
KUBE ?= 1.35
export ONEPOOL_LAB_KUBE := $(KUBE)
ROOTFS := $(LAB_DIR)/$(if $(filter 26.05,$(SLURM)),rootfs-26.05,rootfs)
# Lab tests bring the lab up when make runs them; a bare `go test ./...`
# skips them unless a lab already runs.
export ONEPOOL_E2E := 1

BIN := $(LAB_DIR)/bin
K8S_VERSION := v1.35.4
K8S_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=35
K8S_NEXT_VERSION := v1.36.3
K8S_NEXT_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(K8S_NEXT_VERSION) -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36
KWOK_VERSION := v0.8.0
SCHEDULER_PLUGINS_VERSION := v0.35.4-devel
# A count, not a duration: with a duration, go1.26's fuzz coordinator can fail a run
# with a bare "context deadline exceeded" when its workers are starved at the
# deadline (golang/go#75804, fixed in go1.27); seen here in `make ci-fresh` under load.
FUZZTIME ?= 100000x
UNIT_PKGS := ./charts/... ./drain/... ./internal/... ./slurmnode/... ./agent/... ./slurmrest/... ./gpuwebhook/... ./test/lab/... ./keys/... ./syncer/... ./scheduler/... ./nodeset/... ./topology/... ./cmd/... ./examples/... ./test/gpuproof/...

.PHONY: bench-scale lint rules kueue lab-spank lab-26.05-beside lab-26.05-kube help up down lab-status lab-manifest ci-fresh images images-dockerfile gpu-proof tools node-tools generate openapi-spec vet unit fuzz e2e e2e-node e2e-26.05 test bench bench-install bench-slurmrest bench-syncer bench-scheduler bench-nodeset bench-spank bench-slurm-chart bench-gpu bench-placeholders bench-workloads spank soak soak-short

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

up: tools ## the whole system on this machine (Slurm lab + Kubernetes control plane), a slurmd pod for each static node
	$(BIN)/lab up
	$(BIN)/lab slurmd-pods

down: ## stop everything `make up` started and unmount the lab (and the 26.05 lab make test runs beside it)
	@if [ -x $(BIN)/lab ]; then $(BIN)/lab down; else go run ./test/lab/cmd/lab down; fi
	@if [ -x $(LAB_2605_DIR)/bin/lab ]; then \
	  if ip netns list 2>/dev/null | grep -qw $(LAB_2605_NETNS); then \
	    nsenter --net=/var/run/netns/$(LAB_2605_NETNS) env ONEPOOL_LAB_DIR=$(LAB_2605_DIR) $(LAB_2605_DIR)/bin/lab down; \
	    ip netns del $(LAB_2605_NETNS); \
	  else ONEPOOL_LAB_DIR=$(LAB_2605_DIR) $(LAB_2605_DIR)/bin/lab down; fi; fi

lab-status: ## which lab daemons run; the rootfs's packages against the last proven manifest
	@$(BIN)/lab status

lab-manifest: $(BIN)/lab ## record the rootfs's packages as proven (test/lab/rootfs/rootfs-trixie.manifest), after a passing make test
	$(BIN)/lab manifest --accept

ci-fresh: ## what CI does, on a fresh clone of HEAD with no .lab/ (own network namespace; a running lab is left alone)
	test/ci-fresh.sh

# The images are assembled, not built (test/lab/images): the Slurm rootfs
# as Debian made it is their shared base layer, onepool's binaries and the
# jail plugin go on top; seconds, no package installed again. The Dockerfile
# builds the same contents with Docker (TestImagesMatchTheDockerfile);
# `make images-dockerfile` builds it with buildah, as before.
IMAGE_VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
images: $(BIN)/lab $(BIN)/onepool-controller-manager $(BIN)/onepool-scheduler $(BIN)/onepool-node-agent ## onepool's eight images (the Dockerfile's targets) as OCI archives in .lab/images, assembled from the rootfs and .lab/bin in seconds (SLURM=26.05: .lab/images-26.05, tagged VERSION-slurm26.05)
	$(BIN)/lab rootfs
	$(MAKE) spank
	$(BIN)/lab images $(CURDIR) $(IMAGE_VERSION)

gpu-proof: ## the real-GPU proof (test/gpuproof): build its binaries into .gpuproof/bin, run it here; on a GPU machine run test/gpuproof/run.sh with .gpuproof carried
	test/gpuproof/build.sh
	test/gpuproof/run.sh .gpuproof/bin

images-dockerfile: ## the Dockerfile's targets built with buildah (slow: packages installed per image); OCI archives in .lab/images
	build/images-dockerfile.sh

tools: $(BIN)/kube-apiserver $(if $(filter 1.36,$(KUBE)),$(BIN)/kube-apiserver-1.36) $(BIN)/kube-controller-manager $(BIN)/kubectl $(BIN)/etcd $(BIN)/kwok $(LAB_DIR)/kwok-stages.yaml $(BIN)/lab $(BIN)/onepool-controller-manager $(BIN)/onepool-scheduler $(BIN)/onepool-node-agent $(BIN)/kubectl-onepool $(BIN)/helm $(LAB_DIR)/podgroup-crd.yaml $(BIN)/lws-controller $(LAB_DIR)/lws-crd.yaml $(BIN)/jobset-controller $(LAB_DIR)/jobset-crd.yaml $(BIN)/promtool ## build the lab's binaries (cached in .lab/bin) and onepool's

# onepool's own binaries, rebuilt when any Go file changes; the lab restarts them then.
$(BIN)/onepool-controller-manager: $(shell git ls-files '*.go' 2>/dev/null | grep -v '^test/') go.mod go.sum
	go build -o $@ ./cmd/onepool-controller-manager

# kubectl onepool (the plugin: put it on PATH as kubectl-onepool).
$(BIN)/kubectl-onepool: $(shell git ls-files '*.go' 2>/dev/null | grep -v '^test/') go.mod go.sum
	go build -o $@ ./cmd/kubectl-onepool

$(BIN)/onepool-scheduler: $(shell git ls-files '*.go' 2>/dev/null | grep -v '^test/') go.mod go.sum
	go build -ldflags "$(K8S_LDFLAGS)" -o $@ ./cmd/onepool-scheduler

# The node agent links go-nvml (cgo, dlopen of libnvidia-ml at run time); the
# lab runs it inside the Slurm chroot, whose glibc is newer than the host's.
$(BIN)/onepool-node-agent: $(shell git ls-files '*.go' 2>/dev/null | grep -v '^test/') go.mod go.sum
	go build -o $@ ./cmd/onepool-node-agent

$(BIN)/kube-apiserver: go.mod go.sum
	go build -ldflags "$(K8S_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-apiserver

# The next Kubernetes release's API server (KUBE=1.36), from its own module.
$(BIN)/kube-apiserver-1.36: test/tools/kube-1.36/go.mod test/tools/kube-1.36/go.sum
	cd test/tools/kube-1.36 && go build -ldflags "$(K8S_NEXT_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-apiserver

$(BIN)/kubectl: go.mod go.sum
	go build -ldflags "$(K8S_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kubectl

$(BIN)/etcd: test/tools/etcd/go.mod test/tools/etcd/go.sum
	cd test/tools/etcd && go build -o $@ go.etcd.io/etcd/server/v3

HELM_VERSION := v3.20.2
$(BIN)/helm: test/tools/helm/go.mod test/tools/helm/go.sum
	cd test/tools/helm && go build -ldflags "-X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION)" -o $@ helm.sh/helm/v3/cmd/helm

# A real kubelet (optional lab node, ONEPOOL_LAB_REAL_KUBELET=1): built from its own
# small module, since inside the main one its dependencies (cadvisor, cgroups) lack go.sum entries.
$(BIN)/kubelet: test/tools/kubelet/go.mod test/tools/kubelet/go.sum
	cd test/tools/kubelet && go build -ldflags "$(K8S_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kubelet

# kube-controller-manager (Deployments, ReplicaSets, ServiceAccounts, garbage collection):
# from the same module as the kubelet, whose packages it imports.
$(BIN)/kube-controller-manager: test/tools/kubelet/go.mod test/tools/kubelet/go.sum
	cd test/tools/kubelet && go build -ldflags "$(K8S_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-controller-manager

# kube-scheduler: the default scheduler, which places the chart's own pods on the real node.
$(BIN)/kube-scheduler: go.mod go.sum
	go build -ldflags "$(K8S_LDFLAGS)" -o $@ k8s.io/kubernetes/cmd/kube-scheduler

# The real node's pod sandbox process, static: its image holds nothing else.
$(BIN)/pause: test/lab/pause/main.go
	CGO_ENABLED=0 go build -o $@ ./test/lab/pause

.PHONY: node-tools
node-tools: $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kube-scheduler $(BIN)/kubectl $(BIN)/etcd $(BIN)/lab $(BIN)/kubelet $(BIN)/pause ## binaries of the real kubelet node (`lab node up`, ONEPOOL_LAB_REAL_KUBELET=1)

# From its own tool module, whose Kubernetes modules are test/tools/kube-1.36's:
# the API server 1.36 and kwok then share one compiled copy of them (a cold
# machine compiles client-go once for both, not twice).
$(BIN)/kwok: test/tools/kwok/go.mod test/tools/kwok/go.sum
	@grep -qE '^\s*(require )?sigs.k8s.io/kwok $(KWOK_VERSION)( |$$)' test/tools/kwok/go.mod || { echo "kwok: test/tools/kwok does not require $(KWOK_VERSION)" >&2; exit 1; }
	cd test/tools/kwok && go build -o $@ sigs.k8s.io/kwok/cmd/kwok

# kwok ships no stages in the binary: take the upstream "fast" ones, and
# the lab's own (test/lab/controlplane/kwok-job-stages.yaml: a Job's pod
# deleted while Running fails first, as with a kubelet; upstream's
# pod-delete then leaves such pods to it). A Job's pod completes at once,
# unless its annotation pod-complete.stage.kwok.x-k8s.io/delay (a duration,
# as in upstream's "general" stages) keeps it running that long.
KWOK_JOB_RUNNING := '((.metadata.ownerReferences // []) | map(.kind) | index("Job")) != null and .status.phase == "Running"'
$(LAB_DIR)/kwok-stages.yaml: test/lab/controlplane/kwok-job-stages.yaml
	@mkdir -p $(LAB_DIR)
	dir=$$(go mod download -json sigs.k8s.io/kwok@$(KWOK_VERSION) | sed -n 's/^\s*"Dir": "\(.*\)",/\1/p'); \
	s=$$dir/kustomize/stage; \
	for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
	         pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do \
	  echo '---'; \
	  case $$f in \
	  pod/fast/pod-complete.yaml) awk '/^  next:/ { print "  delay:"; print "    durationMilliseconds: 0"; \
	      print "    durationFrom:"; print "      expressionFrom: '"'"'.metadata.annotations[\"pod-complete.stage.kwok.x-k8s.io/delay\"]'"'"'" } { print }' $$s/$$f ;; \
	  pod/fast/pod-delete.yaml) awk -v k=$(KWOK_JOB_RUNNING) '{ print } /^      operator: .Exists./ { print "    - key: '"'"'" k "'"'"'"; \
	      print "      operator: '"'"'In'"'"'"; print "      values:"; print "      - '"'"'false'"'"'" }' $$s/$$f ;; \
	  *) cat $$s/$$f ;; \
	  esac; echo; done > $@.tmp && echo '---' >> $@.tmp && cat $< >> $@.tmp && mv $@.tmp $@

# scheduler-plugins' PodGroup CRD, for gangs (coscheduling).
$(LAB_DIR)/podgroup-crd.yaml:
	@mkdir -p $(LAB_DIR)
	dir=$$(go mod download -json sigs.k8s.io/scheduler-plugins@$(SCHEDULER_PLUGINS_VERSION) | sed -n 's/^\s*"Dir": "\(.*\)",/\1/p'); \
	cp $$dir/manifests/coscheduling/crd.yaml $@.tmp && chmod 644 $@.tmp && mv $@.tmp $@

# LeaderWorkerSet (sigs.k8s.io/lws): its controller, from its released
# module (test/tools/lws, on the main module's Kubernetes libraries so a
# cold build compiles them once), and its CRD from the same module.
LWS_VERSION := v0.7.0
$(BIN)/lws-controller: test/tools/lws/go.mod test/tools/lws/go.sum
	cd test/tools/lws && go build -o $@ sigs.k8s.io/lws/cmd
$(LAB_DIR)/lws-crd.yaml:
	@mkdir -p $(LAB_DIR)
	dir=$$(go mod download -json sigs.k8s.io/lws@$(LWS_VERSION) | sed -n 's/^\s*"Dir": "\(.*\)",/\1/p'); \
	cp $$dir/config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml $@.tmp && chmod 644 $@.tmp && mv $@.tmp $@

# JobSet (sigs.k8s.io/jobset) likewise, from test/tools/jobset (controller-
# runtime v0.22.1, its own).
JOBSET_VERSION := v0.10.1
$(BIN)/jobset-controller: test/tools/jobset/go.mod test/tools/jobset/go.sum
	cd test/tools/jobset && go build -o $@ sigs.k8s.io/jobset
$(LAB_DIR)/jobset-crd.yaml:
	@mkdir -p $(LAB_DIR)
	dir=$$(go mod download -json sigs.k8s.io/jobset@$(JOBSET_VERSION) | sed -n 's/^\s*"Dir": "\(.*\)",/\1/p'); \
	cp $$dir/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml $@.tmp && chmod 644 $@.tmp && mv $@.tmp $@

# Kueue (sigs.k8s.io/kueue), from test/tools/kueue, and its CRDs from the
# same module. Not part of tools: only the Kueue suite (lane 2's e2e-lane-2
# in make test) runs it, and a cold build takes minutes.
KUEUE_VERSION := v0.17.0
kueue: $(BIN)/kueue-controller $(LAB_DIR)/kueue-crds.yaml ## build Kueue's controller and CRDs for the Kueue suite (TestKueue*)
$(BIN)/kueue-controller: test/tools/kueue/go.mod test/tools/kueue/go.sum
	cd test/tools/kueue && go build -o $@ sigs.k8s.io/kueue/cmd/kueue
$(LAB_DIR)/kueue-crds.yaml:
	@mkdir -p $(LAB_DIR)
	@# From test/tools/kueue, whose go.sum has Kueue's: lane 2 of make test
	@# runs this in a network namespace, where the root module could not
	@# check Kueue's sum (CI failed so; GOPROXY=off there).
	v=$$(cd test/tools/kueue && go list -m -f '{{.Version}} {{.Dir}}' sigs.k8s.io/kueue) && \
	dir=$${v#$(KUEUE_VERSION) } && [ "$$dir" != "$$v" ] || { echo "kueue: test/tools/kueue has $$v, want $(KUEUE_VERSION)" >&2; exit 1; }; \
	cat $$dir/config/components/crd/bases/*.yaml > $@.tmp && chmod 644 $@.tmp && mv $@.tmp $@

$(BIN)/lab: $(shell find test/lab -name '*.go' -not -name '*_test.go') $(wildcard test/lab/*.manifest) go.mod
	go build -o $@ ./test/lab/cmd/lab

generate: $(BIN)/controller-gen ## regenerate everything generated (slurmrestd client, NodeSet CRD and deepcopy, the scheduler args' deepcopy, defaults and conversion, docs/troubleshooting.md)
	go tool oapi-codegen -config openapi/oapi-codegen-v0.0.42.yaml openapi/slurm-v0.0.42.json
	go tool oapi-codegen -config openapi/oapi-codegen-v0.0.44.yaml openapi/slurm-v0.0.44.json
	$(BIN)/controller-gen object paths=./nodeset/api/... paths=./tenancy/api/... \
	  crd:generateEmbeddedObjectMeta=true paths=./nodeset/api/... paths=./tenancy/api/... output:crd:artifacts:config=config/crd/bases
	cp config/crd/bases/*.yaml charts/onepool/crds/
	$(BIN)/controller-gen object paths=./scheduler/apis/...
	go tool defaulter-gen --output-file zz_generated.defaults.go ./scheduler/apis/config/v1
	go tool conversion-gen --output-file zz_generated.conversion.go ./scheduler/apis/config/v1
	go run ./keys/cmd/gen-troubleshooting

$(BIN)/controller-gen: test/tools/controller-gen/go.mod test/tools/controller-gen/go.sum
	cd test/tools/controller-gen && go build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

# The REST API each release's spec is taken from: v0.0.42 from 24.11, v0.0.44 from 26.05.
REST_API = $(if $(filter 26.05,$(SLURM)),v0.0.44,v0.0.42)
openapi-spec: ## refresh openapi/ from the lab's slurmrestd: v0.0.42 (SLURM=24.11) or v0.0.44 (SLURM=26.05)
	$(BIN)/lab up --slurm-only
	$(BIN)/lab slurm-exec -- slurmrestd -s openapi/slurmctld,openapi/slurmdbd -d $(REST_API) --generate-openapi-spec > openapi/slurm-$(REST_API).json

vet: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...

# golangci-lint from its own tool module (its dependencies stay out of
# go.mod); the linters are .golangci.yml's.
$(BIN)/golangci-lint: test/tools/golangci-lint/go.mod test/tools/golangci-lint/go.sum
	cd test/tools/golangci-lint && go build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

lint: $(BIN)/golangci-lint ## golangci-lint with .golangci.yml's linters (errcheck, govet, ineffassign, staticcheck, unused, misspell)
	$(BIN)/golangci-lint run ./...

# envtest suites (the GPU webhook behind a real kube-apiserver) use the lab's
# kube-apiserver, etcd and helm: built, not started.
unit: $(BIN)/kube-apiserver $(BIN)/etcd $(BIN)/helm $(BIN)/promtool ## unit tests (replayed slurmrestd responses, envtest with the lab's apiserver, no lab; the SPANK plugin's argument parser; the chart's alerts)
	KUBEBUILDER_ASSETS=$(abspath $(BIN)) go test -count=1 -cover $(UNIT_PKGS)
	$(MAKE) -C spank test
	$(MAKE) --no-print-directory rules

# The chart's alerts (charts/onepool/files/onepool-rules.yaml) checked and
# unit-tested by promtool: each fires on trouble and stays quiet otherwise.
rules: $(BIN)/promtool ## check and unit-test the chart's Prometheus alerts with promtool
	$(BIN)/promtool check rules charts/onepool/files/onepool-rules.yaml
	$(BIN)/promtool test rules test/rules/onepool-rules_test.yaml

# promtool from Debian's prometheus package (the package's other files,
# the server among them, are not installed).
$(BIN)/promtool:
	rm -rf $(LAB_DIR)/promtool.tmp && mkdir -p $(LAB_DIR)/promtool.tmp $(BIN)
	cd $(LAB_DIR)/promtool.tmp && { apt-get download prometheus 2>/dev/null || { apt-get update -qq && apt-get download prometheus; }; }
	dpkg-deb -x $(LAB_DIR)/promtool.tmp/prometheus_*.deb $(LAB_DIR)/promtool.tmp/root
	mv $(LAB_DIR)/promtool.tmp/root/usr/bin/promtool $@ && rm -rf $(LAB_DIR)/promtool.tmp
	$@ --version 2>&1 | sed -n 1p

# The SPANK plugin needs <slurm/spank.h> from the lab rootfs (libslurm-dev):
# built again each time, against the headers of the release the lab runs.
spank: ## build the SPANK jail plugin (spank/onepool_jail.so) against the lab's Slurm headers
	$(MAKE) -B -C spank SLURM_INCLUDE=$(ROOTFS)/usr/include

# The lab's own build of the plugin, in the lab's directory (what the e2e
# suites install): two labs of two releases may run at once.
lab-spank:
	$(MAKE) -B -C spank SLURM_INCLUDE=$(ROOTFS)/usr/include OUT=$(LAB_DIR)/onepool_jail.so

fuzz: ## the decoders' fuzz targets, briefly
	go test -run '^$$' -fuzz FuzzDecodeNodes -fuzztime $(FUZZTIME) ./slurmrest/internal/rest/
	go test -run '^$$' -fuzz FuzzDecodeJobs -fuzztime $(FUZZTIME) ./slurmrest/internal/rest/

# An e2e run (test/e2e-run.sh): verbose into $(LAB_DIR)/<name>.log;
# printed, each test's result and time, and on a failure what the failing
# tests said; their names in $(LAB_DIR)/<name>.failed for make test's
# STAGE line. A failed test is never run again here (E2E_RERUN, by hand).
# $(call e2e_run,NAME,GO TEST ARGUMENTS)
e2e_run = test/e2e-run.sh $(1) $(LAB_DIR) $(2)

# E2E_RUN / E2E_SKIP pick tests (go test -run / -skip); E2E_LOG names the
# log ($(LAB_DIR)/<E2E_LOG>.log). make test picks its parts of the suite
# this way (CHART_COVERED, E2E_PROCESS_ONLY, KUEUE_E2E).
E2E_RUN ?=
E2E_SKIP ?=
E2E_LOG ?= e2e
e2e: tools ## e2e tests on the real lab (brings it up or reuses it; E2E_RUN / E2E_SKIP pick tests)
	$(BIN)/lab up
	$(MAKE) lab-spank
	$(call e2e_run,$(E2E_LOG),-timeout 30m -run '$(E2E_RUN)' -skip '$(E2E_SKIP)' ./test/e2e/...)

# The chart installed for real: onepool's images in the real node's containerd,
# helm install, the components as pods (see test/lab/realnode/README.md). First the install
# tests (they install, upgrade and uninstall it themselves), then the syncer,
# scheduler and NodeSet suites against the chart's pods (ONEPOOL_LAB_COMPONENTS=chart),
# then the lab back to its processes.
NODE_E2E := TestHostAgentOnTheRealNode|TestSlurmChartKeysSurviveGitOpsRenders|TestChartInstall|TestChartUnreachable|TestController.*ImageRunsOnRealNode|TestSlurmChartOnTheRealNode|TestSlurmChartWithOnepool|TestSlurmChartFailingProlog
CHART_E2E := TestSyncer|TestScheduler|TestNodeSet|TestComponentsRun|TestMetricsOnTheChart
e2e-node: tools node-tools images ## e2e of the chart installed with helm on the lab's real kubelet node, and the suites against it
	ONEPOOL_LAB_REAL_KUBELET=1 $(BIN)/lab up
	ONEPOOL_LAB_REAL_KUBELET=1 ONEPOOL_E2E=1 go test -count=1 -timeout 20m -p 1 -run '$(NODE_E2E)' -v ./test/e2e/ ./test/e2e/realnode/ 2>&1 | tee $(LAB_DIR)/e2e-node.log | grep -E '^(=== RUN|--- |\s+--- |PASS|FAIL|ok|panic)|_test.go' ; exit $${PIPESTATUS[0]}
	ONEPOOL_LAB_REAL_KUBELET=1 ONEPOOL_LAB_COMPONENTS=chart $(BIN)/lab up
	ONEPOOL_LAB_REAL_KUBELET=1 ONEPOOL_LAB_COMPONENTS=chart ONEPOOL_E2E=1 $(call e2e_run,e2e-chart,-timeout 30m -run '$(CHART_E2E)' ./test/e2e/)
	ONEPOOL_LAB_REAL_KUBELET=1 $(BIN)/lab up

# The e2e suite again on the other supported release, Slurm 26.05 (Debian
# sid, REST v0.0.44): the lab is stopped and comes up on 26.05 (each release
# keeps a rootfs and state of its own), then is stopped again.
e2e-26.05: tools ## the e2e suite on Slurm 26.05 (lab down, up on 26.05, suite, down; E2E_SKIP skips tests)
	$(BIN)/lab down
	ONEPOOL_LAB_SLURM=26.05 $(BIN)/lab up
	$(MAKE) lab-spank SLURM=26.05
	ONEPOOL_LAB_SLURM=26.05 $(call e2e_run,e2e-26.05,-timeout 30m -skip '$(E2E_SKIP)' ./test/e2e/...)
	$(BIN)/lab down

# The fault soak (test/e2e/soak*_test.go): random operations on both sides
# while the lab's daemons are SIGKILLed and restarted, slurmrestd is made
# sick behind a proxy and the token rotated; invariants checked all along.
# SOAK_SEED repeats a run; make test runs a short one (SOAK_MINUTES=3).
# (Recipes run under bash -e: a failing command must be caught, as with
# `&& rc=0 || rc=$$?`, or the lines that report it never run.)
SOAK_MINUTES ?= 10
SOAK_SEED ?=
soak: tools ## the fault soak on the lab (SOAK_MINUTES, default 10; SOAK_SEED repeats a run); BENCH soak_* lines
	$(BIN)/lab up
	ONEPOOL_E2E=1 SOAK_MINUTES=$(SOAK_MINUTES) SOAK_SEED=$(SOAK_SEED) go test -count=1 -timeout $$(( $(SOAK_MINUTES) + 20 ))m -p 1 -run '^TestSoak$$' -v ./test/e2e/ > $(LAB_DIR)/soak.log 2>&1 && rc=0 || rc=$$?; \
	  grep -E '^BENCH|soak violation|^--- |^(ok|FAIL)' $(LAB_DIR)/soak.log || true; [ $$rc -eq 0 ] || { echo "soak failed (rc $$rc): the whole log is $(LAB_DIR)/soak.log"; \
	  { grep -m1 -oE 'soak violation.{0,100}' $(LAB_DIR)/soak.log || echo "no violation: rc $$rc"; } > $(LAB_DIR)/soak.failed; grep -A3 'soak violation' $(LAB_DIR)/soak.log | tail -60; tail -30 $(LAB_DIR)/soak.log; exit 1; }

# make test's soak has a fixed seed (a failure there repeats with it); make
# soak draws a new one each run unless SOAK_SEED is given.
soak-short: ## the short soak make test runs (3 minutes, seed 1 unless SOAK_SEED)
	$(MAKE) soak SOAK_MINUTES=3 SOAK_SEED=$(or $(SOAK_SEED),1)

# The second lab runs beside the first in a directory of its own (the tools
# hard-linked from $(BIN), its own rootfs and state) and its own network
# namespace (both labs use the same ports): the 26.05 suites, then the 24.11
# short soak and the tests that need 24.11's processes. Its rootfs (both
# releases) are built outside the namespace (apt needs the mirror). Inside,
# nothing is reached but loopback and one more address (slurmdbd needs an
# address besides loopback: getaddrinfo with AI_ADDRCONFIG). A lab that
# changes release keeps its Kubernetes state (etcd): lab.StartClean clears
# what the stage before left (onepool's drain records on the Nodes).
LAB_2605_DIR ?= $(LAB_DIR)-26.05
LAB_2605_NETNS ?= onepool-lab-26.05
lab-26.05-beside: tools ## prepare the second lab make test runs the 26.05 suites in, beside the first (LAB_2605_DIR, LAB_2605_NETNS); its API server 1.36: make lab-26.05-kube
	mkdir -p $(LAB_2605_DIR)/bin
	for f in $(BIN)/*; do ln -f "$$f" $(LAB_2605_DIR)/bin/; done
	cp -p $(LAB_DIR)/kwok-stages.yaml $(LAB_DIR)/podgroup-crd.yaml $(LAB_DIR)/lws-crd.yaml $(LAB_DIR)/jobset-crd.yaml $(LAB_2605_DIR)/
	ONEPOOL_LAB_DIR=$(LAB_2605_DIR) ONEPOOL_LAB_SLURM=26.05 $(BIN)/lab rootfs
	ONEPOOL_LAB_DIR=$(LAB_2605_DIR) ONEPOOL_LAB_SLURM=24.11 $(BIN)/lab rootfs
	ip netns list | grep -qw $(LAB_2605_NETNS) || ip netns add $(LAB_2605_NETNS)
	ip -n $(LAB_2605_NETNS) link set lo up
	ip -n $(LAB_2605_NETNS) addr replace 10.99.0.1/32 dev lo

lab-26.05-kube: $(BIN)/kube-apiserver-1.36 ## the second lab's API server, Kubernetes 1.36, built and linked into LAB_2605_DIR
	mkdir -p $(LAB_2605_DIR)/bin
	ln -f $(BIN)/kube-apiserver-1.36 $(LAB_2605_DIR)/bin/

# make test. Each stage is timed (a line `STAGE <name> <seconds> s`; make
# ci-fresh collects them), and each lab stage starts from a clean lab
# (lab.StartClean). `tools` is compiled first; then three lanes overlap:
#   lane 1 (first lab, Slurm 24.11, Kubernetes 1.35): e2e, images, e2e-node;
#       the real node's binaries (node-tools) compile meanwhile
#   lane 2 (second lab): lab-26.05-beside, then on Slurm 24.11 and
#       Kubernetes 1.35 soak-short and e2e-process while the API server 1.36
#       compiles (kube-1.36, niced), then on Slurm 26.05 and Kubernetes 1.36
#       e2e-26.05, soak-short-26.05 and the Kueue suite (kueue-26.05; Kueue's
#       controller compiles, niced, from the start)
#   lane 3 (CPU, niced: the suites mostly wait, and must not be starved):
#       vet, lint, unit, fuzz
# Each suite runs where it adds something. The 24.11 processes skip what
# the chart's pods run again on 24.11 in e2e-node (CHART_E2E) and 26.05's
# processes run too, except the tests that need the lab's processes
# (E2E_PROCESS_ONLY, run on their own: e2e-process). The Kueue suite runs
# on 26.05 only: it tests Kueue against onepool's Kubernetes side.
# (Until stop 62 the lanes were two and every 24.11 scheduler, syncer and
# NodeSet test ran twice on 24.11: CI took 2,850 s, over its budget. A make
# ci-fresh of three lanes with the soak and e2e-process in lane 1 took
# 2,320 s, lane 1 ~770 s longer than lane 2: they moved. On a cold machine
# lane 2 was the longest: 943 s of lab-26.05-beside went into compiling the
# 1.36 API server before any suite ran; it compiles beside the 24.11 stages now.)
# The lanes' logs follow lane 1's output.
CHART_COVERED := ^($(CHART_E2E))
E2E_PROCESS_ONLY := ^(TestSchedulerFollowsItsJobsWithoutListingSlurms|TestSchedulerStandbyTakesOverMidBurst)
KUEUE_E2E := ^TestKueue
test: ## everything CI runs: vet, unit, fuzz, the suites and a 3-minute fault soak on Slurm 24.11 and 26.05, in three lanes; a timed line per stage
	@stage() { local s=$$1 start=$$(date +%s); shift; \
	  said() { find $$sdir -maxdepth 1 -name "*.$$1" -newermt @$$start -exec cat {} + 2>/dev/null | tr '\n' ' '; }; \
	  if "$$@"; then flaky=$$(said flaky); echo "STAGE $$s $$(( $$(date +%s) - start )) s$${flaky:+ ($$flaky)}"; return 0; fi; \
	  failed=$$(said failed); echo "STAGE $$s FAILED after $$(( $$(date +%s) - start )) s$${failed:+: $$failed}"; return 1; }; \
	sdir=$(LAB_DIR); stage tools $(MAKE) --no-print-directory tools || exit 1; \
	go mod download; (cd test/tools/kueue && go mod download); \
	log2=$(LAB_DIR)/lane-2.log; log3=$(LAB_DIR)/lane-3.log; ntlog=$(LAB_DIR)/node-tools.log; \
	in2kube() { k=$$1; shift; nsenter --net=/var/run/netns/$(LAB_2605_NETNS) env GOPROXY=off $(MAKE) --no-print-directory "$$@" LAB_DIR=$(LAB_2605_DIR) KUBE=$$k; }; \
	in2() { in2kube 1.36 "$$@"; }; \
	( sdir=$(LAB_2605_DIR); mkdir -p $(LAB_2605_DIR)/bin; \
	  ( stage kueue nice -n 10 $(MAKE) --no-print-directory kueue LAB_DIR=$(LAB_2605_DIR) ) & kq=$$!; \
	  stage lab-26.05-beside $(MAKE) --no-print-directory lab-26.05-beside && \
	  { ( stage kube-1.36 nice -n 10 $(MAKE) --no-print-directory lab-26.05-kube ) & k36=$$!; } && \
	  stage soak-short in2kube 1.35 soak-short && \
	  stage e2e-process in2kube 1.35 e2e E2E_RUN='$(E2E_PROCESS_ONLY)' E2E_LOG=e2e-process && \
	  in2kube 1.35 down && wait $$k36 && k36= && \
	  stage e2e-26.05 in2 e2e-26.05 SLURM=26.05 E2E_SKIP='$(KUEUE_E2E)' && \
	  stage soak-short-26.05 in2 soak-short SLURM=26.05 && \
	  wait $$kq && kq= && stage kueue-26.05 in2 e2e SLURM=26.05 E2E_RUN='$(KUEUE_E2E)' E2E_LOG=e2e-kueue-26.05; \
	  rc2=$$?; [ -z "$$kq" ] || wait $$kq || true; [ -z "$${k36:-}" ] || wait $$k36 || true; exit $$rc2 ) > $$log2 2>&1 & l2=$$!; \
	( sdir=$(LAB_DIR)/lane-3; mkdir -p $$sdir; stage vet nice -n 10 $(MAKE) --no-print-directory vet && \
	  stage lint nice -n 10 $(MAKE) --no-print-directory lint && \
	  stage unit nice -n 10 $(MAKE) --no-print-directory unit && \
	  stage fuzz nice -n 10 $(MAKE) --no-print-directory fuzz ) > $$log3 2>&1 & l3=$$!; \
	$(MAKE) --no-print-directory node-tools > $$ntlog 2>&1 & nt=$$!; \
	rc=0; for s in e2e images e2e-node; do \
	  case $$s in \
	    e2e) set -- e2e E2E_SKIP='$(CHART_COVERED)|$(KUEUE_E2E)';; \
	    e2e-node) wait $$nt || { echo "node-tools failed ($$ntlog):"; tail -30 $$ntlog; rc=1; break; }; set -- e2e-node;; \
	    *) set -- $$s;; esac; \
	  stage $$s $(MAKE) --no-print-directory "$$@" || { rc=1; break; }; done; \
	wait $$nt 2>/dev/null || true; \
	rc3=0; wait $$l3 || rc3=$$?; \
	echo "--- lane 3: vet, lint, unit, fuzz, beside the lanes ($$log3):"; cat $$log3; \
	rc2=0; wait $$l2 || rc2=$$?; \
	echo "--- lane 2: the second lab: the 24.11 soak and e2e-process, the suites on Slurm 26.05 and Kueue's ($$log2):"; cat $$log2; \
	[ $$rc = 0 ] && [ $$rc2 = 0 ] && [ $$rc3 = 0 ]

bench: bench-slurmrest bench-syncer bench-scheduler bench-nodeset bench-spank bench-gpu bench-placeholders bench-workloads bench-install bench-slurm-chart ## every benchmark; BENCH lines

bench-slurmrest: tools ## slurmrest cache at 1,000 Slurm nodes and 200 jobs; scontrol reconfigure to answer with every node
	ONEPOOL_LAB_EXTRA_NODES=1000 $(BIN)/lab up
	ONEPOOL_BENCH=1 ONEPOOL_LAB_EXTRA_NODES=1000 go test -count=1 -timeout 20m -run '^TestBench(Slurmrest|Reconfigure)$$' -v ./test/bench/ | tee $(LAB_DIR)/bench-slurmrest.log | grep '^BENCH' || (tail -40 $(LAB_DIR)/bench-slurmrest.log; exit 1)

bench-syncer: tools ## syncer over 1,000 kwok Nodes, 1,000 Slurm nodes and 1,000 slurmd pods
	ONEPOOL_LAB_EXTRA_NODES=1000 $(BIN)/lab up
	ONEPOOL_BENCH=1 ONEPOOL_LAB_EXTRA_NODES=1000 go test -count=1 -timeout 20m -run '^TestBenchSyncer$$' -v ./test/bench/ | tee $(LAB_DIR)/bench-syncer.log | grep '^BENCH' || (tail -40 $(LAB_DIR)/bench-syncer.log; exit 1)

# Issue 38's scale: SCALE_NODES Slurm nodes (CLOUD, no slurmd; a kwok Node
# each) and SCALE_JOBS held jobs of another user (MaxJobCount raised to fit).
SCALE_NODES ?= 10000
SCALE_JOBS ?= 50000
SCALE_NODESET ?= 2000
# The scale test runs before the NodeSet's: the controller manager follows
# the nodes it read for 15 minutes, and the idle window is to measure the
# lab's own slurmd pods, not 2,000 NodeSet members just gone.
SCALE_ENV = ONEPOOL_LAB_EXTRA_NODES=$(SCALE_NODES) ONEPOOL_LAB_MAX_JOBS=$$(( $(SCALE_JOBS) + 10000 ))
bench-scale: tools ## at SCALE_NODES (10,000) Slurm and kwok nodes and SCALE_JOBS (50,000) other users' held jobs: idle slurmrestd bytes/min per component, RSS and heap, one listing of each kind, pod to bound, cordon to drain, drain to annotation; a NodeSet of SCALE_NODESET (2,000)
	$(SCALE_ENV) $(BIN)/lab up
	ONEPOOL_BENCH=1 $(SCALE_ENV) ONEPOOL_BENCH_FOREIGN_JOBS=$(SCALE_JOBS) go test -count=1 -timeout 90m -run '^TestBenchScale$$' -v ./test/bench/ | tee $(LAB_DIR)/bench-scale.log | grep '^BENCH' || (tail -40 $(LAB_DIR)/bench-scale.log; exit 1)
	ONEPOOL_BENCH=1 $(SCALE_ENV) ONEPOOL_BENCH_NODESET_NODES=$(SCALE_NODESET) go test -count=1 -timeout 60m -run '^TestBenchNodeSet$$' -v ./test/bench/ | tee -a $(LAB_DIR)/bench-scale.log | grep '^BENCH' || (tail -40 $(LAB_DIR)/bench-scale.log; exit 1)

bench-scheduler: tools ## onepool's scheduler on 32 real slurmd: pod to bound, burst, scancel to evicted
	ONEPOOL_LAB_NODES=32 $(BIN)/lab up
	ONEPOOL_BENCH=1 ONEPOOL_LAB_NODES=32 go test -count=1 -timeout 20m -run '^TestBenchScheduler$$' -v ./test/bench/ | tee $(LAB_DIR)/bench-scheduler.log | grep '^BENCH' || (tail -40 $(LAB_DIR)/bench-scheduler.log; exit 1)

bench-placeholders: tools ## Slurm 26.05 only (SLURM=26.05): a placeholder as a batch job against an external job: submit to running, scancel to the next job running
	$(BIN)/lab up
	ONEPOOL_BENCH=1 go test -count=1 -timeout 20m -run '^TestBenchPlaceholderKinds$$' -v ./test/bench/ | tee $(LAB_DIR)/bench-placeholders.log | grep -E '^BENCH|SKIP|skip' || (tail -40 $(LAB_DIR)/bench-placeholders.log; exit 1)

bench-workloads: tools ## an inference Deployment through Slurm (kube-controller-manager makes the pods): scale 0 to 32 Ready, scale down to GPUs free, preempted replicas back after the training job; a LeaderWorkerSet group over every node to all Ready
	$(BIN)/lab up
	ONEPOOL_BENCH=1 go test -count=1 -timeout 20m -run '^TestBench(Workloads|LeaderWorkerSet)$$' -v ./test/bench/ | tee $(LAB_DIR)/bench-workloads.log | grep '^BENCH' || (tail -40 $(LAB_DIR)/bench-workloads.log; exit 1)

bench-nodeset: tools ## NodeSet over 500 kwok GPU Nodes: time to 500 Ready slurmd pods, reconcile p99
	$(BIN)/lab up
	ONEPOOL_BENCH=1 go test -count=1 -timeout 20m -run '^TestBenchNodeSet$$' -v ./test/bench/ | tee $(LAB_DIR)/bench-nodeset.log | grep '^BENCH' || (tail -40 $(LAB_DIR)/bench-nodeset.log; exit 1)

bench-install: tools node-tools images ## helm install to first pod bound, scheduler failover, idle memory (real node, 1,000 kwok Nodes)
	ONEPOOL_LAB_REAL_KUBELET=1 ONEPOOL_LAB_EXTRA_NODES=1000 $(BIN)/lab up
	ONEPOOL_BENCH=1 ONEPOOL_LAB_REAL_KUBELET=1 ONEPOOL_LAB_EXTRA_NODES=1000 go test -count=1 -timeout 20m -run '^TestBenchInstall$$' -v ./test/bench/ | tee $(LAB_DIR)/bench-install.log | grep '^BENCH' || (tail -40 $(LAB_DIR)/bench-install.log; exit 1)

bench-slurm-chart: tools node-tools images ## charts/slurm on the real node: helm install to every NodeSet node idle, slurmctld pod deleted to ready with its queue
	ONEPOOL_LAB_REAL_KUBELET=1 $(BIN)/lab up
	ONEPOOL_BENCH=1 ONEPOOL_LAB_REAL_KUBELET=1 go test -count=1 -timeout 20m -run '^TestBenchSlurmChart$$' -v ./test/bench/ | tee $(LAB_DIR)/bench-slurm-chart.log | grep '^BENCH' || (tail -40 $(LAB_DIR)/bench-slurm-chart.log; exit 1)

bench-gpu: tools ## GPU claims: placement with a claim minus without (one-GPU pods on 4 dynamic nodes with the agent's DRA driver), the agent's prepare p99; a MIG profile's pod to bound (the fake MIG node)
	$(BIN)/lab up
	ONEPOOL_BENCH=1 go test -count=1 -timeout 20m -run '^TestBench(GPU|MIG)$$' -v ./test/bench/ | tee $(LAB_DIR)/bench-gpu.log | grep '^BENCH' || (tail -40 $(LAB_DIR)/bench-gpu.log; exit 1)

bench-spank: tools ## `srun hostname` with the jail plugin minus without (median)
	$(BIN)/lab up
	$(MAKE) lab-spank
	ONEPOOL_BENCH=1 go test -count=1 -timeout 20m -run '^TestBenchSpank$$' -v ./test/bench/ | tee $(LAB_DIR)/bench-spank.log | grep '^BENCH' || (tail -40 $(LAB_DIR)/bench-spank.log; exit 1)
