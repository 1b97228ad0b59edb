# podgahp: `make test` runs every test, `make demo` runs a local CE on the simulated cluster.
# Both set up everything they need on a fresh Debian machine (run as root for the HTCondor roots).

PYTHON ?= python3
VENV ?= .venv
# The oldest platform podgahp supports: EL9's Python 3.9 (when pyenv has one) with the oldest
# kubernetes client (Debian trixie ships it). Every non-live test runs there too.
OLDEST_K8S_CLIENT ?= 30.1.0
OLDEST_PYTHON ?= $(or $(firstword $(wildcard $(or $(PYENV_ROOT),$(HOME)/.pyenv)/versions/3.9*/bin/python)),$(PYTHON))
VENV_OLDEST ?= .venv-oldest
PYTEST_ARGS ?=
# Tests run in pytest-xdist workers. The non-live suite: its files spread over UNIT_WORKERS
# (--dist loadfile: the tests of a file run in one worker, in order). The live tests, which mostly
# wait on daemons, over LIVE_WORKERS, each test in whichever worker is free, both HTCondor series side
# by side; the tests of a module sharing pools started by a module-scoped fixture run in one worker,
# in order, once per series, and so do the tests on the real control plane, which each worker running
# one starts (--dist loadscope and the scheduler of tests/conftest.py).
# PYTEST_ARGS=-n0 runs everything in one process. The slowest tests are listed at the end.
UNIT_WORKERS ?= 4
LIVE_WORKERS ?= 6
UNIT_PYTEST = -m 'not live' -n $(UNIT_WORKERS) --dist loadfile --durations=10
LIVE_PYTEST = -m live -n $(LIVE_WORKERS) --dist loadscope --durations=20

.PHONY: test check docs unit oldest live demo system-deps clean rpm bench stress-unit k8s-control-plane

test: check k8s-control-plane unit oldest live

# The product (.) and the simulators, a distribution of their own (sim/), both editable.
$(VENV)/.installed: setup.cfg pyproject.toml sim/setup.cfg sim/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip setuptools wheel
	$(VENV)/bin/pip install -q -e '.[test,docs]' -e ./sim
	touch $@

$(VENV_OLDEST)/.installed: setup.cfg pyproject.toml sim/setup.cfg sim/pyproject.toml
	$(OLDEST_PYTHON) -m venv $(VENV_OLDEST)
	$(VENV_OLDEST)/bin/pip install -q --upgrade pip setuptools wheel
	$(VENV_OLDEST)/bin/pip install -q -e '.[test]' -e ./sim 'kubernetes==$(OLDEST_K8S_CLIENT)'
	touch $@

# mmdebstrap builds the Debian root filesystems that provide the HTCondor daemons (harness/rootfs.py).
# rpm (rpmbuild) builds and inspects the RPM in tests/packaging, rpmlint checks it (python3-packaging:
# rpm's Python dependency generator runs on /usr/bin/python3); man shows the man pages it ships.
# kubectl drives the simulated cluster in tests/sim/test_kubectl.py: the machine's own when it has
# one, else Debian's kubernetes-client.
# runc runs the containers of the simulated cluster's real runtime (sim/podgahp_sim/k8s/runc.py).
# golang-go and dpkg-dev build the real Kubernetes control plane from Debian's sources (k8s-control-plane).
system-deps:
	@command -v mmdebstrap >/dev/null && command -v rpmbuild >/dev/null && command -v cpio >/dev/null && \
		command -v runc >/dev/null && command -v rpmlint >/dev/null && command -v man >/dev/null && \
		/usr/bin/python3 -c 'import packaging' 2>/dev/null || \
		{ apt-get update -q && apt-get install -y -q mmdebstrap rpm cpio runc rpmlint python3-packaging man-db; }
	@command -v kubectl >/dev/null || { apt-get update -q && apt-get install -y -q kubernetes-client; }
	@command -v go >/dev/null && command -v dpkg-source >/dev/null || \
		{ apt-get update -q && apt-get install -y -q golang-go dpkg-dev; }

# The real Kubernetes control plane the tests and `podgahp sim k8s --control-plane` run (harness/controlplane.py):
# kube-apiserver, kube-controller-manager and kube-scheduler built with Debian's Go from Debian bookworm's
# `kubernetes` source package, etcd from Debian's etcd-server, in /var/cache/podgahp/k8s/<version>/bin.
# Built once per machine (6 to 8 minutes on 2 cores, 1.4 GB of memory); a failed build fails the run.
k8s-control-plane: system-deps
	$(PYTHON) -m harness control-plane

# check: the import-layer contracts, mypy --strict, the limits on a function's length and complexity
# (tests/unit/test_function_size.py, radon), and the documentation site built with every warning an
# error (mkdocs.yml: a broken link or anchor, a page the navigation leaves out).
check: $(VENV)/.installed
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/unit/test_function_size.py
	$(VENV)/bin/mkdocs build --strict --quiet

# The documentation site (docs/, mkdocs.yml), served on the loopback while its pages are edited.
docs: $(VENV)/.installed
	$(VENV)/bin/mkdocs serve --strict --dev-addr 127.0.0.1:8000

unit: $(VENV)/.installed system-deps k8s-control-plane
	$(VENV)/bin/python -m pytest $(UNIT_PYTEST) $(PYTEST_ARGS)

