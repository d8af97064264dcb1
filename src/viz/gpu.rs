//! The wgpu instance, adapter and device the visualizer draws with (its own, apart from the
//! engine's: drawing never competes with the model for a queue).

use crate::viz::VizError;

/// A device and its queue.
pub struct GpuHandles {
    /// The adapter the device came from.
    pub adapter: wgpu::Adapter,
    /// The device.
    pub device: wgpu::Device,
    /// Its queue.
    pub queue: wgpu::Queue,
}

/// An instance over the backends `WGPU_BACKEND` names, or Vulkan, Metal and DX12.
pub fn new_instance(display: Option<Box<dyn wgpu::wgt::WgpuHasDisplayHandle>>) -> wgpu::Instance {
    let mut descriptor = wgpu::InstanceDescriptor::new_without_display_handle();
    descriptor.backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY);
    descriptor.display = display;
    wgpu::Instance::new(descriptor)
}

/// An adapter (that can present to `surface`, when given) and a device with default limits.
pub fn request_device(
    instance: &wgpu::Instance,
    surface: Option<&wgpu::Surface<'_>>,
) -> Result<GpuHandles, VizError> {
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::LowPower,
        compatible_surface: surface,
        force_fallback_adapter: false,
        apply_limit_buckets: false,
    }))
    .map_err(|e| VizError::NoAdapter(e.to_string()))?;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("pagoda-viz"),
        required_limits: wgpu::Limits::downlevel_defaults().using_resolution(adapter.limits()),
        ..Default::default()
    }))
    .map_err(|e| VizError::Device(e.to_string()))?;
    Ok(GpuHandles { adapter, device, queue })
}

/// Uploads egui's new and changed textures; returns the textures to free once the frame
/// that used them is painted.
pub fn upload_textures(
    renderer: &mut egui_wgpu::Renderer,
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    mut delta: egui::TexturesDelta,
) -> Vec<egui::TextureId> {
    for (id, deltas) in delta.set.drain() {
        for image_delta in deltas {
            renderer.update_texture(device, queue, id, &image_delta);
        }
    }
    delta.free.drain().collect()
}
