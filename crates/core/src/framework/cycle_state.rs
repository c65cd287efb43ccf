//! Per-cycle plugin state, keyed by type.

use std::any::{Any, TypeId};
use std::sync::Arc;

use super::observer::{Observer, Unobserved};

/// Data plugins compute in one scheduling cycle (at PreFilter, PreScore, Reserve) and read at
/// later extension points. Each plugin stores its own type, so keys cannot collide and reads
/// need no downcasting by hand. A cycle holds a handful of values read for every node, so
/// they sit in a small vector searched linearly: cheaper than hashing on every read.
///
/// A state can be cloned (each value with it): preemption tries removing pods from a node
/// on a copy of the cycle's state, which PreFilter extensions update as pods come and go.
///
/// It also carries what measures the cycle's plugins (its profile's [`Observer`]), as
/// kube-scheduler's `CycleState` says whether to record plugin metrics: the runners that
/// are given a state and no profile find it there.
#[derive(Default, Clone)]
pub struct CycleState {
    values: Vec<(TypeId, Box<dyn Value>)>,
    observer: Option<Arc<dyn Observer>>,
}

/// A value kept in a [`CycleState`]: any cloneable, shareable type.
trait Value: Any + Send + Sync {
    fn clone_box(&self) -> Box<dyn Value>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<T: Any + Send + Sync + Clone> Value for T {
    fn clone_box(&self) -> Box<dyn Value> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

impl Clone for Box<dyn Value> {
    fn clone(&self) -> Self {
        (**self).clone_box()
    }
}

impl CycleState {
    /// An empty state, of a cycle nothing measures.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty state, of a cycle `observer` measures.
    pub fn observed_by(observer: Arc<dyn Observer>) -> Self {
        CycleState {
            values: Vec::new(),
            observer: Some(observer),
        }
    }

    /// What measures the cycle's plugins.
    pub fn observer(&self) -> &dyn Observer {
        self.observer.as_deref().unwrap_or(&Unobserved)
    }

    /// Stores `value`, replacing any earlier value of the same type.
    pub fn insert<T: Any + Send + Sync + Clone>(&mut self, value: T) {
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
            .and_then(|(_, b)| (**b).as_any().downcast_ref())
    }

    /// Takes the stored value of type `T` out of the state.
    pub fn remove<T: Any + Send + Sync>(&mut self) -> Option<T> {
        let id = TypeId::of::<T>();
        let i = self.values.iter().position(|(k, _)| *k == id)?;
        self.values
            .swap_remove(i)
            .1
            .into_any()
            .downcast()
            .ok()
            .map(|b| *b)
    }

    /// The stored value of type `T`, mutably.
    pub fn get_mut<T: Any + Send + Sync>(&mut self) -> Option<&mut T> {
        let id = TypeId::of::<T>();
        self.values
            .iter_mut()
            .find(|(k, _)| *k == id)
            .and_then(|(_, b)| (**b).as_any_mut().downcast_mut())
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
        #[derive(Clone)]
        struct A(u32);
        #[derive(Clone)]
        struct B(&'static str);
        let mut s = CycleState::new();
        s.insert(A(1));
        s.insert(B("x"));
        assert_eq!(s.get::<A>().map(|a| a.0), Some(1));
        s.get_mut::<A>().unwrap().0 = 2;
        assert_eq!(s.get::<A>().map(|a| a.0), Some(2));
        assert_eq!(s.get::<B>().map(|b| b.0), Some("x"));
        assert!(s.get::<u8>().is_none());
        let copy = s.clone();
        s.get_mut::<A>().unwrap().0 = 3;
        assert_eq!(
            copy.get::<A>().map(|a| a.0),
            Some(2),
            "a clone owns its values"
        );
        assert_eq!(s.remove::<A>().map(|a| a.0), Some(3));
    }
}
