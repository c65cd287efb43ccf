# gantry's container image: built in a Rust image, run from a slim Debian with nothing but
# the binary and CA certificates.
#
#   docker build -t gantry:0.1.0 .
#
# deploy/30-deployment.yaml runs `gantry run --config /etc/gantry/config.yaml`.

FROM rust:1-bookworm AS build
WORKDIR /src
# Dependencies first, so that they are cached across source changes.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src/bin/gantry \
    && echo 'fn main() {}' > src/bin/gantry/main.rs \
    && touch src/lib.rs \
    && cargo build --release --locked --bin gantry \
    && rm -rf src
COPY src ./src
# Make cargo see the real sources as newer than the placeholder build.
RUN touch src/lib.rs src/bin/gantry/main.rs \
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
