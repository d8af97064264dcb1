//! The batched LoRA kernels: a batch mixing four adapters (ranks 4, 16, 5 and 18, and 3 and
//! 17: some no multiple of 4, whose `B` the bank pads with zero columns, and a largest rank
//! that rounds up) and rows without one gets the same bits from one shrink and one expand of
//! both targets as from a shrink and an expand of each, each row the bits it has alone, the
//! values those of a CPU reference (whose fma chains stop at the rank), and the rows and
//! columns a product does not touch left as they are; for inputs of 40 features (the shrink
//! over groups of an adapter's rows, 16-byte loads) and of 42 (one output an invocation).

mod kernels_support;

use kernels_support::{Rng, bits};
use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::gpu::*;

/// Input features: a multiple of 4 (the grouped shrink) and not.
const KS: [usize; 2] = [40, 42];
const MAX_RANK: usize = 18;
/// Target 0 writes columns 3..73 (a ragged last quad), target 1 columns 73..78 (side by side,
/// as one expand takes them), of rows 80 wide.
const TARGETS: [(usize, usize); 2] = [(3, 70), (73, 5)];
const WIDTH: usize = 80;
/// Slot 1 leaves target 1 alone.
const RANKS: [[usize; 2]; 4] = [[4, 4], [16, 0], [5, 3], [18, 17]];
/// Slot 1's five rows take two of the shrink's groups of four.
const ROWS: [u32; 14] = [0, 1, NO_LORA, 2, 3, 1, 1, 0, 3, NO_LORA, 2, 1, 1, 0];

struct Adapter {
    /// Per target: A `[rank, K]`, B `[n, rank]`, rank, scale.
    targets: Vec<(Vec<f32>, Vec<f32>, usize, f32)>,
}

fn adapters(rng: &mut Rng, k: usize) -> Vec<Adapter> {
    RANKS
        .iter()
        .enumerate()
        .map(|(slot, ranks)| Adapter {
            targets: TARGETS
                .iter()
                .zip(ranks)
                .map(|(&(_, n), &r)| (rng.vec(r * k), rng.vec(n * r), r, 0.5 + slot as f32 * 0.25))
                .collect(),
        })
        .collect()
}

/// `y` after both targets' products for the rows `slots`: one shrink and one expand of both
/// targets (`together`), or a shrink and an expand of each.
fn run(ctx: &GpuContext, bank: &LoraBank, slots: &[u32], x: &[f32], y: &[f32], together: bool) -> Vec<f32> {
    let m = slots.len();
    let k = x.len() / m;
    let rows = ctx.tensor(Elem::U32, &[m]).unwrap();
    let runs: Vec<_> = if together {
        std::iter::once(0..TARGETS.len()).collect()
    } else {
        (0..TARGETS.len()).map(|t| t..t + 1).collect()
    };
    let shrunk = ctx.tensor(Elem::F32, &[m, runs[0].len() * bank.width()]).unwrap();
    let x = ctx.upload_f32(&[m, k], x).unwrap();
    let y = ctx.upload_f32(&[m, WIDTH], y).unwrap();
    let group_rows = lora_row_groups(slots);
    let groups = ctx.tensor(Elem::U32, &[group_rows.len(), LORA_GROUP_ROWS]).unwrap();
    let mut step = ctx.step();
    step.write_u32(&rows, slots).unwrap();
    step.write_u32(&groups, &group_rows.concat()).unwrap();
    let site = LoraSite { bank, rows: &rows, groups: &groups };
    for targets in runs {
        let shrunk = LoraShrunk { t: &shrunk, targets: targets.clone() };
        step.lora_shrink(site, &x, &shrunk).unwrap();
        let (col0, first) = TARGETS[targets.start];
        let columns = LoraColumns { col0, first, rest: TARGETS[1].1 };
        step.lora_expand(site, &shrunk, targets, &y, columns).unwrap();
    }
    let id = step.read(&y);
    step.submit().unwrap().f32s(id)
}

#[test]
fn a_run_of_targets_gives_each_row_its_bits_alone_and_the_reference_values() {
    let ctx = GpuContext::new(&gpu_options_from_env(&GpuOptions::default()).unwrap())
        .expect("a wgpu adapter (lavapipe in CI)");
    for k in KS {
        check(&ctx, k);
    }
}

/// The test over inputs of `k` features.
fn check(ctx: &GpuContext, k: usize) {
    let mut rng = Rng::new(54);
    let adapters = adapters(&mut rng, k);
    let slot_floats = TARGETS.iter().map(|&(_, n)| MAX_RANK * (n + k)).sum();
    let bank = ctx.lora_bank(RANKS.len(), TARGETS.len(), slot_floats, MAX_RANK).unwrap();
    for (slot, adapter) in adapters.iter().enumerate() {
        let targets: Vec<_> = adapter
            .targets
            .iter()
            .map(|(a, b, rank, scale)| {
                (*rank > 0).then_some(LoraMatrices { a, b, rank: *rank, scale: *scale })
            })
            .collect();
        bank.write_slot(ctx, slot, &targets).unwrap();
    }
    let m = ROWS.len();
    let x = rng.vec(m * k);
    let y = rng.vec(m * WIDTH);
    let batched = run(ctx, &bank, &ROWS, &x, &y, true);
    let apart = run(ctx, &bank, &ROWS, &x, &y, false);
    assert!(bits(&batched) == bits(&apart), "K {k}: both targets at once changed bits");
    for (r, &slot) in ROWS.iter().enumerate() {
        let row = |v: &[f32]| bits(&v[r * WIDTH..(r + 1) * WIDTH]);
        let (xr, yr) = (&x[r * k..(r + 1) * k], &y[r * WIDTH..(r + 1) * WIDTH]);
        let alone = run(ctx, &bank, &[slot], xr, yr, true);
        assert!(
            bits(&alone) == row(&batched),
            "K {k}: row {r} (slot {slot:#x}) alone differs from the batch"
        );
        // The CPU reference: the same fma chains, the delta's scale and add rounded apart.
        let mut want = yr.to_vec();
        if let Some(adapter) = adapters.get(slot as usize) {
            for (&(col0, n), (a, b, rank, scale)) in TARGETS.iter().zip(&adapter.targets) {
                let t: Vec<f32> = (0..*rank)
                    .map(|j| (0..k).fold(0.0f32, |acc, i| xr[i].mul_add(a[j * k + i], acc)))
                    .collect();
                for c in 0..n {
                    let acc = (0..*rank).fold(0.0f32, |acc, j| t[j].mul_add(b[c * rank + j], acc));
                    want[col0 + c] += acc * scale;
                }
            }
        }
        for (c, (&got, &want)) in batched[r * WIDTH..(r + 1) * WIDTH].iter().zip(&want).enumerate() {
            let untouched =
                slot == NO_LORA || !(3..78).contains(&c) || (c >= 73 && RANKS[slot as usize][1] == 0);
            if untouched {
                assert_eq!(got.to_bits(), yr[c].to_bits(), "K {k}: row {r} column {c} changed");
            }
            assert!(
                (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                "K {k}: row {r} column {c}: {got} vs {want}"
            );
        }
    }
}
