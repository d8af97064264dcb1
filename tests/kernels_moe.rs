//! The mixture-of-experts kernels: the device's routing (`Step::moe_route`) against the
//! router's rule on the host (`MoeConfig::route`): the same experts in the same order, weights
//! within 1e-6, for each rule, with ties and a shared expert's gate; and a token's routing
//! the same bits whatever rows are routed beside it; the experts' views of a stacked weight and
//! the linear by expert ids (llama.cpp's `mul_mat_id`) against each expert's own weight, bitwise.

mod kernels_support;

use kernels_support::{Rng, bits};

use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::gpu::*;
use pagoda::model::moe::{MoeConfig, RouterRule};

fn ctx() -> GpuContext {
    GpuContext::new(&gpu_options_from_env(&GpuOptions::default()).unwrap())
        .expect("a wgpu adapter (lavapipe in CI)")
}

/// Routes the rows of `logits` (`[rows, routing.logits_width()]`) on the device: the ids,
/// weights (slot-major, slot `s` of row `t` at `s * rows + t`) and shared gates.
fn route_gpu(c: &GpuContext, routing: MoeRouting, logits: &[f32]) -> (Vec<u32>, Vec<f32>, Vec<f32>) {
    let rows = logits.len() / routing.logits_width();
    let lt = c.upload_f32(&[rows, routing.logits_width()], logits).unwrap();
    let ids = c.tensor(Elem::U32, &[routing.k * rows]).unwrap();
    let weights = c.tensor(Elem::U32, &[routing.k * rows]).unwrap();
    let gates = c.tensor(Elem::U32, &[rows]).unwrap();
    let mut step = c.step();
    step.moe_route(&lt, routing, &ids, &weights, &gates).unwrap();
    let bad = c.tensor(Elem::U32, &[routing.k * rows + 1]).unwrap();
    assert!(matches!(step.moe_route(&lt, routing, &bad, &weights, &gates), Err(GpuError::Shape(_))));
    let (ir, wr, gr) = (step.read(&ids), step.read(&weights), step.read(&gates));
    let mut res = step.submit().unwrap();
    let f32s = |v: Vec<u32>| v.into_iter().map(f32::from_bits).collect();
    (res.u32s(ir), f32s(res.u32s(wr)), f32s(res.u32s(gr)))
}

/// Routes `logits` (`[rows, experts]`, a shared gate logit appended per row when `gates`) on
/// the device and asserts each row's ids equal `route`'s and its weights lie within 1e-6.
fn assert_routes_as_the_host(c: &GpuContext, moe: &MoeConfig, logits: &[f32], gates: Option<&[f32]>) {
    let e = moe.num_experts;
    let rows = logits.len() / e;
    let routing = moe.routing();
    assert_eq!(routing.shared, gates.is_some());
    let mut packed = Vec::with_capacity(rows * routing.logits_width());
    for (r, row) in logits.chunks_exact(e).enumerate() {
        packed.extend_from_slice(row);
        packed.extend(gates.map(|g| g[r]));
    }
    let (got_ids, got_w, got_gates) = route_gpu(c, routing, &packed);
    for (r, row) in logits.chunks_exact(e).enumerate() {
        let want = moe.route(row);
        let got: Vec<u32> = (0..routing.k).map(|s| got_ids[s * rows + r]).collect();
        assert_eq!(got, want.iter().map(|w| w.0 as u32).collect::<Vec<_>>(), "row {r} of {:?}", moe.rule);
        for (slot, &(_, w)) in want.iter().enumerate() {
            let g = got_w[slot * rows + r];
            assert!((g - w).abs() <= 1e-6, "row {r} slot {slot} {:?}: {g} vs {w}", moe.rule);
        }
        if let Some(gates) = gates {
            let want = 1.0 / (1.0 + (-gates[r]).exp());
            assert!((got_gates[r] - want).abs() <= 1e-6, "row {r} shared gate: {} vs {want}", got_gates[r]);
        }
    }
}

