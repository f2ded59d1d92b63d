//! Where each open step keeps a rank's row, so that a step record finds its
//! row in O(log n): with a scan of the step's rows, a step of n ranks cost
//! n²/2 comparisons under the state lock (134 M at 16,384 ranks).
//!
//! The index is derived from the open steps alone, so it is not part of the
//! replicated state: its tracker holds it as a
//! [`NotState`](crate::not_state::NotState), not serialized and never compared, and a tracker
//! restored from a snapshot rebuilds it at its first step record.

use std::collections::BTreeMap;

use super::Row;

/// `(step, rank)` -> the row's position in that step's rows.
#[derive(Debug, Clone, Default)]
pub(super) struct RowIndex {
    built: bool,
    at: BTreeMap<(u64, u32), usize>,
}

impl RowIndex {
    /// Rebuilds the index from `pending` unless it is current.
    pub fn ensure(&mut self, pending: &BTreeMap<u64, Vec<Row>>) {
        if self.built {
            return;
        }
        self.at.clear();
        for (&step, rows) in pending {
            for (i, row) in rows.iter().enumerate() {
                self.at.insert((step, row.rank), i);
            }
        }
        self.built = true;
    }

    /// Puts `row` in `rows` (the rows of `step`), replacing the rank's earlier one.
    pub fn put(&mut self, step: u64, rows: &mut Vec<Row>, row: Row) {
        match self.at.get(&(step, row.rank)) {
            Some(&i) => rows[i] = row,
            None => {
                self.at.insert((step, row.rank), rows.len());
                rows.push(row);
            }
        }
    }

    /// Forgets the rows of a step that left the open steps.
    pub fn forget(&mut self, step: u64, rows: &[Row]) {
        for row in rows {
            self.at.remove(&(step, row.rank));
        }
    }
}