oldest: $(VENV_OLDEST)/.installed system-deps k8s-control-plane
	$(VENV_OLDEST)/bin/python --version
	$(VENV_OLDEST)/bin/python -m pytest $(UNIT_PYTEST) $(PYTEST_ARGS)

# The non-live suite STRESS_RUNS times in a row while every core is kept busy (stress-ng --cpu when
# installed, else busy processes): a test that passes only when it gets the CPU at the right moment
# fails here. Every run is made; the target fails when one did.
STRESS_RUNS ?= 3
stress-unit: $(VENV)/.installed system-deps k8s-control-plane
	$(VENV)/bin/python tests/contention.py --runs $(STRESS_RUNS) -- \
		$(VENV)/bin/python -m pytest -m 'not live' -p no:cacheprovider $(PYTEST_ARGS)

live: $(VENV)/.installed system-deps k8s-control-plane
	$(VENV)/bin/python -m pytest $(LIVE_PYTEST) $(PYTEST_ARGS)

# DEMO_ARGS=--control-plane: the story on the real control plane, built first (once per machine);
# --control-plane=DIR runs the binaries in DIR, and builds nothing.
demo: $(VENV)/.installed system-deps $(if $(filter --control-plane,$(DEMO_ARGS)),k8s-control-plane)
	$(VENV)/bin/python -m demo $(DEMO_ARGS)

# The RPMs (podgahp, -ce, -k8s, -lancium, -standalone, -sim) from the checkout's tracked files, in
# dist/, for EL9's Python (RPM_PYTHON_VERSION), the unit tests run by %check, then rpmlint.
RPM_PYTHON_VERSION ?= 3.9
rpm: $(VENV)/.installed system-deps
	rm -rf dist/rpmbuild && mkdir -p dist/rpmbuild/SOURCES
	git ls-files --cached --others --exclude-standard | \
		tar -czf dist/rpmbuild/SOURCES/podgahp-$$($(VENV)/bin/python -c 'import gahp; print(gahp.__version__)').tar.gz \
		--transform "s|^|podgahp-$$($(VENV)/bin/python -c 'import gahp; print(gahp.__version__)')/|S" -T -
	cp rpm/podgahp.rpmlintrc dist/rpmbuild/SOURCES/
	rpmbuild -ba rpm/podgahp.spec --define "_topdir $(CURDIR)/dist/rpmbuild" \
		--define "build_python $(CURDIR)/$(VENV)/bin/python" --define "python3_version $(RPM_PYTHON_VERSION)"
	ls dist/rpmbuild/RPMS/noarch/
	rpmlint -r rpm/podgahp.rpmlintrc dist/rpmbuild/RPMS/noarch/*.rpm dist/rpmbuild/SRPMS/*.rpm rpm/podgahp.spec

clean:
	rm -rf $(VENV) $(VENV_OLDEST) build dist *.egg-info

# Speed figures (not a test), each script printing a Markdown table (docs/benchmarks.md) with the load
# average: every figure the median of --repeat runs (3) taking turns with its baseline measured in the
# same run (the zero-cost memory backend, or HTCondor's blahp scripts), the simulated cluster in a
# process of its own. The GAHP's submits and statuses; a new GAHP facing 20,000 and 50,000 running
# pilots; the CE as a whole (1,000 pilots through real HTCondor daemons with the shipped CE
# configuration, and with one knob changed); each of the three also against the real control plane
# (once: 1,000 tracked pods, 1,000 pilots through the CE; about 4 and 11 minutes at load 5 to 12;
# 10,000 tracked pods, --pods 10000, did not finish in 20 minutes here: the simulated node's pace); Lancium under random API faults; podgahp provision's
# decisions against the PRP provisioner's and COBalD's in a model world; a user job's wait for a new
# pilot pod, hop by hop, with real pilots (runc); what podgahp reap's job-ad writes cost the schedd
# (1,000 grid jobs in a real schedd: transactions and seconds per pass); last, the blahp's kubernetes_*.sh scripts (trixie
# root, kubectl) and podgahp on the same pilots (its 50 kubectl at once load the machine for a minute
# after: the others do not start in its wake). About 24 minutes on the 2-core machine.
bench: $(VENV)/.installed system-deps k8s-control-plane
	$(VENV)/bin/python benchmarks/k8s_gahp.py --pilots 1000 5000 --rounds 3
	$(VENV)/bin/python benchmarks/k8s_gahp.py --engine real --pilots 1000 5000 --rounds 3 --repeat 1
	$(VENV)/bin/python benchmarks/k8s_tracked.py --pods 20000 50000
	$(VENV)/bin/python benchmarks/k8s_tracked.py --engine real --pods 1000 --repeat 1
	$(VENV)/bin/python benchmarks/e2e_ce.py --pilots 1000
	$(VENV)/bin/python benchmarks/e2e_ce.py --engine real --pilots 1000 --repeat 1 --variants
	$(VENV)/bin/python benchmarks/lancium_faults.py
	$(VENV)/bin/python benchmarks/audit_log.py
	$(VENV)/bin/python benchmarks/reap_job_ads.py --pilots 1000
	$(VENV)/bin/python benchmarks/provision_scenarios.py
	$(VENV)/bin/python benchmarks/pilot_start.py --rounds 6
	$(VENV)/bin/python benchmarks/blahp_k8s.py --pilots 200
