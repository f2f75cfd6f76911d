//! `template.yaml` declares exactly the tables the code uses: same keys, attribute
//! types, indexes, projections and TTL attributes, on-demand billing and
//! point-in-time recovery. The template is read with cfn-lint's own YAML loader.

use std::collections::BTreeSet;
use umpire_blackbox::{str_at, template_resources};
use umpire_core::json::Value;
use umpire_store::dynamo::TABLES;

fn key_schema(v: Option<&Value>) -> Vec<(String, String)> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|k| {
                    (
                        str_at(k, &["AttributeName"]).unwrap_or("").to_owned(),
                        str_at(k, &["KeyType"]).unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn template_tables_match_the_code() {
    let res = template_resources();
    let declared: BTreeSet<String> = res
        .as_object()
        .expect("resources")
        .iter()
        .filter(|(_, r)| str_at(r, &["Type"]) == Some("AWS::DynamoDB::Table"))
        .map(|(k, _)| k.clone())
        .collect();
    let expected: BTreeSet<String> = TABLES.iter().map(|t| t.logical_id.to_owned()).collect();
    assert_eq!(
        declared, expected,
        "tables in template.yaml vs shared/store/src/dynamo/mod.rs"
    );

    for t in TABLES {
        let props = res
            .get(t.logical_id)
            .and_then(|r| r.get("Properties"))
            .expect("properties");
        let id = t.logical_id;
        assert_eq!(
            str_at(props, &["BillingMode"]),
            Some("PAY_PER_REQUEST"),
            "{id} billing"
        );
        // Rows that expire (the contract deletes them) keep no point-in-time copies,
        // which would outlive the deletion by 35 days; permanent rows keep them. The
        // purchase ledger and the idempotency keys, whose loss would sell a payment
        // twice, keep one day's (their rows live a day: docs/storage.md).
        let one_day = matches!(id, "PaymentsTable" | "IdempotencyTable");
        let pitr = props.get("PointInTimeRecoverySpecification");
        assert_eq!(
            pitr.and_then(|p| p.get("PointInTimeRecoveryEnabled")),
            Some(&Value::Bool(t.ttl.is_none() || one_day)),
            "{id} point-in-time recovery"
        );
        if one_day {
            assert_eq!(
                pitr.and_then(|p| p.get("RecoveryPeriodInDays"))
                    .and_then(Value::as_u64),
                Some(1),
                "{id} recovery window"
            );
        }
        assert_eq!(
            key_schema(props.get("KeySchema")),
            vec![(t.key.0.to_owned(), "HASH".to_owned())],
            "{id} key"
        );

        let mut want_attrs: BTreeSet<(String, String)> =
            BTreeSet::from([(t.key.0.into(), t.key.1.into())]);
        for i in t.indexes {
            want_attrs.insert((i.partition_key.0.into(), i.partition_key.1.into()));
            if let Some((k, ty)) = i.sort_key {
                want_attrs.insert((k.into(), ty.into()));
            }
        }
        let got_attrs: BTreeSet<(String, String)> = props
            .get("AttributeDefinitions")
            .and_then(Value::as_array)
            .expect("attribute definitions")
            .iter()
            .map(|a| {
                (
                    str_at(a, &["AttributeName"]).unwrap_or("").to_owned(),
                    str_at(a, &["AttributeType"]).unwrap_or("").to_owned(),
                )
            })
            .collect();
        assert_eq!(got_attrs, want_attrs, "{id} attribute definitions");

        let gsis = props
            .get("GlobalSecondaryIndexes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        assert_eq!(gsis.len(), t.indexes.len(), "{id} index count");
        for i in t.indexes {
            let g = gsis
                .iter()
                .find(|g| str_at(g, &["IndexName"]) == Some(i.name))
                .unwrap_or_else(|| panic!("{id} lacks index {}", i.name));
            let mut want = vec![(i.partition_key.0.to_owned(), "HASH".to_owned())];
            if let Some((k, _)) = i.sort_key {
                want.push((k.to_owned(), "RANGE".to_owned()));
            }
            assert_eq!(key_schema(g.get("KeySchema")), want, "{id}.{} keys", i.name);
            match i.include {
                None => assert_eq!(str_at(g, &["Projection", "ProjectionType"]), Some("ALL")),
                Some(attrs) => {
                    assert_eq!(
                        str_at(g, &["Projection", "ProjectionType"]),
                        Some("INCLUDE")
                    );
                    let got: BTreeSet<&str> = g
                        .get("Projection")
                        .and_then(|p| p.get("NonKeyAttributes"))
                        .and_then(Value::as_array)
                        .expect("non-key attributes")
                        .iter()
                        .filter_map(Value::as_str)
                        .collect();
                    assert_eq!(
                        got,
                        attrs.iter().copied().collect(),
                        "{id}.{} projection",
                        i.name
                    );
                }
            }
        }
        let ttl = props.get("TimeToLiveSpecification");
        match t.ttl {
            None => assert!(
                ttl.is_none(),
                "{id} must not expire (feedback is permanent)"
            ),
            Some(attr) => {
                assert_eq!(
                    ttl.and_then(|t| t.get("AttributeName"))
                        .and_then(Value::as_str),
                    Some(attr)
                );
                assert_eq!(ttl.and_then(|t| t.get("Enabled")), Some(&Value::Bool(true)));
            }
        }
    }
}
