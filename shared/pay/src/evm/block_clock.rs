//! When to poll for a receipt on a chain that makes a block every `period` (Base: 2 s).
//!
//! What is estimated is a *threshold*: the moment from which a receipt poll, sent then,
//! sees the next block. Measured from our side it already holds the provider's latency
//! and the node's own lag, so nothing has to know either. Every poll answers the latest
//! block number in the same round trip, so each poll is evidence:
//!
//! - a poll that still answers block `n` was sent before block `n + 1`'s threshold
//!   (a lower bound on it);
//! - the first poll that answers `n + 1` was sent after it (an upper bound).
//!
//! The estimate for the next block is the last one plus one period. It moves only when
//! a bound proves it wrong, plus a small probe earlier at each block (so that an
//! estimate which is late, and would never be contradicted by a hit, finds out):
//! doubling while nothing has bracketed the threshold closely, 1 ms a block once
//! something has. An earlier version took "the moment a block was first seen" as the
//! phase: that moment is always a little after the block, so the phase crept later by
//! a round trip and a margin at every block, and every answer with it.

use std::time::{Duration, Instant};

/// How long after its estimated threshold the first poll for a block is sent: the
/// estimate sits at or just below the threshold (where a poll last missed it).
pub(super) const MARGIN: Duration = Duration::from_millis(10);
/// A miss and a hit this close bracket the threshold well enough to stop probing fast.
const TIGHT: Duration = Duration::from_millis(40);
/// For this many blocks after a tight bracket, the estimate probes 1 ms a block.
const LOCK_BLOCKS: u64 = 64;
const MIN_STEP: Duration = Duration::from_millis(1);
/// After a poll that came too early (the block was not there yet), the next one comes
/// this soon, doubling...
const EARLY_RETRY: Duration = Duration::from_millis(25);
/// ...and after a poll that saw the block without our receipt, one more this soon (a
/// node can index a block's receipts a moment after it announces the block).
const SEEN_RETRY: Duration = Duration::from_millis(50);

/// Answers this many blocks behind the clock, this many times in a row, mean the chain
/// went back (a reset devnet, another chain behind the URL), not a lagging node.
const BEHIND_BLOCKS: u64 = 2;
const BEHIND_ANSWERS: u32 = 3;

#[derive(Debug)]
pub(super) struct BlockClock {
    period: Duration,
    phase: Option<Phase>,
    /// Answers in a row more than [`BEHIND_BLOCKS`] behind the latest block seen.
    behind: u32,
}

#[derive(Debug, Clone, Copy)]
struct Phase {
    /// The latest block seen.
    number: u64,
    /// The estimated threshold of block `number`.
    at: Instant,
    /// The latest send time of a poll that answered `number`: block `number + 1` had
    /// not reached it.
    missed: Option<Instant>,
    /// How far the next block's estimate is moved earlier if nothing contradicts it.
    step: Duration,
    /// The block at which a miss and a hit last bracketed the threshold within
    /// [`TIGHT`].
    tight_at: Option<u64>,
}

impl BlockClock {
    pub(super) fn new(period: Duration) -> BlockClock {
        BlockClock {
            period,
            phase: None,
            behind: 0,
        }
    }

    /// The latest block number seen.
    pub(super) fn latest(&self) -> Option<u64> {
        self.phase.map(|p| p.number)
    }

    /// The estimated threshold of block `number` (any block, past or future).
    fn threshold(&self, p: &Phase, number: u64) -> Instant {
        if number >= p.number {
            p.at + self.period * u32::try_from(number - p.number).unwrap_or(u32::MAX)
        } else {
            let back = self.period * u32::try_from(p.number - number).unwrap_or(u32::MAX);
            p.at.checked_sub(back).unwrap_or(p.at)
        }
    }

