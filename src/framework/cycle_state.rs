//! Per-cycle plugin state, keyed by type.

use std::any::{Any, TypeId};

/// Data plugins compute in one scheduling cycle (at PreFilter, PreScore, Reserve) and read at
/// later extension points. Each plugin stores its own type, so keys cannot collide and reads
/// need no downcasting by hand. A cycle holds a handful of values read for every node, so
/// they sit in a small vector searched linearly: cheaper than hashing on every read.
#[derive(Default)]
pub struct CycleState {
    values: Vec<(TypeId, Box<dyn Any + Send + Sync>)>,
}

impl CycleState {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores `value`, replacing any earlier value of the same type.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        let id = TypeId::of::<T>();
        match self.values.iter_mut().find(|(k, _)| *k == id) {
            Some((_, v)) => *v = Box::new(value),
            None => self.values.push((id, Box::new(value))),
        }
    }

    /// The stored value of type `T`.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        let id = TypeId::of::<T>();
        self.values
            .iter()
            .find(|(k, _)| *k == id)
            .and_then(|(_, b)| b.downcast_ref())
    }

    /// Takes the stored value of type `T` out of the state.
    pub fn remove<T: Any + Send + Sync>(&mut self) -> Option<T> {
        let id = TypeId::of::<T>();
        let i = self.values.iter().position(|(k, _)| *k == id)?;
        self.values.swap_remove(i).1.downcast().ok().map(|b| *b)
    }

    /// The stored value of type `T`, mutably.
    pub fn get_mut<T: Any + Send + Sync>(&mut self) -> Option<&mut T> {
        let id = TypeId::of::<T>();
        self.values
            .iter_mut()
            .find(|(k, _)| *k == id)
            .and_then(|(_, b)| b.downcast_mut())
    }
}

impl std::fmt::Debug for CycleState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CycleState({} values)", self.values.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_slots() {
        struct A(u32);
        struct B(&'static str);
        let mut s = CycleState::new();
        s.insert(A(1));
        s.insert(B("x"));
        assert_eq!(s.get::<A>().map(|a| a.0), Some(1));
        s.get_mut::<A>().unwrap().0 = 2;
        assert_eq!(s.get::<A>().map(|a| a.0), Some(2));
        assert_eq!(s.get::<B>().map(|b| b.0), Some("x"));
        assert!(s.get::<u8>().is_none());
    }
}
