//! A counting global allocator: every allocation of the bench process, by any thread, while
//! counting is switched on.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// [`System`], with counters. Counting is off unless [`Counting::start`] switched it on, so
/// the other workloads pay one relaxed load per allocation and nothing else.
pub(crate) struct Counting;

static ON: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

/// Allocations (`alloc`, `alloc_zeroed` and `realloc` calls) and the bytes they asked for
/// (for a `realloc`, its new size), counted since [`Counting::start`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counts {
    pub(crate) allocations: u64,
    pub(crate) bytes: u64,
}

impl Counting {
    /// Zeroes the counters and switches counting on.
    pub(crate) fn start() {
        ALLOCATIONS.store(0, Relaxed);
        BYTES.store(0, Relaxed);
        ON.store(true, Relaxed);
    }

    /// Switches counting off and returns what was counted since [`Counting::start`].
    pub(crate) fn stop() -> Counts {
        ON.store(false, Relaxed);
        Counts {
            allocations: ALLOCATIONS.load(Relaxed),
            bytes: BYTES.load(Relaxed),
        }
    }

    #[inline]
    fn count(size: usize) {
        if ON.load(Relaxed) {
            ALLOCATIONS.fetch_add(1, Relaxed);
            BYTES.fetch_add(size as u64, Relaxed);
        }
    }
}

// SAFETY: every call is forwarded unchanged to `System`; the counters have no effect on
// the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::count(layout.size());
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::count(layout.size());
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::count(new_size);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
