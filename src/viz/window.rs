//! The live window: winit 0.30 + egui, drawn with wgpu through the same `ui::draw` as the
//! offscreen snapshot. It drains the feed about sixty times a second and asks the engine for
//! a fresh KV view each frame; it never makes the engine wait.

use std::sync::Arc;
use std::time::{Duration, Instant};

use winit::application::ApplicationHandler;
use winit::dpi::PhysicalSize;
use winit::event::WindowEvent;
use winit::event_loop::{ActiveEventLoop, ControlFlow, EventLoop};
use winit::window::{Window, WindowId};

use crate::viz::VizError;
use crate::viz::control::SimControl;
use crate::viz::feed::FeedReceiver;
use crate::viz::gpu::{self, GpuHandles};
use crate::viz::offscreen::clear_color;
use crate::viz::state::VizState;
use crate::viz::ui::{self, UiState};

/// Time between frames, about 60 a second.
const FRAME_INTERVAL: Duration = Duration::from_millis(16);

/// How the window opens and when it closes by itself.
#[derive(Debug, Clone)]
pub struct WindowOptions {
    /// Title bar text.
    pub title: String,
    /// Inner width, physical pixels.
    pub width: u32,
    /// Inner height, physical pixels.
    pub height: u32,
    /// Close by itself this long after the feed ended (for demos and tests); `None` stays
    /// open until closed.
    pub close_after_end: Option<Duration>,
}

impl Default for WindowOptions {
    fn default() -> Self {
        Self { title: "pagoda: KV cache".to_string(), width: 1280, height: 800, close_after_end: None }
    }
}

/// Opens the window and runs it until it is closed (or `close_after_end` passes). On Linux
/// it may run on any thread; elsewhere it must run on the main thread. Closing the window
/// stops `control`, so a driver thread can end too.
pub fn run_window(
    receiver: FeedReceiver,
    control: Option<Arc<SimControl>>,
    options: WindowOptions,
) -> Result<(), VizError> {
    let mut builder = EventLoop::builder();
    #[cfg(target_os = "linux")]
    {
        winit::platform::x11::EventLoopBuilderExtX11::with_any_thread(&mut builder, true);
        winit::platform::wayland::EventLoopBuilderExtWayland::with_any_thread(&mut builder, true);
    }
    let event_loop = builder.build().map_err(|e| VizError::Window(e.to_string()))?;
    let mut app = App {
        receiver,
        control,
        options,
        state: VizState::default(),
        ui_state: UiState::default(),
        graphics: None,
        error: None,
        ended_at: None,
    };
    let result = event_loop.run_app(&mut app).map_err(|e| VizError::Window(e.to_string()));
    if let Some(control) = &app.control {
        control.stop();
    }
    match app.error.take() {
        Some(error) => Err(error),
        None => result,
    }
}

struct Graphics {
    window: Arc<Window>,
    surface: wgpu::Surface<'static>,
    config: wgpu::SurfaceConfiguration,
    gpu: GpuHandles,
    renderer: egui_wgpu::Renderer,
    egui: egui_winit::State,
}

struct App {
    receiver: FeedReceiver,
    control: Option<Arc<SimControl>>,
    options: WindowOptions,
    state: VizState,
    ui_state: UiState,
    graphics: Option<Graphics>,
    error: Option<VizError>,
    ended_at: Option<Instant>,
}

impl App {
    fn fail(&mut self, event_loop: &ActiveEventLoop, error: VizError) {
        self.error = Some(error);
        event_loop.exit();
    }

