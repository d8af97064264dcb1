// The types of the weight functions.

// Eight consecutive weights (or activations) of one row, dequantized to f32.
struct W8 {
    a: vec4<f32>,
    b: vec4<f32>,
}

// One block of 32 consecutive weights of one row (k = 32 b .. 32 b + 31), as four W8 groups.
struct W32 {
    g0: W8,
    g1: W8,
    g2: W8,
    g3: W8,
}

// Word `o` and the four words after it, read in one run (a block's scale word and its
// quants; `wl_head4` of the wsrc_*.wgsl files).
struct WHead4 {
    head: u32,
    q: vec4<u32>,
}

// Eight consecutive words (`wl8`).
struct WRun8 {
    lo: vec4<u32>,
    hi: vec4<u32>,
}

// Word `o` and the eight words after it (`wl_head8`).
struct WHead8 {
    head: u32,
    q0: vec4<u32>,
    q1: vec4<u32>,
}
