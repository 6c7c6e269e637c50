# quicbed: one-command setup, tests and reproduction.
#   make test       install what is missing (apt, Docker engine, Python env, Ray, images), lint, then
#                   the unit tier and each capability once on the real path (<= 20 min of pytest)
#   make test-physics  the distribution physics, other backends, guests, long runs (<= 20 min)
#   make unit       lint and the unit tier (no root, Docker or namespaces, once the set-up is done)
#   make lint       ruff (check, and format as is: one layout), mypy and shellcheck (no root)
#   make lab        an interactive emulated topology (PROFILE=india)
#   make reproduce  run experiments/paper (quick; FULL=1 for all repetitions) and write the report
#   make images     build the container images (cached: a second run takes seconds)
#   make actionlint build the workflow linter make test runs (cached in $QUICBED_CACHE/bin)
#   make vm         fetch the QEMU router's kernel (Debian's) and build its initramfs
#   make clean      remove every namespace, link, container and UML or QEMU router the testbed made
SHELL := /bin/bash
include versions.env
export

ROOT     := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
VENV     := $(ROOT)/.venv
PY       := $(VENV)/bin/python
QUICBED  := $(VENV)/bin/quicbed
# Slow-to-build things (images saved as tarballs, content, compiled tools) live here.
export QUICBED_CACHE ?= /var/cache/quicbed
PROFILE  ?= india
PYTEST_ARGS ?=

# Every Debian package the host needs (bookworm and trixie alike). quicbed/doctor.py lists the
# commands the code runs and which package gives each; tests/base/test_doctor.py holds the two lists
# together, and a throwaway container proves that this step alone gives them all.
APT_PACKAGES := docker.io user-mode-linux qemu-system-x86 busybox-static apt kmod mount mininet iperf3 debootstrap iputils-ping ethtool \
	tcpdump iproute2 net-tools python3-minimal python3-venv python3-pip openssl ca-certificates curl iptables \
	procps docker-compose gcc libc6-dev make git
# Installed where the release has them: Debian 13 moved the docker command out of docker.io.
APT_PACKAGES_IF_AVAILABLE := docker-cli
# What `make lint` runs besides the venv's ruff and mypy; not a command of the testbed, so not
# in APT_PACKAGES (nor in the doctor's list).
LINT_APT_PACKAGES := shellcheck
# The stages that install as quicbed.<stage> (pyproject.toml's package-dir).
STAGES := topology servers clients experiments analysis workloads labs

.PHONY: test test-physics unit lint deps docker venv cluster images images-on-demand delayline vm content \
	lab clean bench reproduce doctor compose-prepare compose-up actionlint

# Both tiers on both cores (pytest-xdist, a file per worker): tests that judge a time or a rate
# run alone, the others two at a time (tests/tiers.yaml, tests/tiers_plugin.py).
# --durations: every test phase of 10 s or more, so a test that grows slow shows in every CI
# log, and a tier over its budget (20 min) shows where its time went.
PYTEST_TIER := $(VENV)/bin/pytest -v -rs --durations=0 --durations-min=10 -n 2 --dist loadfile
SETUP := deps docker venv cluster images images-on-demand delayline vm actionlint doctor

test: $(SETUP) lint
	$(PYTEST_TIER) -m "not physics" $(PYTEST_ARGS)

test-physics: $(SETUP)
	$(PYTEST_TIER) -m physics $(PYTEST_ARGS)

# The unit tier: pure logic, no root, Docker or namespaces; both cores (goal: 60 s with lint;
# the README has the figure measured).
unit: venv lint
	$(VENV)/bin/pytest -q -n 2 --durations=10 -m "not path and not docker" $(PYTEST_ARGS)