    /// A poll sent at `sent` answered that the latest block is `latest`.
    pub(super) fn observe(&mut self, sent: Instant, latest: u64) {
        let period = self.period;
        let Some(p) = self.phase.as_mut() else {
            self.phase = Some(Phase {
                number: latest,
                at: sent,
                missed: None,
                step: MIN_STEP * 2,
                tight_at: None,
            });
            return;
        };
        if latest < p.number {
            // An answer overtaken by a newer one, or a node a little behind; many in a
            // row far behind: the chain is not the one the clock saw, start again.
            if latest + BEHIND_BLOCKS < p.number {
                self.behind += 1;
                if self.behind >= BEHIND_ANSWERS {
                    self.phase = None;
                    self.behind = 0;
                    self.observe(sent, latest);
                }
            }
            return;
        }
        self.behind = 0;
        if latest == p.number {
            p.missed = p.missed.max(Some(sent));
            // Seen from a poll sent before the estimate: the estimate was late.
            if sent < p.at {
                p.at = sent;
            }
            return;
        }
        let k = u32::try_from(latest - p.number).unwrap_or(u32::MAX);
        let projected = p.at + period * k;
        // A poll that missed block `number + 1` missed every later one by then too: its
        // bound moves forward with the blocks.
        let lower = p.missed.map(|m| m + period * (k - 1));
        let hi = sent;
        // A poll sent at or after the estimate still missed: the estimate is early.
        let early = lower.is_some_and(|lo| lo >= projected);
        let tight = lower.is_some_and(|lo| hi.saturating_duration_since(lo) <= TIGHT);
        let tight_at = if tight { Some(latest) } else { p.tight_at };
        let locked = tight_at.is_some_and(|t| latest - t <= LOCK_BLOCKS);
        let mut at = if early {
            // Next time poll where a poll just hit.
            hi.checked_sub(MARGIN).unwrap_or(hi)
        } else {
            projected.checked_sub(p.step).unwrap_or(projected)
        };
        if let Some(lo) = lower {
            at = at.max(lo);
        }
        // Seen by a poll sent before the estimate: the estimate was late.
        at = at.min(hi);
        let step = if early || locked {
            MIN_STEP
        } else {
            (p.step * 2).min(period / 8)
        };
        *p = Phase {
            number: latest,
            at,
            missed: None,
            step,
            tight_at,
        };
    }

    /// The block a transaction whose broadcast was answered at `now` is expected in:
    /// the first whose threshold is still ahead (or only just past).
    fn expected(&self, p: &Phase, now: Instant) -> u64 {
        let since = now.saturating_duration_since(p.at + MARGIN);
        let periods = since.as_nanos() / self.period.as_nanos().max(1);
        p.number + 1 + u64::try_from(periods).unwrap_or(u64::MAX / 2)
    }
}

/// The receipt polls of one transaction, timed by the [`BlockClock`].
#[derive(Debug, Default)]
pub(super) struct Poller {
    /// The block the receipt is expected in.
    expect: Option<u64>,
    /// A quick poll was already spent on `expect` after it was seen without the
    /// receipt.
    seen_retry: bool,
    /// Polls in a row that came before the expected block.
    early: u32,
    /// A poll was sent at once for `expect` because another poll had seen it.
    caught_up: bool,
}

