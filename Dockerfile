# gantry's container image: built in a Rust image, run from a slim Debian with nothing but
# the binary and CA certificates.
#
#   docker build -t gantry:0.1.0 .
#
# deploy/30-deployment.yaml runs `gantry run --config /etc/gantry/config.yaml`.

FROM rust:1-bookworm AS build
WORKDIR /src
# Dependencies first, so that they are cached across source changes: the workspace's
# manifests with empty crates.
COPY Cargo.toml Cargo.lock ./
COPY crates/core/Cargo.toml crates/core/
COPY crates/sim/Cargo.toml crates/sim/
COPY crates/adapter/Cargo.toml crates/adapter/
COPY crates/webhook/Cargo.toml crates/webhook/
COPY crates/test-support/Cargo.toml crates/test-support/
RUN for crate in core sim adapter webhook test-support; do \
        mkdir -p "crates/${crate}/src" && touch "crates/${crate}/src/lib.rs"; \
    done \
    && mkdir -p src/bin/gantry \
    && echo 'fn main() {}' > src/bin/gantry/main.rs \
    && cargo build --release --locked --bin gantry \
    && rm -rf src crates/*/src
COPY src ./src
COPY crates ./crates
# Make cargo see the real sources as newer than the placeholder build.
RUN touch src/bin/gantry/main.rs crates/*/src/lib.rs \
    && cargo build --release --locked --bin gantry

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/gantry /usr/local/bin/gantry
# The "nonroot" user of distroless images; deploy/30-deployment.yaml runs as it too.
USER 65532:65532
EXPOSE 10259
ENTRYPOINT ["/usr/local/bin/gantry"]
CMD ["run"]
