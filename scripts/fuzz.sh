#!/usr/bin/env bash
# Fuzzes each target for a set time (not part of CI): scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Engines (FUZZ_ENGINE):
#   libfuzzer  `cargo fuzz run` (the targets under fuzz/), coverage-guided; needs
#              cargo-fuzz. With a nightly toolchain it runs with AddressSanitizer;
#              on stable, without a sanitizer (`-s none`).
#   stable     examples/fuzz.rs: a mutation driver without coverage feedback that
#              needs nothing but the stable toolchain.
# Default: libfuzzer when cargo-fuzz is installed, else stable. Both are seeded from
# testdata/ and fuzz/regressions/; what fails lands in fuzz/artifacts/<target>/. Each
# failing input, once fixed, goes to fuzz/regressions/<target>/, which
# tests/fuzz_regressions.rs replays in CI.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(iptables_save nftables_json nftables_text proc_net bundle cilium_maps ipvs)
engine=${FUZZ_ENGINE:-}
if [ -z "$engine" ]; then
  if cargo fuzz --version >/dev/null 2>&1; then engine=libfuzzer; else engine=stable; fi
fi

cargo build --release --example fuzz
driver=target/release/examples/fuzz
status=0
for t in "${targets[@]}"; do
  echo "== $t ($engine, ${seconds}s)"
  case "$engine" in
    libfuzzer)
      mkdir -p "fuzz/corpus/$t" "fuzz/regressions/$t"
      "$driver" --target "$t" --export-seeds fuzz/corpus
      # With nightly: AddressSanitizer (cargo-fuzz's default); on stable: none.
      toolchain=() flags=(-s none)
      if cargo +nightly --version >/dev/null 2>&1; then toolchain=(+nightly) flags=(); fi
      cargo "${toolchain[@]}" fuzz run "${flags[@]}" -O "$t" "fuzz/corpus/$t" "fuzz/regressions/$t" -- \
        -max_total_time="$seconds" -print_final_stats=1 >"fuzz/$t.log" 2>&1 || status=1
      tail -n 25 "fuzz/$t.log"
      ;;
    stable)
      "$driver" --target "$t" --seconds "$seconds" --corpus fuzz/regressions || status=1
      ;;
    *)
      echo "unknown FUZZ_ENGINE $engine" >&2
      exit 2
      ;;
  esac
done
exit "$status"
