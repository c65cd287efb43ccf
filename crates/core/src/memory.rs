//! Memory a thread holds, counted by the global allocator, so that work whose size follows
//! its input (a what-if question) can be held to a budget and stopped before it exhausts the
//! process. The `gantry` binary (and the library's own tests) register [`CountingAllocator`];
//! elsewhere nothing is counted and [`held_by_this_thread`] stays at zero. Counting runs only
//! while some [`Budget`] is alive: the rest of the time an allocation costs one more load of
//! a global that never changes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Budgets alive, on any thread: while there are none, nothing is counted.
static BUDGETS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Bytes allocated minus bytes freed on this thread. A `const` cell without a destructor:
    /// the allocator may touch it at any time, thread teardown included, without allocating.
    static HELD: Cell<isize> = const { Cell::new(0) };
}

/// The system allocator, counting what each thread allocates and frees.
pub struct CountingAllocator;

fn count(bytes: isize) {
    if BUDGETS.load(Ordering::Relaxed) == 0 {
        return;
    }
    // After its thread-locals are gone a thread allocates nothing that matters here.
    let _ = HELD.try_with(|held| held.set(held.get().wrapping_add(bytes)));
}

fn signed(bytes: usize) -> isize {
    isize::try_from(bytes).unwrap_or(isize::MAX)
}

// SAFETY: every call is passed on to the system allocator unchanged; counting touches only a
// thread-local cell and never allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is the system allocator's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(signed(layout.size()));
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(signed(layout.size()));
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        count(-signed(layout.size()));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(signed(new_size) - signed(layout.size()));
        }
        p
    }
}

/// Bytes this thread has allocated and not freed while budgets were alive (frees of what
/// other threads allocated count against it): compare two readings taken while a budget is
/// alive to learn what a piece of work holds.
pub fn held_by_this_thread() -> isize {
    HELD.try_with(Cell::get).unwrap_or(0)
}

/// What a piece of work on this thread may hold: [`Budget::spent`] once the bytes it holds
/// (allocated since [`Budget::start`], not yet freed) pass the limit. Memory is counted
/// while it is alive.
#[derive(Debug)]
pub struct Budget {
    base: isize,
    limit: usize,
}

impl Budget {
    /// A budget of `limit` bytes for the work this thread does from now.
    pub fn start(limit: usize) -> Budget {
        BUDGETS.fetch_add(1, Ordering::Relaxed);
        Budget {
            base: held_by_this_thread(),
            limit,
        }
    }

    /// The bytes the work holds now (zero when it has freed more than it took).
    pub fn held(&self) -> usize {
        usize::try_from(held_by_this_thread().saturating_sub(self.base)).unwrap_or(0)
    }

    /// True once the work holds more than its limit.
    pub fn spent(&self) -> bool {
        self.held() > self.limit
    }

    /// The limit, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        BUDGETS.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_counts_what_this_thread_holds_and_gives_back() {
        let budget = Budget::start(1 << 20);
        let big = vec![0u8; 2 << 20];
        assert!(budget.held() >= 2 << 20, "{}", budget.held());
        assert!(budget.spent());
        drop(big);
        assert!(!budget.spent(), "{}", budget.held());
        // Another thread's allocations are its own.
        let other = std::thread::spawn(|| vec![0u8; 4 << 20]).join().unwrap();
        assert!(!budget.spent());
        drop(other);
    }
}
