//! One conformance suite, run against both stores: the embedded SQLite store and
//! DynamoDB + SQS through the real AWS SDK against a local AWS-compatible server
//! (moto). `make test` starts that server and sets `UMPIRE_TEST_AWS_ENDPOINT`; without
//! it the DynamoDB half fails loudly rather than skipping.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use umpire_store::dynamo::{DynamoStore, TableNames};
use umpire_store::sqlite::SqliteStore;
use umpire_store::sqs::SqsQueue;
use umpire_store::{
    Claim, FeedbackRow, Finalize, IdempotencyState, Job, JobQueue, PaymentClaim, PaymentHold,
    PaymentMove, PaymentPhase, PaymentState, Store, StoreError, StoredResponse, VerdictRecord,
    VerdictStatus, WebhookOutcome,
};
use umpire_store::{FeedbackStore, VerdictStore};

const NOW: u64 = 1_796_223_845;

fn verdict(id: &str, spec_hash: &str, webhook: Option<&str>, expires_at: u64) -> VerdictRecord {
    VerdictRecord {
        verdict_id: id.into(),
        tier: umpire_core::product::Tier::Sworn,
        status: VerdictStatus::Pending,
        document: None,
        preview: Some(r#"{"pass":1}"#.into()),
        secret_hash: "ab".repeat(32),
        spec_hash: spec_hash.into(),
        webhook_url: webhook.map(str::to_owned),
        created_at: NOW,
        expires_at,
        webhook_outcome: None,
        job_key: None,
        payer: None,
    }
}

fn response(body: &str) -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![("payment-response".into(), "eyJ4Ijp0cnVlfQ==".into())],
        body: body.into(),
    }
}

fn feedback(tx: &str, merchant: &str, payer: &str, block_time: u64) -> FeedbackRow {
    FeedbackRow {
        tx_hash: tx.into(),
        merchant: merchant.into(),
        payer: payer.into(),
        outcome: "fulfilled".into(),
        would_repeat: Some(true),
        latency_ms: Some(1200),
        amount_units: "1000000".into(),
        block_time,
        created_at: NOW,
        anchor: false,
    }
}

async fn verdicts_round_trip_and_are_created_once(store: &dyn Store) {
    let v = verdict("vrd_a", "s1", None, NOW + 100);
    store.put_verdict(&v).await.expect("put");
    assert_eq!(
        store.get_verdict("vrd_a", NOW).await.expect("get"),
        Some(v.clone())
    );
    assert!(matches!(
        store.put_verdict(&v).await,
        Err(StoreError::AlreadyExists)
    ));
    assert_eq!(
        store.get_verdict("vrd_missing", NOW).await.expect("get"),
        None
    );
    store.delete_verdict("vrd_a").await.expect("delete");
    assert_eq!(store.get_verdict("vrd_a", NOW).await.expect("get"), None);
    // The paying wallet is kept (it may sign in to read the verdict).
    let paid = VerdictRecord {
        payer: Some("0x70997970C51812dc3A010C7d01b50e0d17dc79C8".into()),
        ..verdict("vrd_p", "s1", None, NOW + 100)
    };
    store.put_verdict(&paid).await.expect("put");
    assert_eq!(
        store.get_verdict("vrd_p", NOW).await.expect("get"),
        Some(paid)
    );
}

async fn retention_is_enforced_on_read(store: &dyn Store) {
    store
        .put_verdict(&verdict(
            "vrd_old",
            "s2",
            Some("https://hook.example/x"),
            NOW + 10,
        ))
        .await
        .expect("put");
    assert!(
        store
            .get_verdict("vrd_old", NOW + 9)
            .await
            .expect("get")
            .is_some()
    );
    assert_eq!(
        store.get_verdict("vrd_old", NOW + 10).await.expect("get"),
        None
    );
    assert_eq!(
        store
            .find_verdicts("s2", "https://hook.example/x", NOW + 10)
            .await
            .expect("find"),
        Vec::<String>::new()
    );
    assert_eq!(
        store
            .find_verdicts("s2", "https://hook.example/x", NOW)
            .await
            .expect("find"),
        vec!["vrd_old".to_owned()]
    );
}

async fn finalize_happens_exactly_once(store: &dyn Store) {
    let key = "ab".repeat(32);
    store
        .put_verdict(&VerdictRecord {
            job_key: Some(key.clone()),
            ..verdict("vrd_f", "s3", None, NOW + 100)
        })
        .await
        .expect("put");
    // The pass-2 job's key is kept while the verdict is pending...
    let pending = store
        .get_verdict("vrd_f", NOW)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(pending.job_key.as_deref(), Some(key.as_str()));
    assert_eq!(
        store.finalize_verdict("vrd_f", "DOC1").await.expect("fin"),
        Finalize::Done
    );
    assert_eq!(
        store.finalize_verdict("vrd_f", "DOC2").await.expect("fin"),
        Finalize::AlreadyFinal("DOC1".into())
    );
    let got = store
        .get_verdict("vrd_f", NOW)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(got.status, VerdictStatus::Final);
    assert_eq!(got.document.as_deref(), Some("DOC1"));
    // ...and gone with it: copies of the job can no longer be opened.
    assert_eq!(got.job_key, None, "finalizing removes the job key");
    // Pass 2 giving up on a pending verdict forgets its key too; a verdict that is gone
    // stays gone.
    store
        .put_verdict(&VerdictRecord {
            job_key: Some(key.clone()),
            ..verdict("vrd_g", "s3", None, NOW + 100)
        })
        .await
        .expect("put");
    store.forget_job_key("vrd_g").await.expect("forget");
    let given_up = store
        .get_verdict("vrd_g", NOW)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(
        (given_up.status, given_up.job_key),
        (VerdictStatus::Pending, None)
    );
    store
        .forget_job_key("vrd_gone")
        .await
        .expect("forget nothing");
    assert_eq!(store.get_verdict("vrd_gone", NOW).await.expect("get"), None);
    assert_eq!(
        store
            .finalize_verdict("vrd_nope", "DOC")
            .await
            .expect("fin"),
        Finalize::NotFound
    );
}