impl Poller {
    /// The pause before the next poll, `last` being the latest block our previous poll
    /// answered (`None` before the first, or if it failed).
    pub(super) fn pause(
        &mut self,
        clock: &BlockClock,
        now: Instant,
        last: Option<u64>,
    ) -> Duration {
        let Some(p) = clock.phase else {
            // No block seen yet: a quarter block at a time.
            return clock.period / 4;
        };
        let mut expect = *self.expect.get_or_insert_with(|| clock.expected(&p, now));
        // Never further ahead than the block after the latest one seen: on a chain
        // slower than its configured period the guess can run ahead of the blocks.
        let seen = last.map_or(p.number, |l| l.max(p.number));
        if expect > seen + 1 {
            expect = seen + 1;
            self.expect = Some(expect);
        }
        if last.is_some_and(|l| l >= expect) {
            // Our own poll saw the block, and our receipt was not in the answer.
            if !self.seen_retry {
                self.seen_retry = true;
                return SEEN_RETRY;
            }
            // Not in it: the next block.
            let next = last.unwrap_or(expect).max(expect) + 1;
            self.expect = Some(next);
            self.seen_retry = false;
            self.early = 0;
            self.caught_up = false;
            return (clock.threshold(&p, next) + MARGIN).saturating_duration_since(now);
        }
        if p.number >= expect && last.is_some() && !self.caught_up {
            // Another poll has seen the block since ours was sent: once at once (a
            // node behind the others is then polled with the backoff below).
            self.caught_up = true;
            return Duration::ZERO;
        }
        let due = clock.threshold(&p, expect) + MARGIN;
        if now < due {
            return due - now;
        }
        // The block is due and our poll did not see it yet: soon again, backing off
        // up to a quarter block (a chain that stalls is not hammered).
        let pause = (EARLY_RETRY * 2u32.saturating_pow(self.early.min(8))).min(clock.period / 4);
        self.early += 1;
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = Duration::from_secs(2);

    /// A chain whose block `n` is seen by a poll sent from `origin + n·PERIOD +
    /// offset`, with `per_block` transactions broadcast during each block at times
    /// `jitter` spreads, each polled as its [`Poller`] says (a poll answered at once).
    /// Returns how long after its block's threshold each receipt was seen, and the
    /// number of polls.
    fn run(
        offset: Duration,
        blocks: u64,
        per_block: u64,
        jitter: impl Fn(u64) -> Duration,
    ) -> (Vec<Duration>, u64) {
        let origin = Instant::now();
        let threshold = |n: u64| origin + PERIOD * n as u32 + offset;
        let latest_at = |t: Instant| -> u64 {
            (t.saturating_duration_since(threshold(0)).as_nanos() / PERIOD.as_nanos()) as u64
        };
        let mut clock = BlockClock::new(PERIOD);
        // (when, the transaction's block, its poller, the block its last poll saw,
        // whether this event is a poll or the broadcast's answer)
        let mut events: Vec<(Instant, u64, Poller, Option<u64>, bool)> = Vec::new();
        for block in 1..blocks {
            for i in 0..per_block {
                let sent =
                    threshold(block - 1) + Duration::from_millis(120) + jitter(block * 31 + i);
                events.push((sent, block, Poller::default(), None, false));
            }
        }
        let mut lags = Vec::new();
        let mut polls = 0;
        while !events.is_empty() {
            let first = (0..events.len()).min_by_key(|i| events[*i].0).unwrap_or(0);
            let (now, mined, mut poller, mut last, is_poll) = events.swap_remove(first);
            if is_poll {
                polls += 1;
                let seen = latest_at(now);
                clock.observe(now, seen);
                if seen >= mined {
                    lags.push(now - threshold(mined));
                    continue;
                }
                last = Some(seen);
            }
            let pause = poller.pause(&clock, now, last);
            events.push((now + pause, mined, poller, last, true));
        }
        (lags, polls)
    }

    fn median(mut v: Vec<Duration>) -> Duration {
        v.sort();
        v[v.len() / 2]
    }

    #[test]
    fn polls_stay_on_the_blocks_instead_of_creeping_after_them() {
        for offset in [0, 737, 1_999] {
            let (lags, polls) = run(Duration::from_millis(offset), 120, 8, |i| {
                Duration::from_millis((i * 7919) % 1_700)
            });
            assert_eq!(lags.len(), 119 * 8);
            // After the first blocks (finding the phase) a receipt is seen a margin and
            // a few milliseconds after its block, and stays so: the lag does not creep.
            for part in [&lags[40 * 8..80 * 8], &lags[80 * 8..]] {
                let late = part.iter().filter(|l| **l > MARGIN + TIGHT).count();
                assert!(
                    median(part.to_vec()) <= MARGIN + Duration::from_millis(10),
                    "offset {offset}: median {:?}",
                    median(part.to_vec())
                );
                assert!(
                    late * 20 < part.len(),
                    "offset {offset}: {late} of {} late",
                    part.len()
                );
            }
            eprintln!(
                "offset {offset}: median {:?} polls {polls} max {:?}",
                median(lags[40 * 8..].to_vec()),
                lags[40 * 8..].iter().max()
            );
            // About one poll per receipt, a few more while the phase is found.
            assert!(
                polls * 4 < lags.len() as u64 * 5,
                "offset {offset}: {polls} polls for {} receipts",
                lags.len()
            );
        }
    }

    /// A node that stays behind the block another poll saw is not polled in a loop.
    #[test]
    fn a_node_behind_the_others_is_not_polled_in_a_loop() {
        let origin = Instant::now();
        let mut clock = BlockClock::new(PERIOD);
        clock.observe(origin, 10);
        let mut poller = Poller::default();
        let now = origin + Duration::from_millis(100);
        let first = poller.pause(&clock, now, None);
        assert!(first > Duration::from_secs(1), "{first:?}");
        // Another poll saw block 11; ours keeps answering 10.
        clock.observe(origin + PERIOD + MARGIN, 11);
        let mut at = origin + PERIOD + MARGIN * 2;
        let mut zeros = 0;
        let mut total = Duration::ZERO;
        for _ in 0..20 {
            let pause = poller.pause(&clock, at, Some(10));
            zeros += usize::from(pause.is_zero());
            total += pause;
            at += pause;
        }
        assert!(zeros <= 1, "{zeros} polls at once");
        assert!(total >= Duration::from_secs(2), "20 polls in {total:?}");
    }

    /// A clock that saw a higher block than the chain now has (a devnet started again,
    /// another chain behind the URL) starts over instead of waiting for it.
    #[test]
    fn a_chain_that_went_back_resets_the_clock() {
        let origin = Instant::now();
        let mut clock = BlockClock::new(PERIOD);
        clock.observe(origin, 1_000);
        for i in 1..=BEHIND_ANSWERS {
            clock.observe(origin + Duration::from_millis(u64::from(i) * 10), 5);
        }
        assert_eq!(clock.latest(), Some(5));
        // One lagging answer alone changes nothing.
        clock.observe(origin + PERIOD, 6);
        clock.observe(origin + PERIOD + MARGIN, 3);
        assert_eq!(clock.latest(), Some(6));
    }

    /// On a chain slower than its configured period the transaction's expected block is
    /// kept to the one after the latest seen, not guessed from the time alone.
    #[test]
    fn a_slow_chain_does_not_send_the_poller_far_ahead() {
        let origin = Instant::now();
        let mut clock = BlockClock::new(PERIOD);
        clock.observe(origin, 7);
        // An hour later, with the clock not told of any block since.
        let now = origin + Duration::from_secs(3_600);
        let mut poller = Poller::default();
        let _ = poller.pause(&clock, now, None);
        // The first poll finds the chain at block 8 only.
        clock.observe(now + Duration::from_millis(5), 8);
        let pause = poller.pause(&clock, now + Duration::from_millis(5), Some(8));
        assert!(pause <= PERIOD + MARGIN, "{pause:?}");
        assert!(poller.expect.is_some_and(|e| e <= 9), "{:?}", poller.expect);
    }

    /// The old rule (the phase = when a block was first seen) crept later at every
    /// block; so does any estimate that is never corrected from above. Here the first
    /// sighting is ~500 ms late, and the estimate must come down to the threshold.
    #[test]
    fn a_late_first_sighting_is_corrected() {
        let origin = Instant::now();
        let mut clock = BlockClock::new(PERIOD);
        clock.observe(origin + Duration::from_millis(500), 1);
        // Block n is really seen from `origin + (n - 1)·PERIOD`. Each block is polled
        // where the clock says; a poll before the truth misses, and a retry hits.
        let truth = |n: u64| origin + PERIOD * (n - 1) as u32;
        for n in 2..40u64 {
            let p = clock.phase.expect("phase");
            let poll = clock.threshold(&p, n) + MARGIN;
            if poll >= truth(n) {
                clock.observe(poll, n);
            } else {
                clock.observe(poll, n - 1);
                clock.observe(truth(n) + EARLY_RETRY, n);
            }
        }
        let at = clock.phase.expect("phase").at;
        let truth = truth(39);
        let off = if at > truth { at - truth } else { truth - at };
        assert!(
            off <= Duration::from_millis(30),
            "{off:?} off after 38 blocks"
        );
    }
}
