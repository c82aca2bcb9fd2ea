"""Public per-chip figures for the TPU generations the model knows.

Sources (public):
  * Google Cloud TPU system-architecture pages (cloud.google.com/tpu/docs/v4, /v5e, /v5p, /v6e):
    peak bf16 and int8 FLOP/s per chip, HBM bandwidth per chip.
  * "How To Scale Your Model", part 2 (How to think about TPUs), table of ICI bandwidth per link:
    one-way 4.5e10 B/s on v4 and v5e, 9e10 B/s on v5p and v6e (twice that bidirectionally).

Matmuls are priced per MXU pass, as the device runs them. The MXU multiplies bf16: a bf16 dot is
one pass, and so is a float32 dot at JAX's default precision (what the jit baselines run: a TPU
rounds its operands to bf16), so a product split into bf16 parts ("bf16x3": three dots) costs
three passes against the baseline's one and buys nothing. One pass runs at :data:`PASS_FLOPS` of
the bf16 peak, the efficiency fitted to the published example (below); a product that takes n
passes costs n of them. A float32 dot at HIGH precision is three passes and at HIGHEST six, as
the device runs them (the ``jax.lax.Precision`` docstring: "On TPU: performs float32
computations in 3 bfloat16 passes", "in 6"), and so are the dot algorithms BF16_BF16_F32_X3 and
_X6; a 32-bit integer dot is six, as a HIGHEST float32 one (the published example's arrays are
int32: :func:`.cost.mxu_passes`). The precision changes nothing on the CPU where the values are
checked, but six passes against the baseline's one is what a TPU would time. int8 runs at the
int8 rate in proportion.

Elementwise arithmetic and reductions run on the vector unit (VPU), not the MXU: an (8, 128) array
of lanes with 4 ALUs each, one f32 operation per ALU and cycle. Its rate is 4096 operations per
cycle per TensorCore times the clock, the clock read off the published bf16 peak (peak / (MXUs x
128 x 128 x 2)): about 1.05 GHz on v4 (2 cores), 1.5 GHz on v5e (1 core), 1.75 GHz on v5p (2
cores) and v6e (1 core). So a product written as multiply-and-sum runs ~20-60x slower than on the
MXU, as it does on the chip.

Two figures are calibrated rather than read off a data sheet (see ``benchmarks/calibrate_tpumodel.py``):
  * ``MXU_EFFICIENCY``: the fraction of the bf16 peak one MXU pass of a well-shaped matmul
    reaches. The published v5e example (int32 [512, 2048] @ [2048, 2048] per chip, six bf16
    passes on the device, in 224 us: 4.3 GFLOP at about 19 TFLOP/s, six passes' worth) gives
    0.58 of the six-pass rate (bf16 peak / 6), so one pass at 0.58 of the bf16 peak, about 115
    TFLOP/s on a v5e: a bf16 dot or a float32 one at default precision runs there, and the
    example's six passes take 6x as long (the model: 226 us, +0.9%).
  * XLA's own monolithic collectives (all-gather, reduce-scatter, all-reduce) are modeled as a
    ring that streams over one link direction: the published profile's 3 MiB all-gather over 4
    v5e chips takes ~87 us, about 3 MiB / 45 GB/s plus latency.
"""
from __future__ import annotations

from dataclasses import dataclass

#: achieved fraction of the MXU peak on a large matmul (calibrated on the published v5e figures:
#: six passes at this fraction of the bf16 peak take the example's 224 us)
MXU_EFFICIENCY = 0.58
#: the fraction of the bf16 peak one MXU pass runs at: a dot of n passes takes n times as long
PASS_FLOPS = MXU_EFFICIENCY
#: fixed cost of launching one fused kernel on the TensorCore, seconds
KERNEL_OVERHEAD_S = 0.5e-6
#: fixed cost of one ring step / one point-to-point transfer over ICI, seconds
ICI_LATENCY_S = 1.0e-6
#: link directions XLA's monolithic collectives stream over (calibrated, see module docstring)
XLA_COLLECTIVE_DIRECTIONS = 1


@dataclass(frozen=True)
class Chip:
    name: str
    bf16_flops: float  # peak dense bf16 FLOP/s per chip
    int8_flops: float  # peak int8 OP/s per chip
    hbm_bw: float  # bytes/s per chip
    ici_bw: float  # bytes/s per link, one direction
    vpu_ops: float  # elementwise operations/s on the vector unit, per chip
    source: str

    def matmul_flops(self, dtype: str) -> float:
        """Achievable matmul FLOP/s for operands of this HLO element type, per MXU pass: one
        pass (:data:`PASS_FLOPS` of the bf16 peak) for bf16, f16, f32 and s32 alike (a
        float32 matmul at HIGH or HIGHEST takes 3 or 6 of them, an int32 one 6:
        :func:`.cost.mxu_passes`); int8 and 8-bit floats at the int8 rate in proportion."""
        rate = self.bf16_flops * PASS_FLOPS
        if dtype in ("s8", "u8", "s4", "u4") or dtype.startswith("f8"):
            rate *= self.int8_flops / self.bf16_flops
        return rate


CHIPS: dict[str, Chip] = {
    "v4": Chip("v4", bf16_flops=2.75e14, int8_flops=2.75e14, hbm_bw=1.2e12, ici_bw=4.5e10,
               vpu_ops=2 * 4096 * 1.05e9,
               source="cloud.google.com/tpu/docs/v4: 275 TFLOP/s bf16, 1200 GB/s HBM; "
                      "scaling book part 2: 4.5e10 B/s per link one-way"),
    "v5e": Chip("v5e", bf16_flops=1.97e14, int8_flops=3.94e14, hbm_bw=8.19e11, ici_bw=4.5e10,
                vpu_ops=4096 * 1.5e9,
                source="cloud.google.com/tpu/docs/v5e: 197 TFLOP/s bf16, 394 TOP/s int8, "
                       "819 GB/s HBM; scaling book part 2: 4.5e10 B/s per link one-way"),
    "v5p": Chip("v5p", bf16_flops=4.59e14, int8_flops=9.18e14, hbm_bw=2.765e12, ici_bw=9e10,
                vpu_ops=2 * 4096 * 1.75e9,
                source="cloud.google.com/tpu/docs/v5p: 459 TFLOP/s bf16, 918 TOP/s int8, "
                       "2765 GB/s HBM; scaling book part 2: 9e10 B/s per link one-way"),
    "v6e": Chip("v6e", bf16_flops=9.18e14, int8_flops=1.836e15, hbm_bw=1.64e12, ici_bw=9e10,
                vpu_ops=4096 * 1.75e9,
                source="cloud.google.com/tpu/docs/v6e: 918 TFLOP/s bf16, 1836 TOP/s int8, "
                       "1640 GB/s HBM; scaling book part 2: 9e10 B/s per link one-way"),
}

DEFAULT_CHIP = "v5e"


def get_chip(name: str | Chip | None) -> Chip:
    if isinstance(name, Chip):
        return name
    key = (name or DEFAULT_CHIP).lower().replace("tpu", "").strip(" -_")
    if key not in CHIPS:
        raise KeyError(f"unknown TPU generation {name!r}; known: {sorted(CHIPS)}")
    return CHIPS[key]
