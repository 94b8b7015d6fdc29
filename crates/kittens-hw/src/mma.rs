//! Matrix-instruction catalog (being written).
