# floodgate container image: a static-ish release build on Debian bookworm,
# run as a non-root user with the reference service's directory layout.
#
#   docker build -t floodgate .
#   docker run --rm -p 8080:8080 -p 8081:8081 floodgate
#
# Rules are read from /srv/runtime_data/current/config (RUNTIME_ROOT +
# RUNTIME_APPDIRECTORY) and reloaded when they change: mount a volume or a
# Kubernetes ConfigMap there. The bundled examples are the default.
#
# A drop-in for the reference image (envoyproxy/ratelimit): the binary is
# also /bin/ratelimit, which serves when run without arguments (Envoy
# Gateway's `command: [/bin/ratelimit]`). It runs as any non-root user (the
# image's 10001, or Envoy Gateway's 65534) on a read-only root filesystem:
# floodgate writes no file anywhere, everything it installs is readable by
# every user, and nothing needs a home directory. The debug listener
# (/rlconfig, /healthcheck) is on 6070 as in the reference.

FROM rust:1.95-bookworm AS builder
WORKDIR /src
# Everything the release build reads; rust-toolchain.toml is left out so the
# image's own 1.95 toolchain is used without downloading components.
COPY Cargo.toml Cargo.lock build.rs ./
# The build flags (tokio_unstable, for the runtime's scheduling option).
COPY .cargo ./.cargo
COPY proto ./proto
COPY src ./src
# Cargo.toml declares the benches; cargo needs their files to load the manifest.
COPY benches ./benches
RUN cargo build --release --locked --bin floodgate \
    && install -D -m 0755 target/release/floodgate /out/floodgate

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 floodgate \
    && useradd --system --uid 10001 --gid floodgate --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin floodgate
COPY --from=builder /out/floodgate /usr/local/bin/floodgate
COPY examples/config /srv/runtime_data/current/config
# /bin is /usr/bin on bookworm; the link keeps argv[0] = ratelimit. Rules
# readable by any user, whatever the build context's file modes.
RUN ln -s /usr/local/bin/floodgate /usr/bin/ratelimit \
    && chmod -R a+rX /srv/runtime_data
ENV RUNTIME_ROOT=/srv/runtime_data/current \
    RUNTIME_APPDIRECTORY=config \
    RUNTIME_IGNOREDOTFILES=true \
    HOST=0.0.0.0 \
    PORT=8080 \
    GRPC_HOST=0.0.0.0 \
    GRPC_PORT=8081 \
    DEBUG_HOST=0.0.0.0 \
    DEBUG_PORT=6070 \
    LOG_FORMAT=json \
    LOG_LEVEL=info
USER 10001:10001
EXPOSE 8080 8081 6070
ENTRYPOINT ["floodgate"]
CMD ["serve"]