    fn redraw(&mut self) -> Result<(), VizError> {
        let Some(g) = self.graphics.as_mut() else { return Ok(()) };
        self.receiver.drain_into(&mut self.state);
        self.receiver.request_frame();
        let input = g.egui.take_egui_input(&g.window);
        let ctx = g.egui.egui_ctx().clone();
        let (state, ui_state, control) = (&self.state, &mut self.ui_state, self.control.as_deref());
        let output = ctx.run_ui(input, |root| {
            ui::draw(root, state, ui_state, control);
        });
        g.egui.handle_platform_output(&g.window, output.platform_output);
        let to_free =
            gpu::upload_textures(&mut g.renderer, &g.gpu.device, &g.gpu.queue, output.textures_delta);
        let primitives = ctx.tessellate(output.shapes, output.pixels_per_point);
        let frame = match g.surface.get_current_texture() {
            wgpu::CurrentSurfaceTexture::Success(frame) | wgpu::CurrentSurfaceTexture::Suboptimal(frame) => {
                frame
            }
            wgpu::CurrentSurfaceTexture::Timeout | wgpu::CurrentSurfaceTexture::Occluded => return Ok(()),
            wgpu::CurrentSurfaceTexture::Outdated | wgpu::CurrentSurfaceTexture::Lost => {
                g.surface.configure(&g.gpu.device, &g.config);
                return Ok(());
            }
            wgpu::CurrentSurfaceTexture::Validation => {
                return Err(VizError::Device("the surface texture failed validation".to_string()));
            }
        };
        let view = frame.texture.create_view(&wgpu::TextureViewDescriptor::default());
        let screen = egui_wgpu::ScreenDescriptor {
            size_in_pixels: [g.config.width, g.config.height],
            pixels_per_point: output.pixels_per_point,
        };
        let device = &g.gpu.device;
        let mut encoder =
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("pagoda-viz") });
        let extra = g.renderer.update_buffers(device, &g.gpu.queue, &mut encoder, &primitives, &screen);
        {
            let pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
                label: Some("pagoda-viz-window"),
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
            g.renderer.render(&mut pass.forget_lifetime(), &primitives, &screen);
        }
        g.gpu.queue.submit(extra.into_iter().chain([encoder.finish()]));
        g.window.pre_present_notify();
        g.gpu.queue.present(frame);
        for id in &to_free {
            g.renderer.free_texture(id);
        }
        Ok(())
    }

    fn create_graphics(&self, event_loop: &ActiveEventLoop) -> Result<Graphics, VizError> {
        let attributes = Window::default_attributes()
            .with_title(self.options.title.clone())
            .with_inner_size(PhysicalSize::new(self.options.width, self.options.height));
        let window =
            Arc::new(event_loop.create_window(attributes).map_err(|e| VizError::Window(e.to_string()))?);
        let instance = gpu::new_instance(Some(Box::new(event_loop.owned_display_handle())));
        let surface =
            instance.create_surface(Arc::clone(&window)).map_err(|e| VizError::Window(e.to_string()))?;
        let gpu = gpu::request_device(&instance, Some(&surface))?;
        let caps = surface.get_capabilities(&gpu.adapter);
        let format = caps
            .formats
            .iter()
            .copied()
            .find(|f| !f.is_srgb())
            .or_else(|| caps.formats.first().copied())
            .ok_or_else(|| VizError::Window("the surface supports no format".to_string()))?;
        let size = window.inner_size();
        let config = wgpu::SurfaceConfiguration {
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT,
            format,
            color_space: wgpu::SurfaceColorSpace::Auto,
            width: size.width.max(1),
            height: size.height.max(1),
            desired_maximum_frame_latency: 2,
            present_mode: wgpu::PresentMode::AutoVsync,
            alpha_mode: wgpu::CompositeAlphaMode::Auto,
            view_formats: vec![],
        };
        surface.configure(&gpu.device, &config);
        let renderer = egui_wgpu::Renderer::new(&gpu.device, format, egui_wgpu::RendererOptions::default());
        let ctx = egui::Context::default();
        ui::install_style(&ctx);
        let max_texture_side = gpu.device.limits().max_texture_dimension_2d as usize;
        let egui = egui_winit::State::new(
            ctx,
            egui::ViewportId::ROOT,
            &window,
            Some(window.scale_factor() as f32),
            None,
            Some(max_texture_side),
        );
        Ok(Graphics { window, surface, config, gpu, renderer, egui })
    }
}

impl ApplicationHandler for App {
    fn resumed(&mut self, event_loop: &ActiveEventLoop) {
        if self.graphics.is_some() {
            return;
        }
        match self.create_graphics(event_loop) {
            Ok(graphics) => {
                graphics.window.request_redraw();
                self.graphics = Some(graphics);
            }
            Err(error) => self.fail(event_loop, error),
        }
    }

    fn window_event(&mut self, event_loop: &ActiveEventLoop, _id: WindowId, event: WindowEvent) {
        let Some(g) = self.graphics.as_mut() else { return };
        if g.egui.on_window_event(&g.window, &event).repaint {
            g.window.request_redraw();
        }
        match event {
            WindowEvent::CloseRequested => event_loop.exit(),
            WindowEvent::Resized(size) if size.width > 0 && size.height > 0 => {
                g.config.width = size.width;
                g.config.height = size.height;
                g.surface.configure(&g.gpu.device, &g.config);
                g.window.request_redraw();
            }
            WindowEvent::RedrawRequested => {
                if let Err(error) = self.redraw() {
                    self.fail(event_loop, error);
                }
            }
            _ => {}
        }
    }

    fn about_to_wait(&mut self, event_loop: &ActiveEventLoop) {
        if self.state.ended && self.ended_at.is_none() {
            self.ended_at = Some(Instant::now());
        }
        if let (Some(ended_at), Some(after)) = (self.ended_at, self.options.close_after_end)
            && ended_at.elapsed() >= after
        {
            event_loop.exit();
            return;
        }
        if let Some(g) = &self.graphics {
            g.window.request_redraw();
        }
        event_loop.set_control_flow(ControlFlow::WaitUntil(Instant::now() + FRAME_INTERVAL));
    }
}
