//! Storage rounding of bf16/fp16/fp8 in the RTNE, RTNA and RTZ modes (being written).
