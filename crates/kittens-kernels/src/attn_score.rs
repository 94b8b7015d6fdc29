//! How an attention turns a score `q·k` into the softmax's logit: [`Logits`], any softmax scale and an
//! optional soft cap (FlashAttention's `softmax_scale` and `softcap`), shared by the forward, the
//! backward and their f64 references so that each says it once.
//!
//! The logit of a score `x` is `x·scale`, or with a soft cap `cap·tanh(x·scale/cap)` (Gemma 2,
//! Grok: logits bounded by `±cap`). Both are baked into the kernel as constants: the tile language's
//! parameters are integers only (docs/ir.md, `ParamDecl`), so each scale and cap builds its own kernel.
//! The scale still enters on the f32 scores, never on a bf16 operand (`crate::attn_fwd::ping_pong`'s
//! docs say why).
//!
//! The tile language has no `tanh`: the cap is `cap − 2·cap / (exp2(x·2·scale·log2(e)/cap) + 1)`,
//! five elementwise ops in place, exact at both ends (`exp2` over- or underflowing gives `±cap`).
//! A masked score (`−∞`) would become `−cap`, so every schedule applies the cap before its masks.

use crate::KernelError;
use kittens_ir::{KernelBuilder, RegId};
use std::f32::consts::LOG2_E;

/// The score-to-logit map of an attention (module docs). `Default`: scale `1/√d`, no cap.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Logits {
    /// The softmax scale; `None`: `1/√d` (FlashAttention's and PyTorch's default).
    pub scale: Option<f32>,
    /// The soft cap; `None`: logits uncapped (FlashAttention's `softcap=0.0`).
    pub softcap: Option<f32>,
}

impl Logits {
    /// Refuses a scale that is not finite and positive and a cap that is not finite and positive,
    /// naming the argument.
    pub fn check(&self) -> Result<(), KernelError> {
        if let Some(s) = self.scale {
            if !(s.is_finite() && s > 0.0) {
                return Err(KernelError::Problem(format!(
                    "scale: the softmax scale must be finite and positive, got {s}"
                )));
            }
        }
        if let Some(c) = self.softcap {
            if !(c.is_finite() && c > 0.0) {
                return Err(KernelError::Problem(format!(
                    "softcap: the soft cap must be finite and positive (leave it out for none), \
                     got {c}"
                )));
            }
        }
        Ok(())
    }

    /// The scale at head dimension `dim`.
    pub fn scale(&self, dim: u32) -> f32 {
        self.scale.unwrap_or_else(|| 1.0 / (dim as f32).sqrt())
    }

    /// The scale the softmax applies to what [`Self::cap`] leaves in the score tile: the scale
    /// itself without a cap, 1 with one (the capped tile holds logits).
    pub fn softmax_scale(&self, dim: u32) -> f32 {
        match self.softcap {
            Some(_) => 1.0,
            None => self.scale(dim),
        }
    }

    /// With a cap: the f32 scores `s` (unscaled `q·k`) become the capped logits in place; with
    /// `grad`, that tile also receives `d logit / d(x·scale) = 1 − tanh²` (what the backward
    /// multiplies dS by). Without a cap: nothing. Apply before any mask (module docs).
    pub fn cap(&self, k: &mut KernelBuilder, s: RegId, dim: u32, grad: Option<RegId>) {
        let Some(cap) = self.softcap else { return };
        // r = 1 / (exp(2u) + 1) with u = x·scale/cap; tanh(u) = 1 − 2r.
        k.mul(s, s, 2.0 * LOG2_E * self.scale(dim) / cap);
        k.exp2(s, s);
        k.add(s, s, 1.0f32);
        k.div(s, 1.0f32, s);
        if let Some(g) = grad {
            // 1 − tanh² = 1 − (1 − 2r)² = 4r·(1 − r).
            k.sub(g, 1.0f32, s);
            k.mul(g, g, s);
            k.mul(g, g, 4.0f32);
        }
        k.mul(s, s, -2.0 * cap);
        k.add(s, s, cap);
    }

    /// The exact logit of the score `x` at head dimension `dim`.
    pub fn f64(&self, x: f64, dim: usize) -> f64 {
        let s = x * f64::from(self.scale(dim as u32));
        match self.softcap {
            Some(c) => f64::from(c) * (s / f64::from(c)).tanh(),
            None => s,
        }
    }

    /// `d logit / dx` of [`Self::f64`].
    pub fn grad_f64(&self, x: f64, dim: usize) -> f64 {
        let scale = f64::from(self.scale(dim as u32));
        match self.softcap {
            Some(c) => {
                let t = (x * scale / f64::from(c)).tanh();
                scale * (1.0 - t * t)
            }
            None => scale,
        }
    }

    /// The logit the PyTorch way in f32 (`x·scale`, then `cap·tanh(·/cap)`), for the baselines.
    pub fn f32(&self, x: f32, dim: usize) -> f32 {
        let s = x * self.scale(dim as u32);
        match self.softcap {
            Some(c) => c * (s / c).tanh(),
            None => s,
        }
    }

    /// `d logit / dx` in f32, for the baselines.
    pub fn grad_f32(&self, x: f32, dim: usize) -> f32 {
        let scale = self.scale(dim as u32);
        match self.softcap {
            Some(c) => {
                let t = (x * scale / c).tanh();
                scale * (1.0 - t * t)
            }
            None => scale,
        }
    }
}