async fn concurrent_finalizers_agree(store: Arc<dyn Store>) {
    store
        .put_verdict(&verdict("vrd_race", "s4", None, NOW + 100))
        .await
        .expect("put");
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(
                async move { store.finalize_verdict("vrd_race", &format!("DOC{i}")).await },
            )
        })
        .collect();
    let mut done = 0;
    let mut docs = BTreeSet::new();
    for t in tasks {
        match t.await.expect("task").expect("finalize") {
            Finalize::Done => done += 1,
            Finalize::AlreadyFinal(d) => {
                docs.insert(d);
            }
            Finalize::NotFound => panic!("lost the verdict"),
        }
    }
    assert_eq!(done, 1);
    let stored = store
        .get_verdict("vrd_race", NOW)
        .await
        .expect("get")
        .expect("present");
    assert!(docs.len() <= 1 && docs.iter().all(|d| Some(d) == stored.document.as_ref()));
}

async fn find_matches_spec_hash_and_webhook_exactly(store: &dyn Store) {
    let hook = "https://hooks.example.com/umpire";
    store
        .put_verdict(&verdict("vrd_1", "hashA", Some(hook), NOW + 100))
        .await
        .expect("put");
    store
        .put_verdict(&verdict("vrd_2", "hashA", Some(hook), NOW + 100))
        .await
        .expect("put");
    store
        .put_verdict(&verdict(
            "vrd_3",
            "hashA",
            Some("https://hooks.example.com/other"),
            NOW + 100,
        ))
        .await
        .expect("put");
    store
        .put_verdict(&verdict("vrd_4", "hashA", None, NOW + 100))
        .await
        .expect("put");
    store
        .put_verdict(&verdict("vrd_5", "hashB", Some(hook), NOW + 100))
        .await
        .expect("put");
    let mut ids = store.find_verdicts("hashA", hook, NOW).await.expect("find");
    ids.sort();
    assert_eq!(ids, vec!["vrd_1".to_owned(), "vrd_2".to_owned()]);
    assert!(
        store
            .find_verdicts("hashA", "https://hooks.example.com/umpire/", NOW)
            .await
            .expect("find")
            .is_empty()
    );
}

async fn idempotency_lifecycle(store: &dyn Store) {
    let k = "wallet:0xabc|key-0001-aaaa-bbbb";
    assert_eq!(
        store
            .claim_idempotency(k, "h1", NOW, NOW + 60, NOW + 3600)
            .await
            .expect("claim"),
        Claim::Won
    );
    match store
        .claim_idempotency(k, "h1", NOW + 1, NOW + 61, NOW + 3601)
        .await
        .expect("claim")
    {
        Claim::Held(r) => {
            assert_eq!(r.request_hash, "h1");
            assert_eq!(r.state, IdempotencyState::InProgress { until: NOW + 60 });
        }
        Claim::Won => panic!("a held key was claimed twice"),
    }
    store
        .complete_idempotency(k, "h1", &response("{\"ok\":1}"), NOW + 86_400)
        .await
        .expect("complete");
    match store
        .claim_idempotency(k, "h2", NOW + 2, NOW + 62, NOW + 3602)
        .await
        .expect("claim")
    {
        Claim::Held(r) => {
            assert_eq!(r.request_hash, "h1");
            assert_eq!(r.state, IdempotencyState::Completed(response("{\"ok\":1}")));
            assert_eq!(r.expires_at, NOW + 86_400);
        }
        Claim::Won => panic!("a completed key was claimed again"),
    }
    // Releasing a completed record does nothing.
    store.release_idempotency(k, "h1").await.expect("release");
    assert!(store.get_idempotency(k, NOW).await.expect("get").is_some());
    // Past its expiry the key is free again.
    assert_eq!(
        store.get_idempotency(k, NOW + 86_400).await.expect("get"),
        None
    );
    assert_eq!(
        store
            .claim_idempotency(k, "h3", NOW + 86_400, NOW + 86_460, NOW + 90_000)
            .await
            .expect("claim"),
        Claim::Won
    );
}

async fn voided_and_lapsed_claims_free_the_key(store: &dyn Store) {
    let k = "anon|key-void-0000-0000";
    assert_eq!(
        store
            .claim_idempotency(k, "h", NOW, NOW + 60, NOW + 3600)
            .await
            .expect("c"),
        Claim::Won
    );
    store.release_idempotency(k, "h").await.expect("release");
    assert_eq!(
        store
            .claim_idempotency(k, "h2", NOW, NOW + 60, NOW + 3600)
            .await
            .expect("c"),
        Claim::Won
    );
    // A crashed holder: its in-progress expiry passes and the key can be taken over.
    assert!(matches!(
        store
            .claim_idempotency(k, "h3", NOW + 59, NOW + 119, NOW + 3659)
            .await
            .expect("c"),
        Claim::Held(_)
    ));
    assert_eq!(
        store
            .claim_idempotency(k, "h3", NOW + 60, NOW + 120, NOW + 3660)
            .await
            .expect("c"),
        Claim::Won
    );
    // The old holder finishing late does not overwrite the new claim.
    store
        .complete_idempotency(k, "h2", &response("late"), NOW + 86_400)
        .await
        .expect("complete");
    let rec = store
        .get_idempotency(k, NOW + 61)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(rec.request_hash, "h3");
    assert!(matches!(rec.state, IdempotencyState::InProgress { .. }));
}

