//! Judging a 10-check basic spec against a 200 KB deliverable through a warm isolated
//! worker: the in-process cost plus the pipe round trip and process boundary.
//! Needs the `umpire` binary (UMPIRE_BIN, set by `make bench`); with
//! UMPIRE_LAMBDA_WORKER_BIN (the checker function, built for size) the same judging is
//! timed in the checker process a deployed function runs.

use std::path::PathBuf;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use umpire_checker::{CheckerPool, JudgeRequest, PoolConfig, WORKER_ARG};
use umpire_core::json::parse_str;
use umpire_core::product::Tier;
use umpire_core::spec::parse_spec;

#[path = "../../core/benches/workload.rs"]
mod workload;

fn bench(c: &mut Criterion) {
    let Some(bin) = std::env::var_os("UMPIRE_BIN").map(PathBuf::from) else {
        eprintln!("UMPIRE_BIN is not set; run `make bench`");
        return;
    };
    let spec = parse_spec(
        &parse_str(workload::TEN_CHECKS).expect("json"),
        Some(Tier::Basic),
    )
    .expect("spec");
    let d = workload::deliverable();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let req = JudgeRequest {
        spec: spec.normalized.clone(),
        deliverable: d,
        fetched: vec![None; spec.checks.len()],
    };
    let lambda_worker = std::env::var_os("UMPIRE_LAMBDA_WORKER_BIN").map(PathBuf::from);
    let programs = [("judge_10_checks_200kb_warm_worker", Some(bin))]
        .into_iter()
        .chain([("judge_10_checks_200kb_warm_lambda_worker", lambda_worker)]);
    for (name, program) in programs {
        let Some(program) = program else { continue };
        let pool = CheckerPool::new(PoolConfig {
            program,
            args: vec![WORKER_ARG.into()],
            check_limit: Duration::from_secs(2),
            max_workers: 1,
        });
        rt.block_on(pool.prewarm(1)).expect("worker");
        c.bench_function(name, |b| {
            b.iter(|| rt.block_on(pool.judge(&req)).expect("judged"))
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
