# syntax=docker/dockerfile:1
#
# One image for both roles of gpumon: `gpumon coordinator` and `gpumon agent`
# (and every other subcommand). See docs/deploy.md.
#
#   docker build -t gpumon:0.1.0 .
#   docker run --rm gpumon:0.1.0 --version
#
# The image runs as the unprivileged user `gpumon` (uid 10001), which is right
# for the coordinator. The agent reads /proc/PID/environ of other users'
# training processes and so runs as root in the host PID namespace: the
# Kubernetes DaemonSet (deploy/k8s) sets that in its securityContext, and with
# plain Docker it is `--user 0 --pid host`.

# The builder's Rust must be at least the newest rust-version in Cargo.lock
# (redb 4.4 asks for 1.90).
ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
COPY . .
# The caches only speed up rebuilds; the binary leaves the cached target
# directory in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p gpumon \
    && install -m 0755 target/release/gpumon /usr/local/bin/gpumon

FROM debian:bookworm-slim

# ca-certificates follows Debian's security updates, so its version is left to
# the archive rather than pinned to one that will disappear from it.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 gpumon \
    && useradd --system --uid 10001 --gid gpumon --home-dir /var/lib/gpumon \
        --no-create-home --shell /usr/sbin/nologin gpumon \
    && install -d -o gpumon -g gpumon -m 0700 /var/lib/gpumon

COPY --from=builder /usr/local/bin/gpumon /usr/local/bin/gpumon
# The Python hook as files, for PYTHONPATH=/usr/share/gpumon/python in an image
# or a mount that cannot pip-install it. `gpumon run` does not need them: it
# carries its own copy inside the binary.
COPY agent/python/gpumon /usr/share/gpumon/python/gpumon

ENV GPUMON_DATA_DIR=/var/lib/gpumon
WORKDIR /var/lib/gpumon
# The gpumon user, by number so that Kubernetes' runAsNonRoot can check it.
USER 10001:10001
# 7070: the coordinator's API, agent pushes, Raft and /metrics.
# 9401: an agent's own /metrics.
EXPOSE 7070 9401
ENTRYPOINT ["gpumon"]
CMD ["--help"]