# No root: ruff (unused noqa markers included, RUF100); mypy on the stages as the quicbed.*
# modules they install as, linked into a temporary tree (mypy cannot follow the editable
# install's package-dir mapping); shellcheck on every tracked shell script (by its #! line).
lint:
	@test -x $(VENV)/bin/mypy || { echo "make lint: no $(VENV)/bin/mypy: make venv first"; exit 1; }
	$(VENV)/bin/ruff check quicbed $(STAGES) stacks tests bench
	$(VENV)/bin/ruff format --check quicbed $(STAGES) stacks tests bench
	@tree=$$(mktemp -d) && mkdir $$tree/quicbed && \
	for f in quicbed/*.py; do ln -s $(ROOT)/$$f $$tree/quicbed/; done && \
	for d in $(STAGES); do ln -s $(ROOT)/$$d $$tree/quicbed/$$d; done && \
	echo "mypy -p quicbed" && (cd $$tree && $(VENV)/bin/mypy --config-file $(ROOT)/pyproject.toml -p quicbed); \
	rc=$$?; rm -rf $$tree; exit $$rc
	@# The stacks' own Python programs run in their images, not as quicbed modules: checked as files.
	@files=$$(git -C $(ROOT) ls-files 'stacks/*.py') && echo "mypy" $$files && \
	  cd $(ROOT) && $(VENV)/bin/mypy --config-file pyproject.toml $$files
	@set -o pipefail; scripts=$$(git -C $(ROOT) ls-files -z | (cd $(ROOT) && xargs -0 awk \
	  'FNR == 1 && /^#!.*(bash|sh)$$/ { print FILENAME } { nextfile }')) && \
	test -n "$$scripts" || { echo "make lint: no shell scripts found (git ls-files)"; exit 1; }; \
	echo "shellcheck" $$scripts && cd $(ROOT) && shellcheck $$scripts

# No stamp: asking dpkg about every package takes a fraction of a second, and a stamp would
# hide a package removed since (the machine is checked, not remembered). Root only to install:
# on a set-up machine `make unit` and `make lint` pass through here as any user.
deps:
	@missing=$$(for p in $(APT_PACKAGES) $(LINT_APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  test "$$(id -u)" = 0 || { echo "make: run as root to install" $$missing; exit 1; }; \
	  echo "installing: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@for p in $(APT_PACKAGES_IF_AVAILABLE); do \
	  dpkg -s $$p >/dev/null 2>&1 || ! apt-cache show $$p >/dev/null 2>&1 || { echo "installing: $$p"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$p >/dev/null; }; done
	@test -d $(QUICBED_CACHE) || mkdir -p $(QUICBED_CACHE)

# Everything the testbed needs on this host, one line each; stops here with the fix on a gap.
doctor: venv
	@$(QUICBED) doctor

docker: deps
	@test "$$(id -u)" = 0 || { echo "make: run as root (namespaces, tc and Docker need it)"; exit 1; }
	@# quic-go asks for ~7 MB UDP buffers; containers inherit the host's maximum.
	@for k in net.core.rmem_max net.core.wmem_max; do \
	  [ "$$(sysctl -n $$k)" -ge 8388608 ] || sysctl -qw $$k=8388608; done
	@docker info >/dev/null 2>&1 || { \
	  echo "starting dockerd (log: /var/log/dockerd.log)"; \
	  (setsid dockerd >/var/log/dockerd.log 2>&1 &); \
	  for i in $$(seq 60); do docker info >/dev/null 2>&1 && exit 0; sleep 1; done; \
	  echo "dockerd did not start; see /var/log/dockerd.log"; tail -20 /var/log/dockerd.log; exit 1; }

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml versions.env | deps
	test -x $(PY) || /usr/bin/python3 -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q $(PY_DEPS)
	$(PY) -m pip install -q --no-deps -e .
	@touch $@

# The optional cluster extra (Ray, for `quicbed run --ray`): the tests run its cluster tests;
# `make reproduce` and a plain install do without it.
cluster: $(VENV)/.cluster
$(VENV)/.cluster: $(VENV)/.installed
	$(PY) -m pip install -q ray==$(RAY_VERSION)
	@touch $@

# build.sh asks the descriptors (python -m quicbed.servers list); `all` makes the Debian bases too.
images: docker venv
	@bash images/build.sh all

# The stacks compiled from source (on_demand in their descriptors: minutes each on 2 cores),
# which `make images` leaves to the run that needs one: the tests need them all, and a timed
# test must not pay for a compile in its set-up.
images-on-demand: images
	@bash images/build.sh on-demand

# The GitHub Actions linter for the workflows in docs/ (tests/base/test_workflows.py): built
# once from the Go module proxy into $(QUICBED_CACHE)/bin, with the host's Go or in a container.
actionlint: docker
	@bash images/build.sh actionlint

# The user-space netem stage for kernels without sch_netem (topology/delayline).
delayline: deps
	@$(MAKE) -s -C topology/delayline

# The QEMU router's guest (`vm` backend): Debian's kernel package (VM_KERNEL_* in versions.env),
# downloaded and unpacked into $(QUICBED_CACHE)/vm, and its initramfs (topology/backends/vmimage.py).
vm: deps venv
	@$(PY) -c 'from quicbed.topology.backends.vmimage import main; main()'

content: venv
	$(PY) -m quicbed.servers.content

compose-prepare: venv
	$(PY) -m quicbed.servers.prepare_compose

compose-up: compose-prepare images
	docker-compose --env-file versions.env up -d

lab: deps docker venv images delayline vm doctor
	$(QUICBED) lab $(PROFILE)

# Quick by default (about 12½ minutes on 2 cores); FULL=1 runs the paper's repetitions.
reproduce: deps docker venv images delayline vm doctor
	$(QUICBED) reproduce $(if $(FULL),--full,)

bench: deps docker venv images
	$(PY) bench/link_bench.py

clean:
	@if [ -x $(QUICBED) ]; then $(QUICBED) clean; fi
