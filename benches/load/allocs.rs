//! Workload i: allocations per acquire + release cycle, counted by the bench's global
//! allocator over sequential cycles. Every thread counts: the runtime's workers run the
//! clients' connection tasks and the background commands of each cycle.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::alloc::Counting;
use crate::impls::{Clients, Impl};
use crate::print_table;

/// Uncounted cycles first: connections made, scripts cached, buffers grown.
const WARM_UP: usize = 200;

pub(crate) async fn allocations(clients: &Arc<Clients>, s: &crate::Settings) -> serde_json::Value {
    let mut rows = Vec::new();
    let mut results = Vec::new();
    for imp in Impl::ALL {
        let resource = format!("load:i:{}", imp.name());
        for _ in 0..WARM_UP {
            clients.cycle(imp, &resource).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut failed = 0u64;
        Counting::start();
        for _ in 0..s.cycles {
            failed += u64::from(!clients.cycle(imp, &resource).await);
        }
        let counts = Counting::stop();
        let cycles = s.cycles.max(1) as f64;
        let (allocations, bytes) = (
            counts.allocations as f64 / cycles,
            counts.bytes as f64 / cycles,
        );
        eprintln!(
            "i: {}: {allocations:.1} allocations, {bytes:.0} bytes per cycle",
            imp.name()
        );
        rows.push(vec![
            imp.name().to_string(),
            format!("{allocations:.1}"),
            format!("{bytes:.0}"),
            format!("{failed}/{}", s.cycles),
        ]);
        results.push(json!({
            "impl": imp.name(),
            "cycles": s.cycles,
            "failed": failed,
            "allocations_per_cycle": allocations,
            "bytes_per_cycle": bytes,
        }));
    }
    print_table(
        &format!(
            "i. allocations per acquire + release cycle (whole process, {} sequential cycles each)",
            s.cycles
        ),
        &["impl", "allocations/cycle", "bytes/cycle", "failed"],
        &rows,
    );
    json!({ "cycles": s.cycles, "results": results })
}
