//! Verdicts: the purchase's body judged before any price is asked ([`purchase`]), the
//! paid route ([`buy`]) judging and signing ([`judge`]), a sworn verdict's pass 2 and
//! webhook ([`sworn`]), the ERC-8004 validation requests a verdict answers
//! ([`erc8004`]), the jobs those queue ([`jobs`]), and the free routes that read
//! verdicts back ([`lookup`], with [`siwx`] and [`denied`]) or assess a would-be
//! purchase ([`validate`]).

pub mod buy;
pub mod denied;
pub mod erc8004;
pub mod jobs;
pub mod judge;
pub mod lookup;
pub mod purchase;
pub mod siwx;
pub mod sworn;
pub mod validate;

use umpire_core::product::Tier;

use crate::checkout::Product;
use crate::checkout::discovery::{Input, Listing};

/// A verdict of `tier` as checkout sells it: its price, its resource, and how
/// discovery (x402 Bazaar) lists it.
pub fn product(tier: Tier) -> Product {
    Product {
        price: tier.price(),
        path: format!("/v1/verdicts/{}", tier.as_str()),
        name: format!("a {} verdict", tier.as_str()),
        listing: Listing {
            description: format!(
                "Umpire {} verdict: an Ed25519-signed pass/fail judgment of a deliverable against your acceptance spec, by a neutral third party; verifiable offline. {}",
                tier.as_str(),
                tier.description()
            ),
            openapi_path: "/v1/verdicts/{tier}",
            input: Input::Body {
                example: tier.as_str(),
            },
            // A sworn verdict answers 202 with pass 1; the others 201 with the document.
            success_status: if tier == Tier::Sworn { "202" } else { "201" },
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use umpire_core::product::Tier;

    use super::product;
    use crate::checkout::discovery::{
        BAZAAR, PAYMENT_IDENTIFIER, bazaar, body_example, body_schema, extensions,
    };
    use crate::products::reputation;

    #[test]
    fn every_listing_declares_both_extensions_from_the_openapi_document() {
        for listing in Tier::ALL
            .iter()
            .map(|t| product(*t).listing)
            .chain([reputation::product().listing])
        {
            let ext = extensions(&listing);
            let bazaar = &ext[BAZAAR];
            assert!(
                bazaar["info"]["output"]["example"].is_object(),
                "{listing:?}"
            );
            assert!(
                !bazaar.to_string().contains("$ref"),
                "{listing:?}: refs inlined"
            );
            assert_eq!(ext[PAYMENT_IDENTIFIER]["info"]["required"], false);
        }
        for tier in Tier::ALL {
            let listing = product(tier).listing;
            let b = bazaar(&listing);
            assert_eq!(
                b["info"]["input"]["body"],
                body_example(&listing, tier.as_str())
            );
            assert!(b["info"]["input"]["body"]["spec"]["checks"].is_array());
            // The body schema is the one /openapi.json gives for the request body.
            // Each tier is listed under the one verdict operation, with its own example
            // and success status.
            assert_eq!(listing.openapi_path, "/v1/verdicts/{tier}");
            assert_eq!(
                listing.input,
                crate::checkout::discovery::Input::Body {
                    example: tier.as_str()
                }
            );
            let status = if tier == Tier::Sworn { "202" } else { "201" };
            assert_eq!(listing.success_status, status);
            let openapi_body = body_schema(&listing);
            assert!(!openapi_body.to_string().contains("$ref"));
            assert_eq!(
                b["schema"]["properties"]["input"]["properties"]["body"],
                openapi_body
            );
            assert_eq!(openapi_body["required"], json!(["spec"]));
        }
        let r = bazaar(&reputation::product().listing);
        assert_eq!(r["info"]["input"]["method"], "GET");
        assert!(r["info"]["input"]["queryParams"]["merchant"].is_string());
        assert_eq!(
            r["schema"]["properties"]["input"]["properties"]["queryParams"]["required"],
            json!(["merchant"])
        );
    }
}