/// A key bound to a pending purchase answers it however long the chain takes: no claim
/// takes it over (not even long past its in-progress time), only its claim's own
/// request binds it, and it ends completed (delivered) or released (voided).
async fn a_pending_key_stays_bound_until_its_purchase_ends(store: &dyn Store) {
    let k = "0xabc|key-pending-0000-0000";
    // Only a claim held for the request binds it.
    assert!(
        !store
            .pend_idempotency(k, "h", "pay1", NOW + 86_400)
            .await
            .expect("pend")
    );
    assert_eq!(
        store
            .claim_idempotency(k, "h", NOW, NOW + 60, NOW + 3600)
            .await
            .expect("c"),
        Claim::Won
    );
    assert!(
        !store
            .pend_idempotency(k, "other", "pay1", NOW + 86_400)
            .await
            .expect("pend")
    );
    assert!(
        store
            .pend_idempotency(k, "h", "pay1", NOW + 86_400)
            .await
            .expect("pend")
    );
    let pending = IdempotencyState::Pending {
        payment_key: "pay1".into(),
    };
    // Past the in-progress time, hours later: still bound.
    for (at, hash) in [(NOW + 61, "h"), (NOW + 7200, "h2")] {
        match store
            .claim_idempotency(k, hash, at, at + 60, at + 3600)
            .await
            .expect("c")
        {
            Claim::Held(r) => {
                assert_eq!(r.request_hash, "h");
                assert_eq!(r.state, pending);
                assert_eq!(r.expires_at, NOW + 86_400);
            }
            Claim::Won => panic!("a pending key was claimed over at {at}"),
        }
    }
    // A second bind of a pending key is refused (it is no claim any more).
    assert!(
        !store
            .pend_idempotency(k, "h", "pay2", NOW + 86_400)
            .await
            .expect("pend")
    );
    // Only its own purchase ends it: another payment's, another request's, a plain
    // release or completion of a claim leave it bound.
    store
        .complete_idempotency(k, "h", &response("not mine"), NOW + 90_000)
        .await
        .expect("complete");
    let ok = response("{\"ok\":1}");
    assert!(
        !store
            .complete_bound_idempotency(k, "h", "pay2", &ok, NOW + 90_000)
            .await
            .expect("complete")
    );
    assert!(
        !store
            .complete_bound_idempotency(k, "h2", "pay1", &ok, NOW + 90_000)
            .await
            .expect("complete")
    );
    assert!(
        !store
            .release_bound_idempotency(k, "h", "pay2")
            .await
            .expect("release")
    );
    store.release_idempotency(k, "h").await.expect("release");
    let rec = store
        .get_idempotency(k, NOW)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(rec.state, pending);
    // Delivered: completed with the answer, once.
    assert!(
        store
            .complete_bound_idempotency(k, "h", "pay1", &ok, NOW + 90_000)
            .await
            .expect("complete")
    );
    let rec = store
        .get_idempotency(k, NOW)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(rec.state, IdempotencyState::Completed(ok.clone()));
    assert_eq!(rec.expires_at, NOW + 90_000);
    assert!(
        !store
            .complete_bound_idempotency(k, "h", "pay1", &response("late"), NOW + 90_000)
            .await
            .expect("complete"),
        "a completed key is not completed again"
    );
    assert!(
        !store
            .release_bound_idempotency(k, "h", "pay1")
            .await
            .expect("release")
    );
    // Voided: released, and the key is free.
    let v = "anon|key-pending-void-0000";
    store
        .claim_idempotency(v, "h", NOW, NOW + 60, NOW + 3600)
        .await
        .expect("c");
    assert!(
        store
            .pend_idempotency(v, "h", "pay3", NOW + 86_400)
            .await
            .expect("pend")
    );
    assert!(
        !store
            .release_bound_idempotency(v, "other", "pay3")
            .await
            .expect("release")
    );
    assert!(store.get_idempotency(v, NOW).await.expect("get").is_some());
    assert!(
        store
            .release_bound_idempotency(v, "h", "pay3")
            .await
            .expect("release")
    );
    assert_eq!(store.get_idempotency(v, NOW).await.expect("get"), None);
    // Its expiry frees it, as any record's does.
    let e = "anon|key-pending-expiry-00";
    store
        .claim_idempotency(e, "h", NOW, NOW + 60, NOW + 3600)
        .await
        .expect("c");
    store
        .pend_idempotency(e, "h", "pay4", NOW + 100)
        .await
        .expect("pend");
    assert_eq!(
        store
            .claim_idempotency(e, "h5", NOW + 100, NOW + 160, NOW + 3700)
            .await
            .expect("c"),
        Claim::Won
    );
}

async fn fifty_concurrent_claims_have_one_winner(store: Arc<dyn Store>) {
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .claim_idempotency(
                        "anon|race-key-00000000",
                        &format!("h{}", i % 3),
                        NOW,
                        NOW + 60,
                        NOW + 3600,
                    )
                    .await
            })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        if t.await.expect("task").expect("claim") == Claim::Won {
            winners += 1;
        }
    }
    assert_eq!(winners, 1);
}

fn step(from: PaymentPhase, to: PaymentState, held_until: u64) -> PaymentMove {
    PaymentMove {
        from,
        lapsed_at: None,
        to,
        held_until,
        expires_at: NOW + 86_400,
    }
}

