//! The `umpire` binary: the local server, the reproducibility tool, the offline
//! verifier, and the isolated check worker the server runs.

use std::process::ExitCode;

mod commands;

use commands::fail;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "umpire",
    version,
    about = "Umpire: signed pass/fail verdicts on deliverables, verifiable offline.",
    long_about = None
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per run: the size of the largest command's flags costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    Serve(commands::serve::Serve),
    Judge(commands::judge::Judge),
    Verify(commands::verify::Verify),
    Evaluate(commands::evaluate::Evaluate),
    Commitment(commands::evaluate::Commitment),
    Buy(commands::buy::Buy),
    Status(commands::lookup::Status),
    Find(commands::lookup::Find),
    Validate(commands::validate::Validate),
    Feedback(commands::feedback::Feedback),
    Reputation(commands::reputation::Reputation),
    #[command(name = "pin")]
    Pin(commands::guard::PinCmd),
    Keygen(commands::keygen::Keygen),
    /// Run as an isolated check worker (JSON lines on stdin/stdout); the server
    /// starts these itself.
    #[command(name = "check-worker", hide = true)]
    CheckWorker,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::CheckWorker = cli.command {
        // No runtime, no logging: the worker is a plain loop the parent can kill.
        return match umpire_checker::worker_main() {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
    }
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(2, &format!("cannot start the async runtime: {e}")),
    };
    runtime.block_on(async {
        match cli.command {
            Command::Serve(c) => c.run().await,
            Command::Judge(c) => c.run().await,
            Command::Verify(c) => c.run().await,
            Command::Evaluate(c) => c.run().await,
            Command::Commitment(c) => c.run(),
            Command::Buy(c) => c.run().await,
            Command::Status(c) => c.run().await,
            Command::Find(c) => c.run().await,
            Command::Validate(c) => c.run().await,
            Command::Feedback(c) => c.run().await,
            Command::Reputation(c) => c.run().await,
            Command::Pin(c) => c.run().await,
            Command::Keygen(c) => c.run().await,
            Command::CheckWorker => ExitCode::SUCCESS,
        }
    })
}

/// Logs to stderr, as text (each line prefixed by its span, e.g. one purchase's
/// `purchase{product=verdict tier=basic payment_key=…}`) or, with
/// `UMPIRE_LOG_FORMAT=json`, one JSON object a line with the span's fields under
/// `span`, as the Lambda functions write them.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::env::var("UMPIRE_LOG_FORMAT").is_ok_and(|f| f.trim().eq_ignore_ascii_case("json")) {
        builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .init();
    } else {
        builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
}
