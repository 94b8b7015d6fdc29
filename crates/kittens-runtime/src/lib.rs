//! Toolchains, code-object analysis and devices: finding or installing the AMDGPU clang and NVRTC,
//! compiling generated source, reading what the compiler produced, and running kernels on NVIDIA GPUs.

pub mod amd;
pub mod build_info;
pub mod cuda;