/// A prepared answer whose payment may still land is kept for its request: no other
/// request takes the payment until `kept_until` has passed, even once the holder is
/// gone; the request that prepared it can still retake it. Would fail if claims treated
/// a lapsed prepared entry as free (the bug of a retry answered twice).
async fn a_prepared_entry_is_kept_while_its_payment_can_land(store: &dyn Store) {
    let k = "evm:kept";
    let claim = |h: &'static str, now: u64| async move {
        store
            .claim_payment(
                k,
                h,
                &PaymentHold {
                    now,
                    held_until: now + 30,
                    expires_at: NOW + 86_400,
                },
            )
            .await
            .expect("claim")
    };
    assert_eq!(claim("h1", NOW).await, PaymentClaim::Won);
    let answer = PaymentState::Prepared {
        answer: "the answer".into(),
        kept_until: NOW + 300,
    };
    assert!(
        store
            .move_payment(
                k,
                "h1",
                &step(PaymentPhase::Claimed, answer.clone(), NOW + 30)
            )
            .await
            .expect("prepare")
    );
    let entry = store
        .get_payment(k, NOW)
        .await
        .expect("get")
        .expect("entry");
    assert_eq!(entry.state, answer, "kept_until is read back");
    // The holder is gone (held_until passed), the payment can still land: kept.
    assert!(matches!(claim("h2", NOW + 31).await, PaymentClaim::Held(_)));
    assert!(matches!(
        claim("h2", NOW + 299).await,
        PaymentClaim::Held(_)
    ));
    // Its own request retakes it meanwhile.
    let retake = PaymentMove {
        lapsed_at: Some(NOW + 31),
        ..step(PaymentPhase::Prepared, answer.clone(), NOW + 61)
    };
    assert!(store.move_payment(k, "h1", &retake).await.expect("retake"));
    // Once it can no longer land (and its holder is gone), it is free.
    assert!(matches!(
        claim("h2", NOW + 120).await,
        PaymentClaim::Held(_)
    ));
    assert_eq!(claim("h2", NOW + 300).await, PaymentClaim::Won);
}

/// Claimed → Prepared → Settled, each step conditional on the phase and the request,
/// every state read back with its own attributes.
async fn payment_ledger_moves_one_step_at_a_time(store: &dyn Store) {
    let k = "evm:8453:0xtoken:0xpayer:0xnonce-1";
    assert!(store.get_payment(k, NOW).await.expect("get").is_none());
    assert_eq!(
        store
            .claim_payment(
                k,
                "h1",
                &PaymentHold {
                    now: NOW,
                    held_until: NOW + 30,
                    expires_at: NOW + 86_400
                }
            )
            .await
            .expect("claim"),
        PaymentClaim::Won
    );
    let held = store
        .claim_payment(
            k,
            "h2",
            &PaymentHold {
                now: NOW + 1,
                held_until: NOW + 31,
                expires_at: NOW + 86_400,
            },
        )
        .await
        .expect("claim");
    let PaymentClaim::Held(entry) = held else {
        panic!("a held payment was claimed twice: {held:?}")
    };
    assert_eq!(
        (entry.request_hash.as_str(), entry.state.clone()),
        ("h1", PaymentState::Claimed)
    );
    assert_eq!(entry.held_until, NOW + 30);

    let prepared = PaymentState::Prepared {
        answer: r#"{"status":201}"#.into(),
        kept_until: 0,
    };
    // Only the holder's request, only from the phase it is in.
    assert!(
        !store
            .move_payment(
                k,
                "h2",
                &step(PaymentPhase::Claimed, prepared.clone(), NOW + 30)
            )
            .await
            .expect("move")
    );
    assert!(
        !store
            .move_payment(
                k,
                "h1",
                &step(PaymentPhase::Prepared, prepared.clone(), NOW + 30)
            )
            .await
            .expect("move")
    );
    assert!(
        store
            .move_payment(
                k,
                "h1",
                &step(PaymentPhase::Claimed, prepared.clone(), NOW + 30)
            )
            .await
            .expect("move")
    );
    assert_eq!(
        store
            .get_payment(k, NOW)
            .await
            .expect("get")
            .expect("entry")
            .state,
        prepared
    );

    let settled = PaymentState::Settled {
        transaction: "0xabc".into(),
        response: response(r#"{"verdict_id":"vrd_1"}"#),
    };
    assert!(
        store
            .move_payment(k, "h1", &step(PaymentPhase::Prepared, settled.clone(), NOW))
            .await
            .expect("move")
    );
    let entry = store
        .get_payment(k, NOW)
        .await
        .expect("get")
        .expect("entry");
    assert_eq!(
        entry.state, settled,
        "the answer attribute goes with the prepared state"
    );
    // A settled payment is never taken again, not even once its holder's time is past.
    let again = store
        .claim_payment(
            k,
            "h1",
            &PaymentHold {
                now: NOW + 100,
                held_until: NOW + 130,
                expires_at: NOW + 86_400,
            },
        )
        .await
        .expect("claim");
    assert!(
        matches!(again, PaymentClaim::Held(e) if e.state == settled),
        "a settled payment was re-claimed"
    );
    // ...until its entry expires.
    assert!(
        store
            .get_payment(k, NOW + 86_400)
            .await
            .expect("get")
            .is_none()
    );
    assert_eq!(
        store
            .claim_payment(
                k,
                "h3",
                &PaymentHold {
                    now: NOW + 86_400,
                    held_until: NOW + 86_430,
                    expires_at: NOW + 2 * 86_400
                }
            )
            .await
            .expect("claim"),
        PaymentClaim::Won
    );
}

/// A voided payment and a holder whose time ran out free the payment; a prepared
/// answer left by a lapsed holder can be retaken by the same request, keeping it.
async fn voided_and_lapsed_payments_are_free(store: &dyn Store) {
    let k = "evm:8453:0xtoken:0xpayer:0xnonce-2";
    store
        .claim_payment(
            k,
            "h1",
            &PaymentHold {
                now: NOW,
                held_until: NOW + 30,
                expires_at: NOW + 86_400,
            },
        )
        .await
        .expect("claim");
    let voided = PaymentState::Voided {
        reason: "insufficient_funds".into(),
    };
    assert!(
        store
            .move_payment(k, "h1", &step(PaymentPhase::Claimed, voided.clone(), NOW))
            .await
            .expect("void")
    );
    assert_eq!(
        store
            .get_payment(k, NOW)
            .await
            .expect("get")
            .expect("entry")
            .state,
        voided
    );
    assert_eq!(
        store
            .claim_payment(
                k,
                "h2",
                &PaymentHold {
                    now: NOW + 1,
                    held_until: NOW + 31,
                    expires_at: NOW + 86_400
                }
            )
            .await
            .expect("claim"),
        PaymentClaim::Won,
        "a voided payment may buy again"
    );

    let answer = PaymentState::Prepared {
        answer: "the answer".into(),
        kept_until: 0,
    };
    assert!(
        store
            .move_payment(
                k,
                "h2",
                &step(PaymentPhase::Claimed, answer.clone(), NOW + 31)
            )
            .await
            .expect("prepare")
    );
    // The holder is alive: no retake, no claim.
    let retake = PaymentMove {
        lapsed_at: Some(NOW + 10),
        ..step(PaymentPhase::Prepared, answer.clone(), NOW + 60)
    };
    assert!(!store.move_payment(k, "h2", &retake).await.expect("retake"));
    assert!(matches!(
        store
            .claim_payment(
                k,
                "h3",
                &PaymentHold {
                    now: NOW + 10,
                    held_until: NOW + 40,
                    expires_at: NOW + 86_400
                }
            )
            .await
            .expect("claim"),
        PaymentClaim::Held(_)
    ));
    // Its time is up: the same request retakes it with its answer.
    let retake = PaymentMove {
        lapsed_at: Some(NOW + 31),
        ..retake
    };
    assert!(store.move_payment(k, "h2", &retake).await.expect("retake"));
    let entry = store
        .get_payment(k, NOW + 31)
        .await
        .expect("get")
        .expect("entry");
    assert_eq!((entry.state, entry.held_until), (answer, NOW + 60));
    // Lapsed again: any request may claim it afresh (the answer goes).
    assert_eq!(
        store
            .claim_payment(
                k,
                "h3",
                &PaymentHold {
                    now: NOW + 61,
                    held_until: NOW + 91,
                    expires_at: NOW + 86_400
                }
            )
            .await
            .expect("claim"),
        PaymentClaim::Won
    );
    assert_eq!(
        store
            .get_payment(k, NOW + 61)
            .await
            .expect("get")
            .expect("entry")
            .state,
        PaymentState::Claimed
    );
}

async fn fifty_concurrent_payment_claims_have_one_winner(store: Arc<dyn Store>) {
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .claim_payment(
                        "evm:race",
                        &format!("h{}", i % 3),
                        &PaymentHold {
                            now: NOW,
                            held_until: NOW + 60,
                            expires_at: NOW + 3600,
                        },
                    )
                    .await
            })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        if t.await.expect("task").expect("claim") == PaymentClaim::Won {
            winners += 1;
        }
    }
    assert_eq!(winners, 1);
}

