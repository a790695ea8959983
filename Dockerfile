# portdrift's image: the agent, the netfilter tools it reads (and, with --repair, writes)
# the node's rules with, and bpftool, which reads Cilium's service maps; nothing else.
#
#   docker build -t portdrift:dev .
#
# Build stage: the official Rust image. --locked builds exactly Cargo.lock's versions.
FROM rust:1.95-bookworm AS build
WORKDIR /src
# Only what the release binary is built from: Cargo.toml names the benchmark, so cargo
# wants its file to exist; tests, testdata and examples stay out (see .dockerignore).
COPY Cargo.toml Cargo.lock ./
# jemalloc's build-time settings (freed pages go back to the kernel at once).
COPY .cargo ./.cargo
COPY benches ./benches
COPY src ./src
# The pure core (heart and decode), a crate of the workspace.
COPY crates ./crates
# The commit, for --version and portdrift_build_info (build.rs; there is no .git here):
# --build-arg REVISION="$(git rev-parse --short=12 HEAD)".
ARG REVISION=unknown
# build.rs: the git revision and the compiler's version for --version.
COPY build.rs ./
# The release profile keeps line tables for profiling; the image does not need them.
# Then its man pages and shell completions, generated from the same clap definitions.
RUN PORTDRIFT_REVISION="${REVISION}" cargo build --release --locked --bin portdrift \
 && strip target/release/portdrift \
 && target/release/portdrift man /out/share/man/man1 \
 && mkdir -p /out/share/bash-completion/completions /out/share/zsh/vendor-completions \
      /out/share/fish/vendor_completions.d \
 && target/release/portdrift completions bash >/out/share/bash-completion/completions/portdrift \
 && target/release/portdrift completions zsh >/out/share/zsh/vendor-completions/_portdrift \
 && target/release/portdrift completions fish >/out/share/fish/vendor_completions.d/portdrift.fish

# Runtime: Debian's iptables package carries both backends (iptables-nft-save,
# iptables-legacy-save, the ip6tables twins and every *-restore that repair uses),
# nftables carries nft, and bpftool reads the pinned BPF maps of Cilium's kube-proxy
# replacement (`bpftool -j map show` and `map dump`, with --bpf-root; only read). Same
# Debian release as the build stage, so the binary's glibc matches. No shell tools are
# added: the agent runs every tool by name, without a shell.
FROM debian:bookworm-slim
# Versions are not pinned: Debian's security updates replace a pinned version, and the
# netfilter tools and bpftool are what should get them.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables nftables bpftool \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/portdrift /usr/local/bin/portdrift
COPY --from=build /out/share/ /usr/share/
# VERSION follows Cargo.toml (a test checks); REVISION is the commit, given at build
# time (see the build stage).
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="portdrift" \
      org.opencontainers.image.description="Finds where a Kubernetes node's NodePort plumbing has drifted from what the cluster says" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
# Root, as kube-proxy's image runs: Kubernetes gives a non-root process no ambient
# capabilities, so NET_ADMIN and NET_RAW would be lost on exec of iptables-*-save. The
# DaemonSet drops every other capability.
# hadolint ignore=DL3002
USER 0:0
EXPOSE 9741
ENTRYPOINT ["/usr/local/bin/portdrift"]
CMD ["run"]
