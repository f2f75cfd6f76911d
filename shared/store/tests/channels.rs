//! batch-settlement channels, held to one behaviour on both stores (SQLite, and DynamoDB
//! through the AWS SDK against the local server `make test` starts): one request at a
//! time per channel, a charge only from the request holding it at the charge it took it
//! from, a retried charge recognised, a lapsed hold taken over, and the channels with
//! unclaimed charges listed until the chain shows them claimed.

use std::sync::Arc;

use umpire_store::channels::{
    ChannelChain, ChannelCharge, ChannelCommit, ChannelHold, ChannelRecord, ChannelStore,
    ChannelTake,
};
use umpire_store::dynamo::{DynamoStore, TableNames};
use umpire_store::sqlite::SqliteStore;

const NOW: u64 = 1_796_223_845;
const PRICE: u128 = 1_000_000;

fn record(id: &str, charged: u128, hold: Option<ChannelHold>) -> ChannelRecord {
    ChannelRecord {
        channel_id: id.to_owned(),
        network: "eip155:31337".into(),
        config: r#"{"payer":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8"}"#.into(),
        charge: ChannelCharge {
            charged,
            signed_max: charged,
            signature: format!("0xsig{charged}"),
        },
        chain: ChannelChain {
            balance: 50 * PRICE,
            total_claimed: 0,
            withdraw_requested_at: 0,
            refund_nonce: 0,
            synced_at: NOW,
        },
        hold,
        committed_by: None,
    }
}

fn hold(id: &str, base: u128, until: u64) -> ChannelHold {
    ChannelHold {
        id: id.to_owned(),
        base,
        until,
    }
}

fn charge(charged: u128) -> ChannelCharge {
    ChannelCharge {
        charged,
        signed_max: charged,
        signature: format!("0xsig{charged}"),
    }
}

async fn one_request_at_a_time(store: &dyn ChannelStore) {
    let id = "0xc1";
    assert_eq!(
        store
            .take_channel(id, &hold("a", 0, NOW + 30), NOW)
            .await
            .expect("take"),
        ChannelTake::Missing
    );
    // The first voucher creates the record, held by its request.
    assert!(
        store
            .create_channel(&record(id, 0, Some(hold("a", 0, NOW + 30))))
            .await
            .expect("create")
    );
    assert!(
        !store
            .create_channel(&record(id, 0, None))
            .await
            .expect("create twice")
    );
    // A second request meets the hold.
    assert!(matches!(
        store.take_channel(id, &hold("b", 0, NOW + 30), NOW).await.expect("take"),
        ChannelTake::Busy(r) if r.hold.as_ref().map(|h| h.id.as_str()) == Some("a")
    ));
    // Only the holder charges, and only from its base.
    assert_eq!(
        store
            .commit_channel(id, "b", 0, &charge(PRICE))
            .await
            .expect("commit"),
        ChannelCommit::Lost
    );
    assert_eq!(
        store
            .commit_channel(id, "a", 5, &charge(PRICE))
            .await
            .expect("commit"),
        ChannelCommit::Lost
    );
    assert_eq!(
        store
            .commit_channel(id, "a", 0, &charge(PRICE))
            .await
            .expect("commit"),
        ChannelCommit::Committed
    );
    // Its retry (a crash after the charge) is recognised, not charged again.
    assert_eq!(
        store
            .commit_channel(id, "a", 0, &charge(PRICE))
            .await
            .expect("retry"),
        ChannelCommit::Already
    );
    let r = store.get_channel(id).await.expect("get").expect("kept");
    assert_eq!((r.charge.charged, r.hold), (PRICE, None));
    // A voucher written for the old charge meets the new one.
    assert!(matches!(
        store.take_channel(id, &hold("c", 0, NOW + 30), NOW).await.expect("take"),
        ChannelTake::Moved(r) if r.charge.charged == PRICE
    ));
    // A request that fails lets the channel go without charging.
    assert!(matches!(
        store
            .take_channel(id, &hold("d", PRICE, NOW + 30), NOW)
            .await
            .expect("take"),
        ChannelTake::Won(_)
    ));
    store
        .release_channel(id, "someone else")
        .await
        .expect("release");
    assert!(
        store
            .get_channel(id)
            .await
            .expect("get")
            .expect("kept")
            .held_at(NOW)
    );
    store.release_channel(id, "d").await.expect("release");
    let r = store.get_channel(id).await.expect("get").expect("kept");
    assert_eq!((r.charge.charged, r.hold), (PRICE, None));
    // A hold left by a request that died lapses; its late charge is then refused.
    assert!(matches!(
        store
            .take_channel(id, &hold("e", PRICE, NOW + 30), NOW)
            .await
            .expect("take"),
        ChannelTake::Won(_)
    ));
    assert!(matches!(
        store
            .take_channel(id, &hold("f", PRICE, NOW + 60), NOW + 29)
            .await
            .expect("take"),
        ChannelTake::Busy(_)
    ));
    assert!(matches!(
        store
            .take_channel(id, &hold("f", PRICE, NOW + 90), NOW + 30)
            .await
            .expect("take"),
        ChannelTake::Won(_)
    ));
    assert_eq!(
        store
            .commit_channel(id, "e", PRICE, &charge(2 * PRICE))
            .await
            .expect("late"),
        ChannelCommit::Lost
    );
    assert_eq!(
        store
            .commit_channel(id, "f", PRICE, &charge(2 * PRICE))
            .await
            .expect("commit"),
        ChannelCommit::Committed
    );
    assert_eq!(
        store
            .get_channel(id)
            .await
            .expect("get")
            .expect("kept")
            .charge,
        charge(2 * PRICE)
    );
    // The lapsed holder with the very same charge (the same voucher, sent twice) is not
    // told it stands: that charge is the other request's. Only the committer's retry is.
    let late = store
        .commit_channel(id, "e", PRICE, &charge(2 * PRICE))
        .await;
    assert_eq!(late.expect("late"), ChannelCommit::Lost);
    let retry = store
        .commit_channel(id, "f", PRICE, &charge(2 * PRICE))
        .await;
    assert_eq!(retry.expect("retry"), ChannelCommit::Already);
}