/// A webhook's attempts and outcome live on its verdict: each attempt number is made
/// once (a held one only after its hold lapsed, a finished one never), never behind a
/// later one, and none after an outcome, which is recorded once.
async fn webhook_attempts_are_made_once_and_outcomes_stay(store: &dyn Store) {
    let id = "vrd_hook";
    assert!(
        !store
            .claim_webhook_attempt(id, 1, NOW, NOW + 120)
            .await
            .expect("claim"),
        "an attempt for a verdict that does not exist"
    );
    store
        .put_verdict(&verdict(id, "sh", Some("https://h.example/x"), NOW + 3600))
        .await
        .expect("put");
    assert!(
        store
            .claim_webhook_attempt(id, 1, NOW, NOW + 120)
            .await
            .expect("claim")
    );
    assert!(
        !store
            .claim_webhook_attempt(id, 1, NOW + 1, NOW + 121)
            .await
            .expect("claim"),
        "a held attempt was claimed twice"
    );
    assert!(
        store
            .claim_webhook_attempt(id, 1, NOW + 120, NOW + 240)
            .await
            .expect("claim"),
        "a lapsed attempt is retried"
    );
    store.finish_webhook_attempt(id, 1).await.expect("finish");
    assert!(
        !store
            .claim_webhook_attempt(id, 1, NOW + 999, NOW + 1119)
            .await
            .expect("claim"),
        "a finished attempt was made again"
    );
    assert!(
        store
            .claim_webhook_attempt(id, 3, NOW + 2, NOW + 122)
            .await
            .expect("claim")
    );
    assert!(
        !store
            .claim_webhook_attempt(id, 2, NOW + 999, NOW + 1119)
            .await
            .expect("claim"),
        "an attempt behind a later one"
    );
    let read = |now| async move {
        store
            .get_verdict(id, now)
            .await
            .expect("get")
            .expect("verdict")
    };
    assert_eq!(read(NOW).await.webhook_outcome, None);
    store
        .record_webhook_outcome(id, WebhookOutcome::Delivered)
        .await
        .expect("outcome");
    store
        .record_webhook_outcome(id, WebhookOutcome::GaveUp)
        .await
        .expect("outcome");
    assert_eq!(
        read(NOW).await.webhook_outcome,
        Some(WebhookOutcome::Delivered),
        "the first outcome stays"
    );
    assert!(
        !store
            .claim_webhook_attempt(id, 4, NOW + 999, NOW + 1119)
            .await
            .expect("claim"),
        "an attempt after the outcome"
    );
    // Finalizing the verdict keeps its webhook state.
    store.finalize_verdict(id, "{}").await.expect("finalize");
    assert_eq!(
        read(NOW).await.webhook_outcome,
        Some(WebhookOutcome::Delivered)
    );
}

async fn rate_counters_are_atomic(store: Arc<dyn Store>) {
    let tasks: Vec<_> = (0..30)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .count_request("validate#203.0.113.7#29937064", NOW + 120)
                    .await
            })
        })
        .collect();
    let mut counts = BTreeSet::new();
    for t in tasks {
        counts.insert(t.await.expect("task").expect("count"));
    }
    assert_eq!(counts, (1..=30).collect::<BTreeSet<u64>>());
    assert_eq!(
        store
            .count_request("validate#203.0.113.8#29937064", NOW + 120)
            .await
            .expect("c"),
        1
    );
}

