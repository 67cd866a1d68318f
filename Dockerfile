# Build: the whole toolchain, only in this stage.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
RUN cargo build --release --locked --bin lazarus

# Run: a small Debian with CA certificates (amqps) and a non-root user. The certificates are
# not pinned on purpose: each build takes Debian's current ones.
FROM debian:bookworm-slim
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/lazarus --create-home lazarus
COPY --from=build /src/target/release/lazarus /usr/local/bin/lazarus
USER 10001
WORKDIR /var/lib/lazarus
# Off loopback, someone must sign in: built-in users (`docker exec … lazarus user add`).
ENV LAZARUS_LISTEN=0.0.0.0:8080 \
    LAZARUS_AUTH=users \
    LAZARUS_DATABASE_URL=sqlite:///var/lib/lazarus/lazarus.db
VOLUME ["/var/lib/lazarus"]
EXPOSE 8080
# Liveness: the process answers /healthz on its LAZARUS_LISTEN port (not /readyz, which fails
# while RabbitMQ or the database is away: restarting would not help, and nothing is lost).
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["lazarus", "health", "--timeout-secs", "5"]
ENTRYPOINT ["lazarus"]
CMD ["serve"]
