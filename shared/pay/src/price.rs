//! The SOL spot rate behind native-SOL quotes, from a configured price source and
//! cached: refreshed when older than [`REFRESH_AFTER_SECS`], and dropped when older
//! than [`MAX_AGE_SECS`], at which point the SOL option is left out of the 402 rather
//! than mispriced.
//!
//! The source speaks Coinbase's public spot-price API
//! (`GET /v2/prices/SOL-USD/spot` → `{"data":{"amount":"150.23","base":"SOL","currency":"USD"}}`).

use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;

use umpire_x402::rails::SolRate;

/// Coinbase's spot price of SOL in USD.
pub const DEFAULT_SOL_PRICE_URL: &str = "https://api.coinbase.com/v2/prices/SOL-USD/spot";
pub const REFRESH_AFTER_SECS: u64 = 60;
pub const MAX_AGE_SECS: u64 = 300;
const FETCH_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug)]
pub struct SolPriceFeed {
    url: String,
    http: reqwest::Client,
    cached: Mutex<Option<SolRate>>,
}

#[derive(Deserialize)]
struct SpotAnswer {
    data: Spot,
}

#[derive(Deserialize)]
struct Spot {
    amount: String,
    base: String,
    currency: String,
}

/// "150.23" → 150_230_000 micro-USD; None for anything that is not a plain positive decimal.
pub fn micro_usd(amount: &str) -> Option<u64> {
    let (int, frac) = amount.split_once('.').unwrap_or((amount, ""));
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Truncating below a micro-dollar moves a quote by far less than the buffer.
    let frac6: String = frac.chars().chain(std::iter::repeat('0')).take(6).collect();
    let v = int
        .parse::<u64>()
        .ok()?
        .checked_mul(1_000_000)?
        .checked_add(frac6.parse::<u64>().ok()?)?;
    (v > 0).then_some(v)
}

impl SolPriceFeed {
    pub fn new(url: &str) -> Result<SolPriceFeed, String> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(SolPriceFeed {
            url: url.to_owned(),
            http,
            cached: Mutex::new(None),
        })
    }

    fn cached(&self) -> Option<SolRate> {
        *self.cached.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn fetch(&self, now: u64) -> Result<SolRate, String> {
        let answer: SpotAnswer = self
            .http
            .get(&self.url)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .error_for_status()
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        if answer.data.base != "SOL" || answer.data.currency != "USD" {
            return Err(format!(
                "the price source quoted {}-{}, not SOL-USD",
                answer.data.base, answer.data.currency
            ));
        }
        let micro_usd_per_sol = micro_usd(&answer.data.amount)
            .ok_or_else(|| format!("unreadable amount {:?}", answer.data.amount))?;
        Ok(SolRate {
            micro_usd_per_sol,
            fetched_at: now,
        })
    }

    /// A rate no older than [`MAX_AGE_SECS`], refreshing a stale one; None when the
    /// source cannot be read and the cache is too old.
    pub async fn rate(&self, now: u64) -> Option<SolRate> {
        let cached = self.cached();
        if let Some(r) = cached
            && now.saturating_sub(r.fetched_at) < REFRESH_AFTER_SECS
        {
            return Some(r);
        }
        match self.fetch(now).await {
            Ok(r) => {
                *self.cached.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
                Some(r)
            }
            Err(e) => {
                tracing::warn!(error = %e, url = self.url, "SOL price source unavailable");
                cached.filter(|r| now.saturating_sub(r.fetched_at) < MAX_AGE_SECS)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_amounts_become_micro_usd() {
        assert_eq!(micro_usd("150.23"), Some(150_230_000));
        assert_eq!(micro_usd("150"), Some(150_000_000));
        assert_eq!(micro_usd("0.0000019"), Some(1));
        assert_eq!(micro_usd("0.0000001"), None);
        assert_eq!(micro_usd("-1"), None);
        assert_eq!(micro_usd("1e3"), None);
        assert_eq!(micro_usd(""), None);
        assert_eq!(micro_usd(".5"), None);
    }

    #[tokio::test]
    async fn an_unreachable_source_means_no_rate() {
        // Port 9 (discard) on loopback refuses connections.
        let feed = SolPriceFeed::new("http://127.0.0.1:9/v2/prices/SOL-USD/spot").expect("feed");
        assert_eq!(feed.rate(1_700_000_000).await, None);
    }

    /// A local stand-in for the spot-price API: answers each request with the next
    /// scripted amount (`None`: a 503), counting the requests.
    fn source(
        script: Vec<Option<&'static str>>,
    ) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = asked.clone();
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                let n = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                let answer = match script.get(n).copied().flatten() {
                    Some(amount) => {
                        let body = format!(
                            r#"{{"data":{{"amount":"{amount}","base":"SOL","currency":"USD"}}}}"#
                        );
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                    }
                    None => "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_owned(),
                };
                let _ = conn.write_all(answer.as_bytes());
            }
        });
        (format!("http://{addr}/v2/prices/SOL-USD/spot"), asked)
    }

    /// The cache as the 402 reads it: a rate is reused (no request) until it is
    /// REFRESH_AFTER_SECS old, then read again; when the source fails, the last rate
    /// serves until MAX_AGE_SECS and is then dropped (SOL left out of the 402 rather
    /// than mispriced). Would catch: a cache never refreshed, refreshed on every quote,
    /// or a stale rate served past its age.
    #[tokio::test]
    async fn the_rate_is_refreshed_when_old_and_dropped_when_stale() {
        let t0 = 1_700_000_000;
        let (url, asked) = source(vec![Some("150.00"), Some("160.00"), None, None, None]);
        let feed = SolPriceFeed::new(&url).expect("feed");
        let asked = || asked.load(std::sync::atomic::Ordering::SeqCst);
        let rate = |r: Option<SolRate>| r.map(|r| (r.micro_usd_per_sol, r.fetched_at));
        assert_eq!(rate(feed.rate(t0).await), Some((150_000_000, t0)));
        assert_eq!(asked(), 1);
        // Fresh: served from the cache, the source not asked.
        assert_eq!(
            rate(feed.rate(t0 + REFRESH_AFTER_SECS - 1).await),
            Some((150_000_000, t0))
        );
        assert_eq!(asked(), 1);
        // Old enough to refresh: read again.
        let t1 = t0 + REFRESH_AFTER_SECS;
        assert_eq!(rate(feed.rate(t1).await), Some((160_000_000, t1)));
        assert_eq!(asked(), 2);
        // The source fails: the last rate serves while it is younger than MAX_AGE_SECS...
        let last = feed.rate(t1 + MAX_AGE_SECS - 1).await;
        assert_eq!(rate(last), Some((160_000_000, t1)));
        assert_eq!(asked(), 3, "a refresh was tried");
        // ...and is dropped at that age.
        assert_eq!(feed.rate(t1 + MAX_AGE_SECS).await, None);
        assert_eq!(asked(), 4);
    }
}