async fn feedback_is_one_per_transaction_and_queryable(store: &dyn Store) {
    let m = "0x1111111111111111111111111111111111111111";
    let other = "0x2222222222222222222222222222222222222222";
    let p = "0x3333333333333333333333333333333333333333";
    store
        .put_feedback(&feedback("0xt1", m, p, NOW - 100))
        .await
        .expect("put");
    store
        .put_feedback(&feedback("0xt2", m, p, NOW - 50))
        .await
        .expect("put");
    store
        .put_feedback(&feedback("0xt3", other, p, NOW - 10))
        .await
        .expect("put");
    let mut minimal = feedback(
        "0xt4",
        m,
        "0x4444444444444444444444444444444444444444",
        NOW - 200,
    );
    minimal.would_repeat = None;
    minimal.latency_ms = None;
    store.put_feedback(&minimal).await.expect("put");
    assert!(matches!(
        store.put_feedback(&feedback("0xt1", m, p, NOW)).await,
        Err(StoreError::AlreadyExists)
    ));
    // Newest first, within the window.
    let ledger = store.merchant_ledger(m, NOW - 150).await.expect("q");
    assert_eq!(
        ledger
            .rows
            .iter()
            .map(|r| r.tx_hash.as_str())
            .collect::<Vec<_>>(),
        vec!["0xt2", "0xt1"]
    );
    assert_eq!(ledger.rows[1], feedback("0xt1", m, p, NOW - 100));
    // One pair per payer in the window: p (latest NOW-50); q's row is older.
    assert_eq!(ledger.pairs.len(), 1);
    let pair = &ledger.pairs[0];
    assert_eq!((pair.payer.as_str(), pair.latest), (p, NOW - 50));
    assert!(!pair.single_use(NOW - 150) && pair.cross_merchant(NOW - 150));
    // The window moves past p's second row for m: one row left there, and `other`'s.
    assert!(!pair.single_use(NOW - 50) && pair.cross_merchant(NOW - 50));
    let all = store.merchant_ledger(m, 0).await.expect("q");
    assert_eq!(all.rows.len(), 3);
    assert_eq!(all.rows[2], minimal);
    let q = &all.pairs.iter().find(|x| x.payer != p).expect("q's pair");
    assert!(q.single_use(0) && !q.cross_merchant(0) && !q.anchored(0));
    // The other merchant's page: p only, its one row there, its others older.
    let theirs = store.merchant_ledger(other, NOW - 20).await.expect("q");
    assert_eq!(theirs.rows.len(), 1);
    assert!(theirs.pairs[0].single_use(NOW - 20) && !theirs.pairs[0].cross_merchant(NOW - 20));
    assert!(!theirs.pairs[0].single_use(NOW - 60));
}

/// Rows written in an arbitrary order, many at once, several for one payer: the pairs
/// every merchant's page shows answer like brute force over all rows.
async fn feedback_aggregates_hold_under_concurrent_writers(store: Arc<dyn Store>) {
    use umpire_store::aggregates::{equivalent, exact};
    let merchants: Vec<String> = (0..5).map(|i| format!("0x{:040x}", 0xe0 + i)).collect();
    let payers: Vec<String> = (0..3).map(|i| format!("0x{:040x}", 0xb0 + i)).collect();
    let mut seed = 11u64;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    let rows: Vec<FeedbackRow> = (0..60)
        .map(|i| {
            let m = next(5) as usize;
            let mut r = feedback(
                &format!("0x{i:064x}"),
                &merchants[m],
                &payers[next(3) as usize],
                NOW - 1_000 + 50 * next(12),
            );
            // Merchant 0 is the anchor.
            r.anchor = m == 0;
            r
        })
        .collect();
    let tasks: Vec<_> = rows
        .iter()
        .cloned()
        .map(|r| {
            let store = store.clone();
            tokio::spawn(async move { store.put_feedback(&r).await })
        })
        .collect();
    for t in tasks {
        t.await.expect("task").expect("put");
    }
    let (_, want) = exact(&rows);
    for m in &merchants {
        let got = store.merchant_ledger(m, 0).await.expect("ledger");
        let want: Vec<_> = want.iter().filter(|p| &p.merchant == m).collect();
        assert_eq!(got.pairs.len(), want.len(), "{m}");
        for w in want {
            let g = got.pairs.iter().find(|g| g.payer == w.payer).expect("pair");
            assert!(equivalent(g, w), "{g:?} vs brute force {w:?}");
        }
        assert_eq!(
            got.rows.len(),
            rows.iter().filter(|r| &r.merchant == m).count()
        );
    }
}

/// A bulk load gives the same pages as writing row by row.
async fn loaded_feedback_reads_like_written_feedback(store: &dyn Store) {
    let m = "0x1111111111111111111111111111111111111111";
    let rows: Vec<FeedbackRow> = (0..30)
        .map(|i| {
            feedback(
                &format!("0x{i:064x}"),
                if i % 3 == 0 {
                    m
                } else {
                    "0x2222222222222222222222222222222222222222"
                },
                &format!("0x{:040x}", 0xb0 + i % 7),
                NOW - 100 * i,
            )
        })
        .collect();
    store.load_feedback(&rows).await.expect("load");
    let ledger = store.merchant_ledger(m, NOW - 2_000).await.expect("q");
    assert_eq!(ledger.rows.len(), 7);
    assert_eq!(ledger.pairs.len(), 7);
    assert!(ledger.pairs.iter().all(|p| p.cross_merchant(NOW - 2_000)));
    assert!(matches!(
        store.put_feedback(&rows[0]).await,
        Err(StoreError::AlreadyExists)
    ));
}