#[test]
fn the_device_routes_as_the_host_rule_for_every_rule_with_ties() {
    let c = ctx();
    let (rows, e) = (37, 16);
    let mut logits: Vec<f32> = Rng::new(3).vec(rows * e).iter().map(|v| v * 4.0).collect();
    // ties: to the lower expert, inside the top k and across its edge
    logits[3] = 9.0;
    logits[5] = 9.0;
    for x in &mut logits[e..2 * e] {
        *x = 0.5;
    }
    logits[2 * e + 7] = 1.0;
    logits[2 * e + 2] = 1.0;
    logits[2 * e + 11] = 1.0;
    let gates: Vec<f32> = Rng::new(4).vec(rows).iter().map(|v| v * 6.0).collect();
    for rule in [
        RouterRule::SoftmaxTopK { renormalize: false },
        RouterRule::SoftmaxTopK { renormalize: true },
        RouterRule::TopKSoftmax,
    ] {
        for (k, shared) in [(1, false), (2, false), (4, true), (16, false)] {
            let moe = MoeConfig {
                num_experts: e,
                experts_per_token: k,
                expert_intermediate_size: 8,
                rule,
                shared_expert_intermediate_size: shared.then_some(8),
            };
            assert_routes_as_the_host(&c, &moe, &logits, shared.then_some(gates.as_slice()));
        }
    }
}

#[test]
fn a_tokens_routing_has_the_same_bits_whatever_rows_beside_it() {
    let c = ctx();
    let routing = MoeRouting { experts: 12, k: 3, rule: RouteRule::SoftmaxTopKRenormalized, shared: true };
    let (rows, lw, k) = (70, routing.logits_width(), routing.k);
    let logits: Vec<f32> = Rng::new(9).vec(rows * lw).iter().map(|v| v * 5.0).collect();
    let (all_ids, all_w, all_gates) = route_gpu(&c, routing, &logits);
    for range in [5..6, 64..70, 0..3] {
        let n = range.len();
        let (ids, w, gates) = route_gpu(&c, routing, &logits[range.start * lw..range.end * lw]);
        for s in 0..k {
            let whole = s * rows + range.start..s * rows + range.end;
            assert_eq!(ids[s * n..(s + 1) * n], all_ids[whole.clone()], "rows {range:?} slot {s}");
            assert_eq!(bits(&w[s * n..(s + 1) * n]), bits(&all_w[whole]), "rows {range:?} slot {s}");
        }
        assert_eq!(bits(&gates), bits(&all_gates[range.clone()]), "rows {range:?}");
    }
}

/// `y = x · wᵀ` (or the gated product, SiLU) for `m` rows of `x`.
fn linear_gpu(c: &GpuContext, w: &Weight, x: &[f32], m: usize) -> Vec<f32> {
    let xt = c.upload_f32(&[m, w.cols()], x).unwrap();
    let out = c.tensor(Elem::F32, &[m, w.rows()]).unwrap();
    let mut step = c.step();
    match w.is_gated() {
        true => step.linear_gated(&xt, w, GateActivation::Silu, &out).unwrap(),
        false => step.linear(&xt, w, &out).unwrap(),
    }
    let id = step.read(&out);
    step.submit().unwrap().f32s(id)
}

/// `y = x · wᵀ` (or the gated product) for the rows of `x`, row `i` through expert `ids[i]`'s
/// rows of the stack `w` is a view of.
fn linear_by_id_gpu(c: &GpuContext, w: &Weight, x: &[f32], ids: &[u32]) -> Vec<f32> {
    let m = ids.len();
    let xt = c.upload_f32(&[m, w.cols()], x).unwrap();
    let it = c.upload_u32(&[m], ids).unwrap();
    let out = c.tensor(Elem::F32, &[m, w.rows()]).unwrap();
    let input = LinearInput::ExpertRows { x: &xt, ids: &it };
    let mut step = c.step();
    match w.is_gated() {
        true => step.linear_gated(input, w, GateActivation::Silu, &out).unwrap(),
        false => step.linear(input, w, &out).unwrap(),
    }
    let id = step.read(&out);
    step.submit().unwrap().f32s(id)
}

