//! How a row is spread over the waves of a block when its tile is a strip (`BaseShape::STRIP`: the
//! strip lowering deals chunks of [`CHUNK`] consecutive values to the lanes of a wave, round robin),
//! for one wave width or for every target's at once — so that a program's configuration can be a
//! row length alone, and the same program lowers for NVIDIA's 32-lane warps and AMD's 64-lane
//! wavefronts.
//!
//! The rule the row-wise kernels follow (`kittens_kernels::layernorm::waves_per_row`): a wave holds
//! at most `per_lane` values of a row in each lane (registers), the fewest of 1, 2, 4, 8, 16 waves
//! share a longer row, and a wave's share is a whole number of `lanes × CHUNK` columns (every lane
//! holds whole chunks). [`RowSplit::any_width`] applies it against the narrowest wave (the most values
//! per lane), so the one split is within `per_lane` on every target.

/// Values of one chunk a lane holds (16 bytes of bf16).
pub const CHUNK: u32 = 8;
/// The wave widths of the targets: NVIDIA warps, AMD wavefronts.
pub const WAVE_WIDTHS: [u32; 2] = [32, 64];

/// A row of `dim` values split over `waves_per_row` waves, each a strip of `cols` columns (the last
/// may overhang the row: those columns read zero and are not stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowSplit {
    pub dim: u32,
    pub waves_per_row: u32,
    pub cols: u32,
}

impl RowSplit {
    /// The split on waves of `lanes` lanes: the fewest of 1, 2, 4, …, `max_waves` waves whose share
    /// of the row is at most `lanes × per_lane` values, the share rounded up to whole `lanes ×`
    /// [`CHUNK`] columns.
    pub fn for_lanes(dim: u32, lanes: u32, per_lane: u32, max_waves: u32) -> RowSplit {
        let candidates: Vec<u32> = std::iter::successors(Some(1u32), |w| Some(w * 2))
            .take_while(|w| *w <= max_waves.max(1))
            .collect();
        let waves_per_row = candidates
            .iter()
            .copied()
            .find(|w| dim.div_ceil(*w) <= lanes * per_lane)
            .unwrap_or(candidates.last().copied().unwrap_or(1));
        let chunk = lanes * CHUNK;
        RowSplit {
            dim,
            waves_per_row,
            cols: dim.div_ceil(waves_per_row).div_ceil(chunk) * chunk,
        }
    }

    /// One split for every wave width of [`WAVE_WIDTHS`]: [`Self::for_lanes`] on the narrowest, so
    /// that no lane of any target holds more than `per_lane` values (a wider wave holds fewer).
    pub fn any_width(dim: u32, per_lane: u32, max_waves: u32) -> RowSplit {
        let narrowest = WAVE_WIDTHS.into_iter().min().unwrap_or(32);
        Self::for_lanes(dim, narrowest, per_lane, max_waves)
    }

    /// Values a lane holds of its wave's strip on waves of `lanes` lanes.
    pub fn per_lane(&self, lanes: u32) -> u32 {
        self.cols.div_ceil(lanes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_split_fits_every_wave_width() {
        for dim in [768, 1000, 1024, 4096, 5000, 8192] {
            for per_lane in [8, 16, 32] {
                let s = RowSplit::any_width(dim, per_lane, 16);
                assert!(s.waves_per_row * s.cols >= dim, "{s:?} covers the row");
                for lanes in WAVE_WIDTHS {
                    assert!(
                        s.per_lane(lanes) <= per_lane || s.waves_per_row == 16,
                        "{s:?} on {lanes} lanes"
                    );
                }
                // Whole chunks on the narrowest wave; one wave fewer would hold too many.
                assert_eq!(s.cols % (32 * CHUNK), 0);
                if s.waves_per_row > 1 {
                    assert!(dim.div_ceil(s.waves_per_row / 2) > 32 * per_lane);
                }
            }
        }
        let s = RowSplit::any_width(4096, 32, 16);
        assert_eq!((s.waves_per_row, s.cols), (4, 1024));
        assert_eq!((s.per_lane(32), s.per_lane(64)), (32, 16));
        // On AMD alone the row needs half the waves.
        assert_eq!(RowSplit::for_lanes(4096, 64, 32, 16).waves_per_row, 2);
    }
}
