//! One frame drawn into a texture and read back: the snapshot PNG and the pixel tests use
//! exactly the drawing code the window uses.

use std::path::Path;

use crate::viz::control::SimControl;
use crate::viz::gpu::{self, GpuHandles};
use crate::viz::state::VizState;
use crate::viz::ui::{self, FrameLayout, UiState};
use crate::viz::{VizError, palette};

/// Colour format of offscreen frames (gamma-space RGBA, as egui paints).
pub const FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8Unorm;

/// An RGBA8 image, rows top to bottom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgbaImage {
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// `width * height * 4` bytes.
    pub pixels: Vec<u8>,
}

impl RgbaImage {
    /// The pixel at `(x, y)`, or `None` outside the image.
    pub fn pixel(&self, x: u32, y: u32) -> Option<[u8; 4]> {
        if x >= self.width || y >= self.height {
            return None;
        }
        let i = ((y * self.width + x) * 4) as usize;
        Some([self.pixels[i], self.pixels[i + 1], self.pixels[i + 2], self.pixels[i + 3]])
    }

    /// Writes the image as a PNG.
    pub fn save_png(&self, path: &Path) -> Result<(), VizError> {
        let file = std::fs::File::create(path).map_err(|e| VizError::io(path, e))?;
        let mut encoder = png::Encoder::new(std::io::BufWriter::new(file), self.width, self.height);
        encoder.set_color(png::ColorType::Rgba);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(|e| VizError::Png(e.to_string()))?;
        writer.write_image_data(&self.pixels).map_err(|e| VizError::Png(e.to_string()))?;
        writer.finish().map_err(|e| VizError::Png(e.to_string()))
    }
}

/// Draws frames of a given size with no window and no display.
pub struct OffscreenRenderer {
    gpu: GpuHandles,
    renderer: egui_wgpu::Renderer,
    ctx: egui::Context,
    width: u32,
    height: u32,
}

impl OffscreenRenderer {
    /// A renderer for `width` x `height` pixel frames at one pixel per point.
    pub fn new(width: u32, height: u32) -> Result<Self, VizError> {
        if width == 0 || height == 0 {
            return Err(VizError::BadSize { width, height });
        }
        let instance = gpu::new_instance(None);
        let gpu = gpu::request_device(&instance, None)?;
        let max = gpu.device.limits().max_texture_dimension_2d;
        if width > max || height > max {
            return Err(VizError::BadSize { width, height });
        }
        let renderer = egui_wgpu::Renderer::new(&gpu.device, FORMAT, egui_wgpu::RendererOptions::PREDICTABLE);
        let ctx = egui::Context::default();
        ui::install_style(&ctx);
        Ok(Self { gpu, renderer, ctx, width, height })
    }

    /// Draws `state` and reads the frame back, with where the blocks went.
    pub fn render(
        &mut self,
        state: &VizState,
        control: Option<&SimControl>,
    ) -> Result<(RgbaImage, FrameLayout), VizError> {
        let screen =
            egui::Rect::from_min_size(egui::Pos2::ZERO, egui::vec2(self.width as f32, self.height as f32));
        let mut ui_state = UiState::default();
        let mut layout = FrameLayout::default();
        let mut shapes = Vec::new();
        let mut pixels_per_point = 1.0;
        let mut to_free = Vec::new();
        // The first pass lays out fonts and panel sizes; the second is the settled frame.
        for _ in 0..2 {
            let input = egui::RawInput { screen_rect: Some(screen), ..Default::default() };
            let output =
                self.ctx.run_ui(input, |root| layout = ui::draw(root, state, &mut ui_state, control));
            to_free.extend(gpu::upload_textures(
                &mut self.renderer,
                &self.gpu.device,
                &self.gpu.queue,
                output.textures_delta,
            ));
            shapes = output.shapes;
            pixels_per_point = output.pixels_per_point;
        }
        let primitives = self.ctx.tessellate(shapes, pixels_per_point);
        let image = self.paint(&primitives, pixels_per_point)?;
        for id in &to_free {
            self.renderer.free_texture(id);
        }
        Ok((image, layout))
    }

    fn paint(
        &mut self,
        primitives: &[egui::ClippedPrimitive],
        pixels_per_point: f32,
    ) -> Result<RgbaImage, VizError> {
        let device = &self.gpu.device;
        let size = wgpu::Extent3d { width: self.width, height: self.height, depth_or_array_layers: 1 };
        let target = device.create_texture(&wgpu::TextureDescriptor {
            label: Some("pagoda-viz-frame"),
            size,
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: FORMAT,
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
            view_formats: &[],
        });
        let view = target.create_view(&wgpu::TextureViewDescriptor::default());
        let screen =
            egui_wgpu::ScreenDescriptor { size_in_pixels: [self.width, self.height], pixels_per_point };
        let mut encoder =
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("pagoda-viz") });
        let extra = self.renderer.update_buffers(device, &self.gpu.queue, &mut encoder, primitives, &screen);
        {
            let pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
                label: Some("pagoda-viz-egui"),
                color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                    view: &view,
                    resolve_target: None,
                    depth_slice: None,
                    ops: wgpu::Operations {
                        load: wgpu::LoadOp::Clear(clear_color()),
                        store: wgpu::StoreOp::Store,
                    },
                })],
                ..Default::default()
            });
            self.renderer.render(&mut pass.forget_lifetime(), primitives, &screen);
        }
        let padded_row = (self.width * 4).next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("pagoda-viz-readback"),
            size: padded_row as u64 * self.height as u64,
            usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
            mapped_at_creation: false,
        });
        encoder.copy_texture_to_buffer(
            target.as_image_copy(),
            wgpu::TexelCopyBufferInfo {
                buffer: &readback,
                layout: wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(padded_row),
                    rows_per_image: Some(self.height),
                },
            },
            size,
        );
        self.gpu.queue.submit(extra.into_iter().chain([encoder.finish()]));
        let slice = readback.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |result| {
            // The receiver lives until recv below returns.
            let _ = tx.send(result);
        });
        device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| VizError::Device(e.to_string()))?;
        rx.recv()
            .map_err(|e| VizError::Device(e.to_string()))?
            .map_err(|e| VizError::Device(e.to_string()))?;
        let mapped = slice.get_mapped_range().map_err(|e| VizError::Device(e.to_string()))?;
        let mut pixels = Vec::with_capacity((self.width * self.height * 4) as usize);
        for row in mapped.chunks(padded_row as usize) {
            pixels.extend_from_slice(&row[..(self.width * 4) as usize]);
        }
        drop(mapped);
        readback.unmap();
        Ok(RgbaImage { width: self.width, height: self.height, pixels })
    }
}

/// The background colour as a wgpu clear colour (the target is gamma-space, so the bytes
/// convert directly).
pub fn clear_color() -> wgpu::Color {
    let c = palette::BACKGROUND;
    wgpu::Color { r: c.r() as f64 / 255.0, g: c.g() as f64 / 255.0, b: c.b() as f64 / 255.0, a: 1.0 }
}

/// Draws `state` offscreen at `width` x `height` and writes the PNG to `path`.
pub fn snapshot_png(state: &VizState, width: u32, height: u32, path: &Path) -> Result<FrameLayout, VizError> {
    let mut renderer = OffscreenRenderer::new(width, height)?;
    let (image, layout) = renderer.render(state, None)?;
    image.save_png(path)?;
    Ok(layout)
}
