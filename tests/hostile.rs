//! A hostile pattern that gets past the guard is stopped by the isolated checker's
//! hard limit, fails its own check and nothing more, while the server keeps answering.

use std::sync::Arc;
use std::time::Duration;

use umpire_api::products::verdict::purchase::{Envelope, assess};
use umpire_api::{AppState, Config};
use umpire_blackbox::{request, umpire_bin};
use umpire_checker::{CheckerPool, PoolConfig, WORKER_ARG};
use umpire_core::json::{Value, parse_str};
use umpire_core::product::Tier;
use umpire_core::signer::LocalSigner;

/// Passes the guard (no repetition around the lookahead) but the lookahead rescans
/// the rest of the text at every `a`: quadratic, far beyond any limit on 200 KB, and
/// never counted as backtracking, so fancy-regex's step limit does not stop it.
const HOSTILE: &str = "a(?=a*$)b";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_pattern_is_killed_at_the_limit_while_health_answers() {
    assert!(
        umpire_core::guard::check_pattern(HOSTILE).is_ok(),
        "the guard must let this one through"
    );
    let limit = Duration::from_millis(700);
    let pool = CheckerPool::new(PoolConfig {
        program: umpire_bin(),
        args: vec![WORKER_ARG.into()],
        check_limit: limit,
        max_workers: 2,
    });
    pool.prewarm(1).await.expect("worker starts");
    let state = Arc::new(
        AppState::new(
            Config::default(),
            Arc::new(LocalSigner::from_seed([9u8; 32])),
            Arc::new(umpire_store::sqlite::SqliteStore::in_memory().expect("store")),
        )
        .with_checker(Some(Arc::new(pool))),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(umpire_server::serve(listener, state.clone(), async {
        let _ = stopped.await;
    }));

    let body = parse_str(&format!(
        r#"{{"spec":{{"checks":[{{"type":"regex","pattern":"{HOSTILE}"}},{{"type":"length","min":1}},{{"type":"regex","pattern":"^a+$"}}]}},"deliverable":{{"text":"{}"}}}}"#,
        "a".repeat(200_000)
    ))
    .expect("json");
    let purchase = assess(
        Tier::Basic,
        body.as_object().expect("object"),
        Envelope::Purchase,
        &umpire_fetch::Policy::default(),
    )
    .into_purchase(Tier::Basic)
    .expect("the guard accepts the spec");
    let judging = {
        let state = state.clone();
        tokio::spawn(async move {
            umpire_api::products::verdict::judge::run_checks(&state, &purchase, Vec::new()).await
        })
    };

    // While the hostile check runs, health answers, again and again.
    let mut answered = 0;
    while !judging.is_finished() {
        let r = tokio::task::spawn_blocking(move || request(addr, "GET", "/healthz", &[], None))
            .await
            .expect("health request");
        assert_eq!(r.status, 200);
        answered += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        answered >= 3,
        "health was asked only {answered} times while the check ran"
    );

    let results = judging.await.expect("task").expect("checker works");
    assert!(!results[0].passed);
    assert!(
        results[0].reason.contains("time limit"),
        "{}",
        results[0].reason
    );
    assert!(results[1].passed, "{}", results[1].reason);
    assert!(results[2].passed, "{}", results[2].reason);

    // The pool recovered: an ordinary judgement right after works.
    let body = parse_str(
        r#"{"spec":{"checks":[{"type":"regex","pattern":"b"}]},"deliverable":{"text":"abc"}}"#,
    )
    .expect("json");
    let purchase = assess(
        Tier::Basic,
        body.as_object().expect("object"),
        Envelope::Purchase,
        &umpire_fetch::Policy::default(),
    )
    .into_purchase(Tier::Basic)
    .expect("spec");
    let again = umpire_api::products::verdict::judge::run_checks(&state, &purchase, Vec::new())
        .await
        .expect("checker");
    assert!(again[0].passed);
    let _ = stop.send(());
    let _ = server.await;
    let _ = Value::Null;
}
