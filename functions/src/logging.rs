//! How a function logs: JSON lines for CloudWatch, filtered by `RUST_LOG`.

/// JSON logs without timestamps: CloudWatch adds its own.
pub fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // RUST_LOG as `level` or `target=level,...` directives: `Targets` reads them without
    // EnvFilter's regex engine, which no bootstrap should carry just for logging.
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|text| text.parse::<tracing_subscriber::filter::Targets>().ok())
        .unwrap_or_else(|| {
            tracing_subscriber::filter::Targets::new().with_default(tracing::Level::INFO)
        });
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .json()
                // A purchase's and a job's fields (ids and hashes) on each of its lines.
                .with_current_span(true)
                .with_span_list(false)
                .with_ansi(false)
                .without_time(),
        )
        .with(filter)
        .init();
}
