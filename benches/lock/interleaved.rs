//! The interleaved mode: every function in every round, so that all share the same load.

use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

use crate::results::{baseline, check_failures, median_with_ci, save, Costs};
use crate::{Fixture, Function, Target};

/// Rounds of the interleaved mode, unless `QUORUMLOCK_BENCH_INTERLEAVE` gives a number.
pub(crate) const DEFAULT_ROUNDS: usize = 600;
/// How long each function runs per round in the interleaved mode.
const BLOCK: Duration = Duration::from_millis(25);

/// The interleaved mode (`QUORUMLOCK_BENCH_INTERLEAVE=ROUNDS`, criterion is not used): every
/// round runs each function for 25 ms, in a fresh random order, so that all functions see
/// the same background load; the mean time per cycle of each such block is one sample.
/// Writes the median of the samples with a 95% confidence interval (order statistics) where
/// criterion writes its estimates, under the baseline `interleaved` (or
/// `--save-baseline NAME`), for scripts/bench-report.
pub(crate) fn interleaved(rt: &Runtime, fixture: &Fixture, rounds: usize) {
    use rand::seq::SliceRandom;

    let targets: Vec<Target> = Function::ALL.into_iter().map(Target::new).collect();
    let costs: Vec<Costs> = targets
        .iter()
        .map(|target| rt.block_on(fixture.warm_up(target)))
        .collect();
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); targets.len()];
    let mut failed = vec![0u64; targets.len()];
    let mut cycles = vec![0u64; targets.len()];
    let started = Instant::now();
    rt.block_on(async {
        let mut held = fixture.held.lock().await;
        let mut order: Vec<usize> = (0..targets.len()).collect();
        for _ in 0..rounds {
            order.shuffle(&mut rand::rng());
            for &i in &order {
                let (start, mut done) = (Instant::now(), 0u64);
                while start.elapsed() < BLOCK {
                    if !std::hint::black_box(fixture.cycle(&targets[i], &mut held).await) {
                        failed[i] += 1;
                    }
                    done += 1;
                }
                samples[i].push(start.elapsed().as_nanos() as f64 / done as f64);
                cycles[i] += done;
            }
        }
    });
    eprintln!(
        "interleaved: {rounds} rounds of {} ms per function in {:.0} s",
        BLOCK.as_millis(),
        started.elapsed().as_secs_f64()
    );
    let baseline = baseline("interleaved");
    for (i, mut samples) in samples.into_iter().enumerate() {
        let function = targets[i].function;
        check_failures(function, failed[i], cycles[i]);
        samples.sort_by(f64::total_cmp);
        let (median, low, high) = median_with_ci(&samples);
        eprintln!(
            "{}: median {:.1} µs [{:.1}, {:.1}]",
            function.name(),
            median / 1e3,
            low / 1e3,
            high / 1e3
        );
        let estimates = format!(
            "{{\"median\": {{\"point_estimate\": {median}, \"confidence_interval\": \
             {{\"confidence_level\": 0.95, \"lower_bound\": {low}, \"upper_bound\": {high}}}}}}}\n"
        );
        save(function, &baseline, "estimates.json", &estimates);
        save(function, &baseline, "costs.json", &costs[i].to_json());
    }
}
