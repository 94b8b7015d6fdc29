//! No lowering emits a kernel whose schedule analysis reports a hazard: HIP and sm_90a both refuse a
//! GEMM with one barrier removed, and the error names the hazard.

use kittens_codegen::{cuda, hip};
use kittens_hw::Arch;
use kittens_ir::analysis::{Hazard, ScheduleError};
use kittens_ir::{Kernel, Op};
use kittens_kernels::gemm::{build, GemmConfig};

/// The kernel without its first barrier written in the program (not implied by the schedule).
fn without_first_barrier(k: &Kernel) -> Kernel {
    let i = k
        .ops()
        .into_iter()
        .find(|r| matches!(r.op, Op::Barrier { .. }) && !r.implied)
        .expect("a written barrier")
        .index;
    k.without_op(i).expect("op exists")
}

fn assert_names_a_hazard(e: &ScheduleError, text: &str) {
    let ScheduleError::Hazard { hazard, .. } = e else {
        panic!("expected a hazard, got {e}")
    };
    let word = match **hazard {
        Hazard::MissingWait { .. } => "missing wait",
        Hazard::MissingBarrier { .. } => "missing barrier",
        Hazard::Deadlock { .. } => "deadlock",
    };
    assert!(text.contains(word) && text.contains("op #"), "{text}");
    assert!(text.contains("gemm_bf16"), "{text}");
}

#[test]
fn hip_refuses_a_gemm_with_a_missing_barrier() {
    let k = build(&GemmConfig::default()).unwrap();
    hip::lower(&k, Arch::Cdna4).expect("the intact kernel lowers");
    for arch in [Arch::Cdna4, Arch::Cdna3] {
        match hip::lower(&without_first_barrier(&k), arch) {
            Err(hip::LowerError::Schedule(e)) => assert_names_a_hazard(&e, &e.to_string()),
            Err(e) => panic!("{arch:?}: refused for another reason: {e}"),
            Ok(_) => panic!("{arch:?}: a racy kernel was lowered"),
        }
    }
}

#[test]
fn cuda_refuses_a_gemm_with_a_missing_barrier() {
    let k = build(&GemmConfig::for_gpu(kittens_hw::gpu("h100").unwrap())).unwrap();
    cuda::lower(&k).expect("the intact kernel lowers");
    match cuda::lower(&without_first_barrier(&k)) {
        Err(cuda::CudaLowerError::Schedule(e)) => assert_names_a_hazard(&e, &e.to_string()),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("a racy kernel was lowered"),
    }
}
