# Build: the whole toolchain, only in this stage.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
RUN cargo build --release --locked --bin lazarus

# Run: a small Debian with CA certificates (amqps) and a non-root user.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/lazarus --create-home lazarus
COPY --from=build /src/target/release/lazarus /usr/local/bin/lazarus
USER lazarus
WORKDIR /var/lib/lazarus
# Off loopback, someone must sign in: built-in users (`docker exec … lazarus user add`).
ENV LAZARUS_LISTEN=0.0.0.0:8080 \
    LAZARUS_AUTH=users \
    LAZARUS_DATABASE_URL=sqlite:///var/lib/lazarus/lazarus.db
VOLUME ["/var/lib/lazarus"]
EXPOSE 8080
ENTRYPOINT ["lazarus"]
CMD ["serve"]