async fn unclaimed_until_the_chain_shows_the_claim(store: &dyn ChannelStore) {
    let (a, b) = ("0xa1", "0xb2");
    assert!(
        store
            .create_channel(&record(a, 0, Some(hold("x", 0, NOW + 30))))
            .await
            .expect("create")
    );
    assert!(
        store
            .create_channel(&record(b, 0, None))
            .await
            .expect("create")
    );
    assert!(
        store.unclaimed_channels(10).await.expect("list").is_empty(),
        "nothing charged yet"
    );
    assert_eq!(
        store
            .commit_channel(a, "x", 0, &charge(3 * PRICE))
            .await
            .expect("commit"),
        ChannelCommit::Committed
    );
    let listed = store.unclaimed_channels(10).await.expect("list");
    assert_eq!(
        listed
            .iter()
            .map(|r| r.channel_id.as_str())
            .collect::<Vec<_>>(),
        vec![a]
    );
    assert_eq!(listed[0].unclaimed(), 3 * PRICE);
    // Part claimed: still listed, with the rest.
    let mirror = |claimed: u128| ChannelChain {
        balance: 50 * PRICE,
        total_claimed: claimed,
        withdraw_requested_at: 0,
        refund_nonce: 0,
        synced_at: NOW + 60,
    };
    store
        .mirror_channel(a, &mirror(2 * PRICE))
        .await
        .expect("mirror");
    let listed = store.unclaimed_channels(10).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].unclaimed(), PRICE);
    assert_eq!(listed[0].chain.synced_at, NOW + 60);
    store
        .mirror_channel(a, &mirror(3 * PRICE))
        .await
        .expect("mirror");
    assert!(
        store.unclaimed_channels(10).await.expect("list").is_empty(),
        "all claimed"
    );
    // Mirroring a channel we keep no record of writes nothing.
    store
        .mirror_channel("0xnone", &mirror(1))
        .await
        .expect("mirror");
    assert!(store.get_channel("0xnone").await.expect("get").is_none());
    // A record behind the chain (charged 0, the chain shows 4 claimed: a restored
    // table) is raised to it, its voucher dropped, and is not listed as unclaimed.
    store
        .mirror_channel(b, &mirror(4 * PRICE))
        .await
        .expect("mirror");
    let raised = store.get_channel(b).await.expect("get").expect("kept");
    assert_eq!(raised.charge.charged, 4 * PRICE);
    assert_eq!(raised.charge.signature, "");
    assert_eq!(raised.unclaimed(), 0);
    assert!(store.unclaimed_channels(10).await.expect("list").is_empty());
    // And an older read arriving late changes nothing.
    let mut stale = mirror(0);
    stale.synced_at = NOW;
    store.mirror_channel(b, &stale).await.expect("mirror");
    let kept = store.get_channel(b).await.expect("get").expect("kept");
    assert_eq!(
        (kept.chain.total_claimed, kept.chain.synced_at),
        (4 * PRICE, NOW + 60)
    );
}

/// Twenty requests take one channel at once: one wins, nineteen meet its hold.
async fn twenty_at_once_have_one_winner(store: Arc<dyn ChannelStore>) {
    let id = "0xcc";
    assert!(
        store
            .create_channel(&record(id, 4 * PRICE, None))
            .await
            .expect("create")
    );
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let s = store.clone();
            tokio::spawn(async move {
                s.take_channel(id, &hold(&format!("r{i}"), 4 * PRICE, NOW + 30), NOW)
                    .await
                    .expect("take")
            })
        })
        .collect();
    let mut won = 0;
    for t in tasks {
        match t.await.expect("join") {
            ChannelTake::Won(_) => won += 1,
            ChannelTake::Busy(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(won, 1);
}

macro_rules! channels {
    ($store:expr) => {
        #[tokio::test]
        async fn one_request_at_a_time() {
            super::one_request_at_a_time(&*$store.await).await;
        }
        #[tokio::test]
        async fn unclaimed_until_claimed() {
            super::unclaimed_until_the_chain_shows_the_claim(&*$store.await).await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn twenty_at_once() {
            super::twenty_at_once_have_one_winner($store.await).await;
        }
    };
}

mod sqlite {
    use super::*;

    async fn store() -> Arc<dyn ChannelStore> {
        Arc::new(SqliteStore::in_memory().expect("sqlite"))
    }

    channels!(store());
}

mod dynamodb {
    use super::*;

    async fn store() -> Arc<dyn ChannelStore> {
        let endpoint = std::env::var("UMPIRE_TEST_AWS_ENDPOINT").unwrap_or_else(|_| {
            panic!("UMPIRE_TEST_AWS_ENDPOINT is not set: these tests need the local AWS-compatible server `make test` starts")
        });
        let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(&endpoint)
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "test",
                "test",
                None,
                None,
                "umpire-tests",
            ))
            .load()
            .await;
        let names = TableNames::with_prefix(&format!("{}-", umpire_host::random_id("c")));
        let s = DynamoStore::new(aws_sdk_dynamodb::Client::new(&config), names);
        s.create_tables()
            .await
            .unwrap_or_else(|e| panic!("cannot create tables on {endpoint}: {e}"));
        Arc::new(s)
    }

    channels!(store());
}
