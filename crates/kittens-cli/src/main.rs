//! `kittens`: the command-line face of the project. Each subcommand lives in `cmd/<name>.rs`.

// Every `print!` / `println!` of the subcommands goes through `out` (these macros shadow std's for the
// whole crate: textual `macro_rules!` scope wins over the prelude's), so a closed or full stdout is
// an ordinary outcome instead of std's panic (exit 101 with a backtrace).
macro_rules! print {
    ($($t:tt)*) => { $crate::out::write(format_args!($($t)*)) };
}
macro_rules! println {
    () => { $crate::out::write(format_args!("\n")) };
    ($($t:tt)*) => { $crate::out::write(format_args!("{}\n", format_args!($($t)*))) };
}

mod cmd;
mod out;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "kittens",
    version,
    about = "Tile kernels for AMD CDNA3/CDNA4 and NVIDIA Hopper, testable on a CPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The main job: on a GPU machine benchmark the suite against the vendor libraries; elsewhere run it
    /// on the CPU backend, compile it for every target and print the hardware analysis.
    Demo(cmd::demo::Args),
    /// List the kernels with the targets they lower to, and for each the schedule and status.
    List(cmd::list::Args),
    /// Print the lane/register <-> element map of a matrix instruction.
    Layout(cmd::layout::Args),
    /// Shared-memory bank conflicts of one tile load or store, phase by phase.
    Banks(cmd::banks::Args),
    /// Planners: grid order and cache model, tail KV split, register budgets.
    #[command(subcommand)]
    Plan(cmd::plan::PlanCommand),
    /// Run a kernel on random inputs and report its error against an f64 reference.
    Run(cmd::run::Args),
    /// Print the schedule analysis (waits, barriers, races) of a kernel.
    Check(cmd::check::Args),
    /// Lower a kernel for a target, compile it and analyse the code object.
    Compile(cmd::compile::Args),
    /// Benchmark a kernel against the vendor library on the GPU.
    Bench(cmd::bench_args::Args),
    /// The FP8-tutorial's optimisation ladder as configurations of gemm_fp8, compiled, analysed and
    /// emulated for an AMD target (no AMD speed is measured).
    Ladder(cmd::ladder::Args),
}

fn main() {
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Demo(a) => cmd::demo::run(a),
        Command::List(a) => cmd::list::run(a),
        Command::Layout(a) => cmd::layout::run(a),
        Command::Banks(a) => cmd::banks::run(a),
        Command::Plan(c) => cmd::plan::run(c),
        Command::Run(mut a) => {
            a.explicit = cmd::run::explicit_flags(&matches);
            cmd::run::run(a)
        }
        Command::Check(a) => cmd::check::run(a),
        Command::Compile(a) => cmd::compile::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Ladder(a) => cmd::ladder::run(a),
    };
    // What is still buffered goes out now, where a failure can be reported.
    out::flush();
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
