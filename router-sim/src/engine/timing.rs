//! How long one engine pass takes: the reference mocker's published polynomial model.
//!
//! - Prefill of T uncached tokens (summed over the pass's prefill chunks):
//!   `4.209989e-7·T² + 1.518344e-2·T + 16.50142` ms.
//! - Decode with active KV fraction p (active blocks ÷ capacity, clamped to [0, 1]):
//!   `max(1, −25.74·p² + 54.01·p + 5.74)` ms.
//! - Both are divided by `speedup`; a speedup that is not a positive finite number means
//!   "unscaled" (1.0).
//!
//! A pass that has both prefill and decode work takes the **sum** of the two parts, as the
//! reference's pass does: a mixed batch pays for its prefill tokens and for its decode step.
//! A pass with neither takes no time. Each LoRA adapter loaded for the pass adds
//! [`LORA_LOAD_MS`]. Results are whole microseconds, rounded up, so a pass
//! with work always advances time.

/// Loading one LoRA adapter into a slot, in milliseconds before speedup.
pub const LORA_LOAD_MS: f64 = 30.0;

/// Prefill time of `tokens` uncached tokens in milliseconds, before speedup.
pub fn prefill_ms(tokens: u64) -> f64 {
    let t = tokens as f64;
    4.209989e-7 * t * t + 1.518344e-2 * t + 16.50142
}

/// Decode time of one pass at active KV fraction `p` in milliseconds, before speedup.
pub fn decode_ms(p: f64) -> f64 {
    let p = if p.is_finite() {
        p.clamp(0.0, 1.0)
    } else {
        1.0
    };
    (-25.74 * p * p + 54.01 * p + 5.74).max(1.0)
}

/// The divisor applied to every duration.
pub fn effective_speedup(speedup: f64) -> f64 {
    if speedup.is_finite() && speedup > 0.0 {
        speedup
    } else {
        1.0
    }
}

/// What one pass computed, for timing.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PassWork {
    /// Uncached prompt (or recomputed) tokens in the pass.
    pub prefill_tokens: u64,
    /// Sequences that decoded one token in the pass.
    pub decode_seqs: u64,
    /// Active KV blocks ÷ capacity during the pass.
    pub active_fraction: f64,
    /// LoRA adapters loaded for the pass.
    pub lora_loads: u64,
}

/// Duration of a pass in microseconds (sum of its prefill and decode parts, rounded up).
pub fn pass_duration_us(work: PassWork, speedup: f64) -> u64 {
    let mut ms = 0.0;
    if work.prefill_tokens > 0 {
        ms += prefill_ms(work.prefill_tokens);
    }
    if work.decode_seqs > 0 {
        ms += decode_ms(work.active_fraction);
    }
    ms += LORA_LOAD_MS * work.lora_loads as f64;
    let us = (ms * 1000.0 / effective_speedup(speedup)).ceil();
    if us <= 0.0 {
        0
    } else if us >= u64::MAX as f64 {
        u64::MAX
    } else {
        us as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefill_matches_the_published_magnitudes() {
        assert!((prefill_ms(512) - 24.3).abs() < 0.5);
        assert!((prefill_ms(2048) - 49.3).abs() < 0.5);
        assert!((prefill_ms(8192) - 169.1).abs() < 1.0);
    }

    #[test]
    fn decode_is_floored_and_clamped() {
        assert!((decode_ms(0.0) - 5.74).abs() < 1e-9);
        assert!((decode_ms(1.0) - 34.01).abs() < 1e-9);
        assert_eq!(decode_ms(2.0), decode_ms(1.0));
        assert_eq!(decode_ms(f64::NAN), decode_ms(1.0));
    }

    #[test]
    fn a_mixed_pass_pays_for_both_parts_and_speedup_divides() {
        let work = PassWork {
            prefill_tokens: 512,
            decode_seqs: 3,
            active_fraction: 0.5,
            lora_loads: 0,
        };
        let both = pass_duration_us(work, 1.0);
        let prefill_only = pass_duration_us(
            PassWork {
                decode_seqs: 0,
                ..work
            },
            1.0,
        );
        assert!(both > prefill_only);
        assert_eq!(pass_duration_us(work, 0.0), both, "0 means unscaled");
        assert!(pass_duration_us(work, 10.0) * 10 >= both);
        assert!(pass_duration_us(work, 10.0) * 10 < both + 10);
        assert_eq!(pass_duration_us(PassWork::default(), 1.0), 0);
        let loading = PassWork {
            lora_loads: 1,
            ..work
        };
        assert_eq!(
            pass_duration_us(loading, 1.0),
            both + (LORA_LOAD_MS * 1000.0) as u64
        );
    }
}
