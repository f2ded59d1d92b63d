//! A bounded FIFO that forgets its oldest element when full.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// At most `cap` elements, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ring<T> {
    cap: usize,
    items: VecDeque<T>,
}

impl<T> Ring<T> {
    /// An empty ring holding at most `cap` elements (at least one).
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            items: VecDeque::new(),
        }
    }

    /// Appends, dropping the oldest element when full.
    pub fn push(&mut self, item: T) {
        if self.items.len() == self.cap {
            self.items.pop_front();
        }
        self.items.push_back(item);
    }

    /// The newest element.
    pub fn last(&self) -> Option<&T> {
        self.items.back()
    }

    /// Oldest first; `.rev()` for newest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.items.iter()
    }

    /// Number of elements held.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::Ring;

    #[test]
    fn forgets_the_oldest_when_full() {
        let mut r = Ring::new(3);
        for i in 0..5 {
            r.push(i);
        }
        assert_eq!(r.iter().copied().collect::<Vec<_>>(), vec![2, 3, 4]);
        assert_eq!(r.last(), Some(&4));
    }
}