/// Each expert's view of a stacked weight (plain and gated) gives the bits of that expert's
/// weight uploaded alone, in the GEMV (one row) and the GEMM (more), for a few weight types;
/// and a linear by ids (each row its own expert's rows, as a decoding token's pairs with its
/// experts are) gives each row the bits of its expert's view.
#[test]
fn an_experts_view_of_a_stacked_weight_has_the_bits_of_its_own_weight() {
    use pagoda::dtype::{DType, quantize};
    let c = ctx();
    let (experts, rows, cols) = (3, 24, 256);
    for dtype in [DType::F16, DType::Q4K, DType::Q8_0] {
        let quant = |seed| quantize(dtype, &Rng::new(seed).vec(experts * rows * cols));
        let (gate, up) = (quant(11), quant(12));
        let bytes = gate.len() / experts;
        let plain = c.upload_stacked_weight("plain", dtype, experts, rows, cols, &[&gate]).unwrap().unwrap();
        let gated =
            c.upload_stacked_weight("gated", dtype, experts, rows, cols, &[&gate, &up]).unwrap().unwrap();
        assert_eq!((plain.len(), gated.len()), (experts, experts));
        for e in 0..experts {
            let (g, u) = (&gate[e * bytes..(e + 1) * bytes], &up[e * bytes..(e + 1) * bytes]);
            let alone = c.upload_weight("alone", dtype, rows, cols, g).unwrap();
            let alone_gated = c.upload_gated_weight("alone_gated", dtype, rows, cols, g, u).unwrap();
            for m in [1, 9] {
                let x = Rng::new(20 + m as u64).vec(m * cols);
                let what = format!("{dtype:?} expert {e} of {m} rows");
                assert_eq!(
                    bits(&linear_gpu(&c, &plain[e], &x, m)),
                    bits(&linear_gpu(&c, &alone, &x, m)),
                    "{what}"
                );
                assert_eq!(
                    bits(&linear_gpu(&c, &gated[e], &x, m)),
                    bits(&linear_gpu(&c, &alone_gated, &x, m)),
                    "{what}, gated"
                );
            }
        }
        // 7 rows over the experts, one twice in a row and one unused by the rows around it
        let ids = [2, 0, 0, 1, 2, 1, 0];
        let x = Rng::new(30).vec(ids.len() * cols);
        for stack in [&plain, &gated] {
            let by_id = linear_by_id_gpu(&c, &stack[1], &x, &ids);
            for (i, &e) in ids.iter().enumerate() {
                let alone = linear_gpu(&c, &stack[e as usize], &x[i * cols..(i + 1) * cols], 1);
                assert_eq!(bits(&by_id[i * rows..(i + 1) * rows]), bits(&alone), "{dtype:?} row {i} by id");
            }
        }
        let own = c.upload_weight("own", dtype, rows, cols, &gate[..bytes]).unwrap();
        let xt = c.upload_f32(&[1, cols], &x[..cols]).unwrap();
        let (it, out) = (c.upload_u32(&[1], &[0]).unwrap(), c.tensor(Elem::F32, &[1, rows]).unwrap());
        let refused = c.step().linear(LinearInput::ExpertRows { x: &xt, ids: &it }, &own, &out);
        assert!(matches!(refused, Err(GpuError::Shape(_))), "a weight of its own has no experts to pick");
    }
}

/// `y = x · wᵀ + bias` for `m` rows of `x` (row `i` through expert `ids[i]`'s rows of the
/// stack `w` is a view of, and its row of stacked biases, when `ids` is given).
fn linear_bias_gpu(
    c: &GpuContext,
    w: &Weight,
    bias: &Tensor,
    x: &[f32],
    m: usize,
    ids: Option<&[u32]>,
) -> Vec<f32> {
    let xt = c.upload_f32(&[m, w.cols()], x).unwrap();
    let out = c.tensor(Elem::F32, &[m, w.rows()]).unwrap();
    let it = ids.map(|ids| c.upload_u32(&[m], ids).unwrap());
    let input = match &it {
        Some(ids) => LinearInput::ExpertRows { x: &xt, ids },
        None => LinearInput::Plain(&xt),
    };
    let mut step = c.step();
    step.linear_into(input, w, Some(bias), &out, 0).unwrap();
    let id = step.read(&out);
    step.submit().unwrap().f32s(id)
}

