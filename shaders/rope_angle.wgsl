// The cosine and sine of RoPE's angle pos * inv_freq (an f32 product, as llama.cpp and
// transformers round it). GPUs' sin and cos lose accuracy as their argument grows (NVIDIA's
// were 2e-4 off at 4095 radians), so k = round(angle / 2 pi) turns are taken off first
// (Cody-Waite): 2 pi is split into parts of 6 significant bits and a last f32 part, so each
// k * part below 2^18 turns is exact, whether or not the driver fuses it into an fma, and the
// remainder stays within 2e-7 of the exact one for positions up to a million.
const TWO_PI_1: f32 = 6.25;
const TWO_PI_2: f32 = 0.0322265625;
const TWO_PI_3: f32 = 0.000946044921875;
const TWO_PI_4: f32 = 1.2699757462542038e-5;
const INV_TWO_PI: f32 = 0.15915493667125702;

fn rope_cos_sin(pos: u32, inv_freq: f32) -> vec2<f32> {
    let angle = f32(pos) * inv_freq;
    let k = round(angle * INV_TWO_PI);
    let r = angle - k * TWO_PI_1 - k * TWO_PI_2 - k * TWO_PI_3 - k * TWO_PI_4;
    return vec2<f32>(cos(r), sin(r));
}
