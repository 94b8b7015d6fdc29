//! Shared-memory (LDS / smem) model (being written).
