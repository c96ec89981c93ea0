//! Status snapshot counts (docs/spec/gating.md §6). Scoping (cycle vs project) is the
//! caller's job; this only aggregates the rows it is given.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::TaskStatus;

/// Which rows a status snapshot covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StatusScope {
    /// Only the tasks stamped with the requested `team_pk`.
    Cycle,
    /// Every task of the project (no `team_pk` asked).
    Project,
}

/// Counts for one wave.
#[derive(Serialize, Deserialize, ToSchema, Clone, Debug, PartialEq, Eq)]
pub struct WaveCounts {
    pub wave: i64,
    /// Every status as a key, 0 when absent.
    pub counts: BTreeMap<String, u64>,
}

/// The aggregate part of `GET /v1/projects/{project_id}/status`.
#[derive(Serialize, Deserialize, ToSchema, Clone, Debug, PartialEq, Eq)]
pub struct StatusSnapshot {
    /// Every status as a key, 0 when absent.
    pub counts: BTreeMap<String, u64>,
    /// Lowest wave with a non-terminal task; `None` when all are terminal (or none exist).
    pub active_wave: Option<i64>,
    /// Tasks currently `running`.
    pub in_flight: u64,
    /// Ascending by wave; only waves that have tasks.
    pub waves: Vec<WaveCounts>,
}

type Tally = [u64; TaskStatus::ALL.len()];

/// Aggregates `(wave, status)` rows in one pass; input order does not matter.
pub fn snapshot(tasks: impl IntoIterator<Item = (i64, TaskStatus)>) -> StatusSnapshot {
    let mut total: Tally = [0; TaskStatus::ALL.len()];
    let mut per_wave: BTreeMap<i64, Tally> = BTreeMap::new();
    let mut active_wave: Option<i64> = None;
    for (wave, status) in tasks {
        total[status.index()] += 1;
        per_wave.entry(wave).or_default()[status.index()] += 1;
        if !status.is_terminal() {
            active_wave = Some(active_wave.map_or(wave, |a| a.min(wave)));
        }
    }
    StatusSnapshot {
        counts: to_map(&total),
        active_wave,
        in_flight: total[TaskStatus::Running.index()],
        waves: per_wave
            .iter()
            .map(|(&wave, tally)| WaveCounts {
                wave,
                counts: to_map(tally),
            })
            .collect(),
    }
}

/// Zeros are kept on purpose: clients (dashboards, `jq '.counts.failed'`) can rely
/// on every key being present instead of treating a missing key as 0 themselves,
/// and the JSON shape is the same for an empty list as for a busy one.
fn to_map(tally: &Tally) -> BTreeMap<String, u64> {
    TaskStatus::ALL
        .iter()
        .zip(tally)
        .map(|(s, &n)| (s.as_str().to_owned(), n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::TaskStatus::*;
    use super::*;

    fn counts(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        let mut m = to_map(&[0; 5]);
        for &(k, v) in pairs {
            m.insert(k.to_owned(), v);
        }
        m
    }

    #[test]
    fn counts_active_wave_in_flight_and_waves() {
        let s = snapshot([
            (2, Pending),
            (1, Done),
            (1, Failed),
            (2, Running),
            (3, Pending),
            (1, Done),
            (2, Abandoned),
        ]);
        assert_eq!(
            s.counts,
            counts(&[
                ("pending", 2),
                ("running", 1),
                ("done", 2),
                ("failed", 1),
                ("abandoned", 1)
            ])
        );
        assert_eq!(s.active_wave, Some(2));
        assert_eq!(s.in_flight, 1);
        let waves: Vec<_> = s.waves.iter().map(|w| w.wave).collect();
        assert_eq!(waves, [1, 2, 3]);
        assert_eq!(s.waves[0].counts, counts(&[("done", 2), ("failed", 1)]));
        assert_eq!(s.waves[2].counts, counts(&[("pending", 1)]));
    }

    #[test]
    fn empty_and_all_terminal_keep_every_key() {
        let s = snapshot([]);
        assert_eq!(s.counts.len(), 5);
        assert!(s.counts.values().all(|&n| n == 0));
        assert_eq!((s.active_wave, s.in_flight, s.waves.len()), (None, 0, 0));

        let s = snapshot([(1, Done), (2, Abandoned)]);
        assert_eq!(s.active_wave, None);
        assert_eq!(s.waves[1].counts.len(), 5);
    }

    #[test]
    fn serializes_with_stable_keys() {
        let v = serde_json::to_value(snapshot([(1, Running)])).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "counts": {"abandoned": 0, "done": 0, "failed": 0, "pending": 0, "running": 1},
                "active_wave": 1,
                "in_flight": 1,
                "waves": [{"wave": 1, "counts": {"abandoned": 0, "done": 0, "failed": 0, "pending": 0, "running": 1}}]
            })
        );
    }
}