macro_rules! conformance {
    ($store:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn verdicts_round_trip() {
            super::verdicts_round_trip_and_are_created_once(&*$store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn retention_on_read() {
            super::retention_is_enforced_on_read(&*$store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn finalize_once() {
            super::finalize_happens_exactly_once(&*$store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn finalize_race() {
            super::concurrent_finalizers_agree($store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn find_exact() {
            super::find_matches_spec_hash_and_webhook_exactly(&*$store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn idempotency() {
            super::idempotency_lifecycle(&*$store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn idempotency_void_and_lapse() {
            super::voided_and_lapsed_claims_free_the_key(&*$store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn idempotency_pending() {
            super::a_pending_key_stays_bound_until_its_purchase_ends(&*$store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn idempotency_race() {
            super::fifty_concurrent_claims_have_one_winner($store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn payment_ledger() {
            super::payment_ledger_moves_one_step_at_a_time(&*$store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn payment_void_and_lapse() {
            super::voided_and_lapsed_payments_are_free(&*$store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn payment_kept_while_it_can_land() {
            super::a_prepared_entry_is_kept_while_its_payment_can_land(&*$store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn payment_race() {
            super::fifty_concurrent_payment_claims_have_one_winner($store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn webhook_attempts() {
            super::webhook_attempts_are_made_once_and_outcomes_stay(&*$store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn rate_counters() {
            super::rate_counters_are_atomic($store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn feedback_rows() {
            super::feedback_is_one_per_transaction_and_queryable(&*$store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn feedback_aggregates_race() {
            super::feedback_aggregates_hold_under_concurrent_writers($store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn feedback_load() {
            super::loaded_feedback_reads_like_written_feedback(&*$store.await).await;
        }
    };
}

mod sqlite {
    use super::*;

    async fn store() -> Arc<dyn Store> {
        Arc::new(SqliteStore::in_memory().expect("sqlite"))
    }

    conformance!(store());

    #[tokio::test]
    async fn a_file_store_keeps_its_data_across_reopen() {
        let dir = std::env::temp_dir().join(umpire_host::random_id("store"));
        {
            let s = SqliteStore::open_in(&dir).expect("open");
            s.put_verdict(&verdict("vrd_keep", "s", None, NOW + 100))
                .await
                .expect("put");
        }
        let s = SqliteStore::open_in(&dir).expect("reopen");
        assert!(s.get_verdict("vrd_keep", NOW).await.expect("get").is_some());
        assert_eq!(s.purge_expired(NOW + 100).await.expect("purge"), 1);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// docs/api.md: feedback rows never expire. The hourly purge `umpire serve` runs
    /// deletes expired verdicts and leaves every feedback row, however old, and the
    /// ledger reads them all. Would catch: feedback given a lifetime, or a purge that
    /// sweeps the table along with the others.
    #[tokio::test]
    async fn the_purge_never_takes_a_feedback_row() {
        let s = SqliteStore::in_memory().expect("sqlite");
        let m = "0x1111111111111111111111111111111111111111";
        let p = "0x3333333333333333333333333333333333333333";
        s.put_feedback(&feedback("0xold", m, p, 1))
            .await
            .expect("put");
        s.put_feedback(&feedback("0xnew", m, p, NOW - 1))
            .await
            .expect("put");
        s.put_verdict(&verdict("vrd_gone", "s", None, NOW + 100))
            .await
            .expect("put");
        let far = NOW + 10 * 365 * 86_400;
        assert_eq!(
            s.purge_expired(far).await.expect("purge"),
            1,
            "the verdict alone"
        );
        let all = s.merchant_ledger(m, 0).await.expect("ledger");
        assert_eq!(all.rows.len(), 2, "both feedback rows stay");
    }

    /// A data directory made before the webhook's state moved onto verdicts gains the
    /// new columns on open, its verdicts intact.
    #[tokio::test]
    async fn an_older_data_directory_is_upgraded_on_open() {
        let dir = std::env::temp_dir().join(umpire_host::random_id("store"));
        std::fs::create_dir_all(&dir).expect("dir");
        {
            let c = rusqlite::Connection::open(dir.join(umpire_store::sqlite::FILE_NAME))
                .expect("old file");
            c.execute_batch(
                "CREATE TABLE verdicts (verdict_id TEXT PRIMARY KEY, tier TEXT NOT NULL, status TEXT NOT NULL, document TEXT, preview TEXT, secret_hash TEXT NOT NULL, spec_hash TEXT NOT NULL, webhook_url TEXT, created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL);
                 INSERT INTO verdicts VALUES ('vrd_old', 'sworn', 'final', '{}', NULL, 'ab', 'sh', 'https://h.example/x', 1, 9999999999);",
            )
            .expect("old schema");
        }
        let s = SqliteStore::open_in(&dir).expect("open an older file");
        let old = s
            .get_verdict("vrd_old", NOW)
            .await
            .expect("get")
            .expect("kept");
        assert_eq!(old.webhook_outcome, None);
        assert!(
            s.claim_webhook_attempt("vrd_old", 1, NOW, NOW + 120)
                .await
                .expect("claim")
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A data directory whose feedback predates the aggregates gains them on open,
    /// computed from its rows: its reports read as if every row had been written now.
    #[tokio::test]
    async fn older_feedback_is_aggregated_on_open() {
        let dir = std::env::temp_dir().join(umpire_host::random_id("store"));
        std::fs::create_dir_all(&dir).expect("dir");
        let (m, other, p) = ("0xm", "0xother", "0xp");
        {
            let c = rusqlite::Connection::open(dir.join(umpire_store::sqlite::FILE_NAME))
                .expect("old file");
            c.execute_batch(&format!(
                "CREATE TABLE feedback (tx_hash TEXT PRIMARY KEY, merchant TEXT NOT NULL, payer TEXT NOT NULL, outcome TEXT NOT NULL, would_repeat INTEGER, latency_ms INTEGER, amount_units TEXT NOT NULL, block_time INTEGER NOT NULL, created_at INTEGER NOT NULL);
                 INSERT INTO feedback VALUES ('0xt1', '{m}', '{p}', 'fulfilled', NULL, NULL, '10000', {t1}, {t1});
                 INSERT INTO feedback VALUES ('0xt2', '{other}', '{p}', 'failed', NULL, NULL, '10000', {t2}, {t2});",
                t1 = NOW - 100,
                t2 = NOW - 50,
            ))
            .expect("old schema");
        }
        let s = SqliteStore::open_in(&dir).expect("open an older file");
        let ledger = s.merchant_ledger(m, NOW - 1_000).await.expect("ledger");
        assert_eq!(ledger.rows.len(), 1);
        assert!(!ledger.rows[0].anchor);
        assert_eq!(ledger.pairs.len(), 1);
        assert!(ledger.pairs[0].cross_merchant(NOW - 1_000));
        assert!(!ledger.pairs[0].single_use(NOW - 1_000));
        // And new rows build on them.
        s.put_feedback(&feedback("0xt3", "0xthird", p, NOW - 10))
            .await
            .expect("put");
        let third = s
            .merchant_ledger("0xthird", NOW - 60)
            .await
            .expect("ledger");
        assert!(third.pairs[0].cross_merchant(NOW - 60));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn jobs_wait_for_their_delay_and_redeliver_until_acked() {
        let clock = Arc::new(std::sync::atomic::AtomicU64::new(NOW * 1000));
        let c = clock.clone();
        let q = SqliteStore::in_memory()
            .expect("sqlite")
            .with_clock(move || c.load(std::sync::atomic::Ordering::SeqCst));
        let job = Job {
            kind: "sworn_pass2".into(),
            payload: r#"{"verdict_id":"vrd_x"}"#.into(),
        };
        q.enqueue(&job, Duration::from_secs(60))
            .await
            .expect("enqueue");
        assert!(q.receive(10, 30).await.expect("receive").is_empty());
        // Milliseconds count: one short of the delay is not yet due.
        clock.store((NOW + 60) * 1000 - 1, std::sync::atomic::Ordering::SeqCst);
        assert!(q.receive(10, 30).await.expect("receive").is_empty());
        clock.store((NOW + 60) * 1000, std::sync::atomic::Ordering::SeqCst);
        let first = q.receive(10, 30).await.expect("receive");
        assert_eq!(first.len(), 1);
        assert_eq!(
            (first[0].job.clone(), first[0].receive_count),
            (job.clone(), 1)
        );
        // Hidden while its visibility lasts, redelivered after.
        assert!(q.receive(10, 30).await.expect("receive").is_empty());
        clock.store((NOW + 90) * 1000, std::sync::atomic::Ordering::SeqCst);
        let second = q.receive(10, 30).await.expect("receive");
        assert_eq!(second[0].receive_count, 2);
        // The stale receipt no longer deletes it; the current one does.
        q.ack(&first[0].receipt).await.expect("ack");
        clock.store((NOW + 120) * 1000, std::sync::atomic::Ordering::SeqCst);
        let third = q.receive(10, 30).await.expect("receive");
        assert_eq!(third.len(), 1);
        q.ack(&third[0].receipt).await.expect("ack");
        clock.store((NOW + 1000) * 1000, std::sync::atomic::Ordering::SeqCst);
        assert!(q.receive(10, 30).await.expect("receive").is_empty());
    }
}

mod dynamodb {
    use super::*;

    /// The local AWS-compatible server (moto) that `make test` started.
    fn endpoint() -> String {
        std::env::var("UMPIRE_TEST_AWS_ENDPOINT").unwrap_or_else(|_| {
            panic!(
                "UMPIRE_TEST_AWS_ENDPOINT is not set: the DynamoDB conformance suite needs the local \
                 AWS-compatible server that `make test` starts (infra/local/with-moto.sh)"
            )
        })
    }

    async fn sdk_config() -> aws_config::SdkConfig {
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(endpoint())
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "test",
                "test",
                None,
                None,
                "umpire-tests",
            ))
            .load()
            .await
    }

    async fn store() -> Arc<dyn Store> {
        let config = sdk_config().await;
        // Fresh tables per test: the tests run in parallel against one server.
        let names = TableNames::with_prefix(&format!("{}-", umpire_host::random_id("t")));
        let s = DynamoStore::new(aws_sdk_dynamodb::Client::new(&config), names);
        s.create_tables()
            .await
            .unwrap_or_else(|e| panic!("cannot create tables on {}: {e}", endpoint()));
        Arc::new(s)
    }

    conformance!(store());

    #[tokio::test]
    async fn sqs_delays_redelivers_and_deletes() {
        let config = sdk_config().await;
        let client = aws_sdk_sqs::Client::new(&config);
        let url = client
            .create_queue()
            .queue_name(umpire_host::random_id("q"))
            .send()
            .await
            .expect("create queue")
            .queue_url
            .expect("queue url");
        let q = SqsQueue::new(client, url);
        let job = Job {
            kind: "sworn_pass2".into(),
            payload: r#"{"verdict_id":"vrd_y"}"#.into(),
        };
        q.enqueue(&job, Duration::from_millis(1500))
            .await
            .expect("enqueue");
        assert!(
            q.receive(10, 1).await.expect("receive").is_empty(),
            "delivered before its delay"
        );
        let mut got = Vec::new();
        for _ in 0..40 {
            got = q.receive(10, 1).await.expect("receive");
            if !got.is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        assert_eq!(got.len(), 1, "never delivered after its delay");
        assert_eq!(got[0].job, job);
        // Not acked: it comes back after its visibility timeout, counted.
        let mut again = Vec::new();
        for _ in 0..40 {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            again = q.receive(10, 30).await.expect("receive");
            if !again.is_empty() {
                break;
            }
        }
        assert_eq!(again.len(), 1, "not redelivered");
        assert!(again[0].receive_count >= 2);
        q.ack(&again[0].receipt).await.expect("ack");
    }
}
