//! The bounded queue of requests waiting to be sent, oldest first. Past
//! its bound in samples it drops whole requests from the front (the
//! oldest data) and says how many samples went.

use std::collections::VecDeque;

use super::encode::Body;

/// Requests in order, at most `max_samples` samples together.
#[derive(Debug)]
pub struct Queue {
    max_samples: usize,
    samples: usize,
    bodies: VecDeque<Body>,
}

impl Queue {
    /// An empty queue holding at most `max_samples` samples.
    pub fn new(max_samples: usize) -> Self {
        Self {
            max_samples,
            samples: 0,
            bodies: VecDeque::new(),
        }
    }

    /// Appends `body`, first dropping the oldest requests it needs room
    /// from; returns the samples dropped. A body larger than the whole
    /// bound is dropped itself.
    pub fn push(&mut self, body: Body) -> usize {
        if body.samples > self.max_samples {
            return body.samples;
        }
        let mut dropped = 0;
        while self.samples + body.samples > self.max_samples {
            dropped += self.pop().map_or(0, |b| b.samples);
        }
        self.samples += body.samples;
        self.bodies.push_back(body);
        dropped
    }

    /// The oldest request.
    pub fn front(&self) -> Option<&Body> {
        self.bodies.front()
    }

    /// Removes the oldest request.
    pub fn pop(&mut self) -> Option<Body> {
        let body = self.bodies.pop_front()?;
        self.samples -= body.samples;
        Some(body)
    }

    /// Samples waiting.
    pub fn samples(&self) -> usize {
        self.samples
    }

    /// Removes everything; returns the samples removed.
    pub fn clear(&mut self) -> usize {
        self.bodies.clear();
        std::mem::take(&mut self.samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(tag: u8, samples: usize) -> Body {
        Body {
            bytes: vec![tag],
            samples,
        }
    }

    #[test]
    fn past_the_bound_the_oldest_requests_go_first() {
        let mut q = Queue::new(10);
        assert_eq!(q.push(body(1, 4)), 0);
        assert_eq!(q.push(body(2, 4)), 0);
        assert_eq!(q.push(body(3, 4)), 4, "request 1 made room");
        assert_eq!(q.front().unwrap().bytes, [2]);
        assert_eq!(q.samples(), 8);
        assert_eq!(q.push(body(4, 10)), 8, "both went");
        assert_eq!(q.push(body(5, 11)), 11, "larger than the bound: itself");
        assert_eq!(q.pop().unwrap().bytes, [4]);
        assert!(q.pop().is_none());
        assert_eq!(q.samples(), 0);
    }
}