/// gpt-oss's biased experts: an expert's view with the experts' stacked `[E, N]` biases adds
/// its own row (the bits of its weight uploaded alone with that row as its own bias, and of
/// the product plus that row added on the host), in the GEMV and the GEMM; by ids each row
/// adds its expert's row; stacked biases for a weight of its own, or of another width, are
/// refused.
#[test]
fn a_biased_expert_adds_its_row_of_the_stacked_biases_by_view_and_by_id() {
    use pagoda::dtype::{DType, quantize};
    let c = ctx();
    let (experts, rows, cols) = (3, 24, 256);
    let biases = Rng::new(40).vec(experts * rows);
    let stacked_bias = c.upload_f32(&[experts, rows], &biases).unwrap();
    for dtype in [DType::F32, DType::MXFP4, DType::Q8_0] {
        let gate = quantize(dtype, &Rng::new(41).vec(experts * rows * cols));
        let bytes = gate.len() / experts;
        let stack = c.upload_stacked_weight("stack", dtype, experts, rows, cols, &[&gate]).unwrap().unwrap();
        for (e, view) in stack.iter().enumerate() {
            let own_bias = c.upload_f32(&[rows], &biases[e * rows..(e + 1) * rows]).unwrap();
            let alone =
                c.upload_weight("alone", dtype, rows, cols, &gate[e * bytes..(e + 1) * bytes]).unwrap();
            for m in [1, 9] {
                let x = Rng::new(50 + m as u64).vec(m * cols);
                let what = format!("{dtype:?} expert {e} of {m} rows");
                let by_view = linear_bias_gpu(&c, view, &stacked_bias, &x, m, None);
                assert_eq!(
                    bits(&by_view),
                    bits(&linear_bias_gpu(&c, &alone, &own_bias, &x, m, None)),
                    "{what}"
                );
                let added: Vec<f32> = linear_gpu(&c, &alone, &x, m)
                    .iter()
                    .enumerate()
                    .map(|(i, y)| y + biases[e * rows + i % rows])
                    .collect();
                assert_eq!(bits(&by_view), bits(&added), "{what}: the product plus its row");
            }
        }
        let ids = [2, 0, 0, 1, 2, 1, 0];
        let x = Rng::new(60).vec(ids.len() * cols);
        let by_id = linear_bias_gpu(&c, &stack[1], &stacked_bias, &x, ids.len(), Some(&ids));
        for (i, &e) in ids.iter().enumerate() {
            let row = &x[i * cols..(i + 1) * cols];
            let alone = linear_bias_gpu(&c, &stack[e as usize], &stacked_bias, row, 1, None);
            assert_eq!(bits(&by_id[i * rows..(i + 1) * rows]), bits(&alone), "{dtype:?} row {i} by id");
        }
        let own = c.upload_weight("own", dtype, rows, cols, &gate[..bytes]).unwrap();
        let xt = c.upload_f32(&[1, cols], &x[..cols]).unwrap();
        let out = c.tensor(Elem::F32, &[1, rows]).unwrap();
        let refused = c.step().linear_into(&xt, &own, Some(&stacked_bias), &out, 0);
        assert!(matches!(refused, Err(GpuError::Shape(_))), "a weight of its own has no row of the experts'");
        let narrow = c.upload_f32(&[experts, rows - 1], &biases[..experts * (rows - 1)]).unwrap();
        let refused = c.step().linear_into(&xt, &stack[0], Some(&narrow), &out, 0);
        assert!(matches!(refused, Err(GpuError::Shape(_))), "biases of another width");
    }
}
