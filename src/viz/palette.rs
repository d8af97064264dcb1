//! Colours: a stable colour per request and one per block state.

use egui::Color32;

use crate::ids::RequestId;

/// Background of the whole window.
pub const BACKGROUND: Color32 = Color32::from_rgb(18, 20, 26);
/// Panels' background.
pub const PANEL: Color32 = Color32::from_rgb(26, 29, 37);
/// The null block.
pub const NULL_BLOCK: Color32 = Color32::from_rgb(6, 6, 8);
/// A free block that holds nothing worth keeping.
pub const FREE_BLOCK: Color32 = Color32::from_rgb(46, 50, 60);
/// A free block that still holds a cached prefix and can be hit.
pub const CACHED_FREE_BLOCK: Color32 = Color32::from_rgb(92, 104, 124);
/// The dot in the middle of a cached-free block.
pub const CACHED_FREE_DOT: Color32 = Color32::from_rgb(160, 176, 200);
/// The corner mark of a block shared by more than one request.
pub const SHARED_MARK: Color32 = Color32::WHITE;
/// Outline of the block under the pointer or selected.
pub const HIGHLIGHT: Color32 = Color32::from_rgb(255, 214, 64);
/// Preemption events and preempted requests.
pub const PREEMPT: Color32 = Color32::from_rgb(255, 92, 92);
/// Evictions.
pub const EVICT: Color32 = Color32::from_rgb(255, 160, 64);
/// Slots of proposed tokens waiting for verification (speculative decoding).
pub const PROPOSED: Color32 = Color32::from_rgb(120, 210, 255);
/// Slots of proposed tokens a verification rejected (speculative decoding).
pub const REJECTED: Color32 = Color32::from_rgb(255, 110, 200);
/// Prefix-cache hits.
pub const HIT: Color32 = Color32::from_rgb(96, 220, 140);
/// The host KV tier's used slots.
pub const HOST_USED: Color32 = Color32::from_rgb(72, 168, 200);
/// Host time per step hidden behind a running step (async scheduling's gain).
pub const HOST_HIDDEN: Color32 = Color32::from_rgb(96, 220, 140);
/// Host time per step exposed: the executor idle while the host works.
pub const HOST_EXPOSED: Color32 = Color32::from_rgb(255, 160, 64);
/// Ordinary text.
pub const TEXT: Color32 = Color32::from_rgb(210, 214, 222);
/// Secondary text.
pub const TEXT_DIM: Color32 = Color32::from_rgb(130, 136, 150);

/// The colour of a request: hues spread by the golden ratio so neighbours differ, saturated
/// and bright so they never look like a free or null block. The same id always gets the
/// same colour.
pub fn request_color(id: RequestId) -> Color32 {
    const GOLDEN: f64 = 0.618_033_988_749_895;
    let hue = (0.11 + id as f64 * GOLDEN).fract();
    let saturation = if id.is_multiple_of(2) { 0.70 } else { 0.58 };
    let value = if id.is_multiple_of(3) { 0.95 } else { 0.86 };
    hsv_to_rgb(hue, saturation, value)
}

/// HSV (each 0..=1, hue wrapping) to an opaque sRGB colour.
fn hsv_to_rgb(hue: f64, saturation: f64, value: f64) -> Color32 {
    let h = hue.rem_euclid(1.0) * 6.0;
    let sector = h.floor();
    let f = h - sector;
    let p = value * (1.0 - saturation);
    let q = value * (1.0 - saturation * f);
    let t = value * (1.0 - saturation * (1.0 - f));
    let (r, g, b) = match sector as u32 {
        0 => (value, t, p),
        1 => (q, value, p),
        2 => (p, value, t),
        3 => (p, q, value),
        4 => (t, p, value),
        _ => (value, p, q),
    };
    let byte = |x: f64| (x * 255.0).round().clamp(0.0, 255.0) as u8;
    Color32::from_rgb(byte(r), byte(g), byte(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_colors_are_stable_and_distinct_from_block_states() {
        assert_eq!(request_color(7), request_color(7));
        for id in 0..500 {
            let c = request_color(id);
            for state in [NULL_BLOCK, FREE_BLOCK, CACHED_FREE_BLOCK, SHARED_MARK] {
                let distance: i32 = [c.r(), c.g(), c.b()]
                    .iter()
                    .zip([state.r(), state.g(), state.b()])
                    .map(|(&a, b)| (a as i32 - b as i32).abs())
                    .sum();
                assert!(distance > 60, "request {id} colour {c:?} too close to {state:?}");
            }
        }
    }

    #[test]
    fn neighbouring_requests_differ() {
        for id in 0..100 {
            assert_ne!(request_color(id), request_color(id + 1));
        }
    }

    #[test]
    fn hsv_primaries() {
        assert_eq!(hsv_to_rgb(0.0, 1.0, 1.0), Color32::from_rgb(255, 0, 0));
        assert_eq!(hsv_to_rgb(1.0 / 3.0, 1.0, 1.0), Color32::from_rgb(0, 255, 0));
        assert_eq!(hsv_to_rgb(2.0 / 3.0, 1.0, 1.0), Color32::from_rgb(0, 0, 255));
    }
}
