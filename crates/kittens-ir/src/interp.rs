//! The CPU interpreter (being written).
