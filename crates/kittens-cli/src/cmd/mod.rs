//! One module per subcommand; each has an `Args` (or a subcommand enum) and a `run`.

pub mod banks;
pub mod bench;
pub mod bench_amd;
pub mod bench_args;
pub mod bench_attn;
pub mod bench_fp8;
pub mod bench_mem;
pub mod check;
pub mod check_banks;
pub mod compile;
pub mod demo;
pub mod flags;
pub mod kernel_file;
pub mod ladder;
pub mod layout;
pub mod list;
pub mod plan;
pub mod run;
