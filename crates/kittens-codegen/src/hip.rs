//! HIP lowering for CDNA3/CDNA4 (being written).
