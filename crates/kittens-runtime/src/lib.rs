//! Toolchains, code-object analysis and devices: finding or installing the AMDGPU clang and NVRTC,
//! compiling generated source, reading what the compiler produced, running kernels on NVIDIA GPUs, and
//! the runner that checks a registry kernel on random inputs on the interpreter or the host emulation of
//! its lowered HIP ([`runner`]).

pub mod amd;
pub mod build_info;
pub mod cache;
pub mod cuda;
pub mod kernel;
pub mod runner;
pub mod trust;
