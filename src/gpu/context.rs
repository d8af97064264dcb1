//! The device: instance, adapter and device creation, and the pipeline cache.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rustc_hash::FxBuildHasher;

use super::GpuError;
use super::caps::Capabilities;
use super::counters::{CounterCells, GpuCounters};
use super::error_scopes::ErrorScopes;
use super::kernel_timer::{KernelTimer, KernelTimes};
use super::linear_coop::adapter_offer;
use super::options::{FeatureMask, GpuOptions, LinearStrategy};
use super::pool::size_class;
use super::resident::Resident;
use super::resource::{DeviceBuffer, ResourceId};
use super::shader::reflect::{Composed, Reflection};
use super::shader::{KernelVariant, LinearPath, LinearPrologue, WeightSource, XLoad};

/// An opened wgpu device with pagoda's capabilities and compiled pipelines.
pub struct GpuContext {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    caps: Capabilities,
    pipelines: Mutex<HashMap<KernelVariant, Kernel, FxBuildHasher>>,
    health: Arc<DeviceHealth>,
    invalid_next_submit: AtomicBool,
    resident: Mutex<Resident>,
    counters: CounterCells,
    /// Device time per kernel, when asked for ([`GpuOptions::profile_kernels`]).
    kernel_timer: Option<Mutex<KernelTimer>>,
}

/// What the device reported outside any error scope: that it was lost, or an error no
/// scope caught (wgpu's default handler would panic on it).
#[derive(Debug, Default)]
struct DeviceHealth {
    lost: Mutex<Option<String>>,
    uncaptured: Mutex<Option<String>>,
}

impl DeviceHealth {
    fn set(slot: &Mutex<Option<String>>, message: String) {
        let mut slot = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        slot.get_or_insert(message);
    }

    fn lost(&self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    fn take_uncaptured(&self) -> Option<String> {
        self.uncaptured.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take()
    }
}

/// A compiled kernel variant, the layout of its bind group 0 and what naga reflected of its
/// shader (the slot of each binding by name).
#[derive(Debug, Clone)]
pub(crate) struct Kernel {
    /// Names the pipeline in bind-group keys.
    pub(crate) id: ResourceId,
    /// What it was compiled from (names it in kernel times).
    pub(crate) variant: KernelVariant,
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) layout: wgpu::BindGroupLayout,
    pub(crate) reflection: Arc<Reflection>,
}

/// The adapter `options` name, else the high-performance one, on Vulkan, Metal and DX12
/// unless asked otherwise (probing GL only adds noise and an adapter without f16 or
/// subgroups).
fn open_adapter(options: &GpuOptions) -> Result<wgpu::Adapter, GpuError> {
    let backends = options.backend.map_or(wgpu::Backends::PRIMARY, |b| b.backends());
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    match &options.adapter {
        Some(choice) => pick_adapter(pollster::block_on(instance.enumerate_adapters(backends)), choice),
        None => pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        }))
        .map_err(|e| GpuError::NoAdapter(e.to_string())),
    }
}

/// The device's health, set from its lost and uncaptured-error callbacks (each logged).
fn watch_health(device: &wgpu::Device) -> Arc<DeviceHealth> {
    let health = Arc::new(DeviceHealth::default());
    let on_lost = Arc::clone(&health);
    device.set_device_lost_callback(move |reason, message| {
        tracing::error!(?reason, %message, "the GPU device was lost");
        DeviceHealth::set(&on_lost.lost, format!("{reason:?}: {message}"));
    });
    let on_error = Arc::clone(&health);
    device.on_uncaptured_error(Arc::new(move |error| {
        tracing::error!(%error, "GPU error outside any error scope");
        DeviceHealth::set(&on_error.uncaptured, error.to_string());
    }));
    health
}

/// A [`GpuError::BadOption`] where `options` force what the device opened as `caps` cannot
/// do: weight textures on the K-split path, a GEMM tile past its workgroup memory, kernel
/// timing without timestamp queries.
fn check_options(caps: &Capabilities, options: &GpuOptions) -> Result<(), GpuError> {
    check_coop(caps, options)?;
    if options.weight_source == Some(WeightSource::Texture)
        && !matches!(caps.linear_path(), LinearPath::Sequential { .. })
    {
        return Err(GpuError::BadOption("weight textures need the sequential linear path".into()));
    }
    if let Some(rows) = options.gemm_rows.map(|r| r.rows())
        && caps.linear_path() == LinearPath::KSplit
        && !caps.gemm_fits(rows)
    {
        return Err(GpuError::BadOption(format!(
            "a GEMM tile of {rows} rows needs more than the device's {} bytes of workgroup memory",
            caps.limits.max_compute_workgroup_storage_size
        )));
    }
    if options.profile_kernels && !caps.timestamp_query {
        return Err(GpuError::BadOption("timing kernels needs the adapter's timestamp queries".into()));
    }
    Ok(())
}

/// A [`GpuError::Unsupported`] where `options` force cooperative matrices the device cannot
/// run: the adapter's where it offers none ([`Capabilities::coop`] says why), emulated ones
/// without subgroups, or tiles (with a forced fused norm) past its workgroup memory.
fn check_coop(caps: &Capabilities, options: &GpuOptions) -> Result<(), GpuError> {
    let unsupported = |why: String| Err(GpuError::Unsupported(format!("cooperative-matrix linears: {why}")));
    match (options.linear_strategy, &caps.coop) {
        (Some(LinearStrategy::Coop), Err(why)) => return unsupported(why.clone()),
        (Some(LinearStrategy::CoopEmulated(_)), _) if !caps.subgroup => {
            return unsupported("the emulation needs subgroups".into());
        }
        _ => {}
    }
    let path = caps.linear_path();
    if !matches!(path, LinearPath::Coop { .. }) {
        return Ok(());
    }
    for kernel in path.kernels() {
        let prologue = if caps.fuses_norms(kernel) { LinearPrologue::RmsNorm } else { LinearPrologue::Plain };
        // The weight type and the epilogue do not change the memory.
        let variant = KernelVariant::Linear {
            dtype: crate::dtype::DType::F16,
            source: WeightSource::Buffer,
            path,
            kernel,
            x_load: XLoad::Words,
            tree: caps.linear_tree(kernel),
            prologue,
            epilogue: super::shader::LinearEpilogue::Store,
        };
        let need = variant.reflect()?.workgroup_bytes;
        let have = caps.limits.max_compute_workgroup_storage_size;
        if need > have {
            return unsupported(format!(
                "{} needs {need} bytes of workgroup memory, the device has {have}",
                variant.label()
            ));
        }
    }
    Ok(())
}

fn pick_adapter(adapters: Vec<wgpu::Adapter>, choice: &str) -> Result<wgpu::Adapter, GpuError> {
    let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
    let found = match choice.trim().parse::<usize>() {
        Ok(index) => adapters.into_iter().nth(index),
        Err(_) => {
            let needle = choice.to_ascii_lowercase();
            adapters.into_iter().find(|a| a.get_info().name.to_ascii_lowercase().contains(&needle))
        }
    };
    found.ok_or_else(|| {
        GpuError::NoAdapter(format!("no adapter matches `{choice}`; found: {}", names.join(", ")))
    })
}

impl GpuContext {
    /// Opens a device as `options` say, with the adapter's own limits (or WebGPU's defaults
    /// when asked) and the optional features it has, less the masked ones.
    pub fn new(options: &GpuOptions) -> Result<Self, GpuError> {
        let adapter = open_adapter(options)?;
        let available = adapter.features();
        let mask = options.disable_features;
        let enabled = available
            & (wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP | wgpu::Features::TIMESTAMP_QUERY)
            & !mask.features();
        let limits = if options.webgpu_default_limits { wgpu::Limits::defaults() } else { adapter.limits() };
        let (f16, subgroup) = (wgpu::Features::SHADER_F16, wgpu::Features::SUBGROUP);
        let coop = adapter_offer(
            &adapter,
            enabled.contains(f16),
            enabled.contains(subgroup),
            limits.max_compute_workgroup_storage_size,
        );
        // The matrices are asked for only where the linear path takes them: when forced.
        let with_coop = coop.is_ok() && options.linear_strategy == Some(LinearStrategy::Coop);
        let mut required_features = enabled;
        required_features.set(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX, with_coop);
        let experimental_features = match with_coop {
            // SAFETY: wgpu asks its users to acknowledge that its experimental features may
            // still hold bugs; the cooperative-matrix kernel uses them as its documentation
            // describes (subgroup-uniform loads, multiply-adds and stores on workgroup memory).
            true => unsafe { wgpu::ExperimentalFeatures::enabled() },
            false => wgpu::ExperimentalFeatures::disabled(),
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("pagoda"),
            required_features,
            required_limits: limits.clone(),
            experimental_features,
            ..Default::default()
        }))
        .map_err(|e| GpuError::RequestDevice(e.to_string()))?;
        let health = watch_health(&device);
        let info = adapter.get_info();
        let caps = Capabilities {
            adapter_name: info.name.clone(),
            backend: format!("{:?}", info.backend),
            driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
            device_type: format!("{:?}", info.device_type),
            is_cpu: info.device_type == wgpu::DeviceType::Cpu,
            shader_f16: enabled.contains(wgpu::Features::SHADER_F16),
            subgroup: enabled.contains(wgpu::Features::SUBGROUP),
            subgroup_sizes: (info.subgroup_min_size, info.subgroup_max_size),
            timestamp_query: enabled.contains(wgpu::Features::TIMESTAMP_QUERY),
            masked: FeatureMask {
                f16: mask.f16 && available.contains(wgpu::Features::SHADER_F16),
                subgroup: mask.subgroup && available.contains(wgpu::Features::SUBGROUP),
            },
            webgpu_default_limits: options.webgpu_default_limits,
            limits,
            forced_linear: options.linear_strategy,
            forced_attention: options.attention_strategy,
            forced_norm: options.norm_strategy,
            forced_rope: options.rope_strategy,
            forced_gemm_rows: options.gemm_rows,
            forced_gemv_rows: options.gemv_rows,
            forced_weight_source: options.weight_source,
            forced_submit: options.submit_strategy,
            profile_kernels: options.profile_kernels,
            coop,
        };
        check_options(&caps, options)?;
        let kernel_timer =
            options.profile_kernels.then(|| Mutex::new(KernelTimer::new(queue.get_timestamp_period())));
        Ok(Self {
            device,
            queue,
            caps,
            pipelines: Mutex::new(HashMap::default()),
            health,
            invalid_next_submit: AtomicBool::new(false),
            resident: Mutex::new(Resident::default()),
            counters: CounterCells::default(),
            kernel_timer,
        })
    }

    /// What the device offers after masking, and the variant choices that follow from it.
    pub fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    /// What this context has created and run so far (buffers, bind groups, steps,
    /// dispatches, host time per step).
    pub fn counters(&self) -> GpuCounters {
        self.counters.snapshot()
    }

    /// Device time per kernel variant so far; `None` unless the context was opened with
    /// [`GpuOptions::profile_kernels`].
    pub fn kernel_times(&self) -> Option<KernelTimes> {
        self.kernel_timer().map(|timer| timer.times())
    }

    /// The kernel timer, locked; `None` when kernels are not timed.
    pub(crate) fn kernel_timer(&self) -> Option<MutexGuard<'_, KernelTimer>> {
        self.kernel_timer.as_ref().map(|timer| timer.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    pub(crate) fn count(&self) -> &CounterCells {
        &self.counters
    }

    /// The long-lived step resources, locked.
    pub(crate) fn resident(&self) -> MutexGuard<'_, Resident> {
        self.resident.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A buffer of `usage` holding `bytes` from the pool, created in its size class when none
    /// is free; an error where that class (a power of two) would pass the binding limit.
    pub(crate) fn pooled_buffer(
        &self,
        label: &str,
        usage: wgpu::BufferUsages,
        bytes: u64,
    ) -> Result<DeviceBuffer, GpuError> {
        let class = size_class(bytes);
        self.check_binding(|| format!("a {label} of {bytes} bytes, in a pooled buffer,"), class)?;
        self.resident().take_or_create(usage, bytes, |size| self.create_buffer(label, size, usage))
    }

    /// Largest byte size one storage binding may have on this device.
    pub fn max_binding_bytes(&self) -> u64 {
        self.caps.limits.max_storage_buffer_binding_size.min(self.caps.limits.max_buffer_size)
    }

    /// A [`GpuError::TooLarge`] naming `what()` where `bytes` exceed [`Self::max_binding_bytes`]
    /// (`what` is called only then: steps take pooled buffers through this).
    pub(crate) fn check_binding(&self, what: impl FnOnce() -> String, bytes: u64) -> Result<(), GpuError> {
        let limit = self.max_binding_bytes();
        if bytes > limit {
            return Err(GpuError::TooLarge(format!(
                "{} needs {bytes} bytes, above the {limit}-byte binding limit",
                what()
            )));
        }
        Ok(())
    }

    /// The compute pipeline of `variant`, compiled on first use and cached.
    pub(crate) fn kernel(&self, variant: KernelVariant) -> Result<Kernel, GpuError> {
        let mut cache = self.pipelines.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(p) = cache.get(&variant) {
            return Ok(p.clone());
        }
        if variant.needs_f16() && !self.caps.shader_f16 {
            return Err(GpuError::Unsupported(format!("{} needs shader-f16", variant.label())));
        }
        if variant.needs_subgroup() && !self.caps.subgroup {
            return Err(GpuError::Unsupported(format!("{} needs subgroups", variant.label())));
        }
        if variant.needs_coop()
            && !self.device.features().contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
        {
            return Err(GpuError::Unsupported(format!("{} needs cooperative matrices", variant.label())));
        }
        let label = variant.label();
        // Parsed once: the module naga reflected is the one wgpu compiles.
        let Composed { module, reflection } = variant.compose()?;
        let scopes = ErrorScopes::push(&self.device);
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(&label),
            source: wgpu::ShaderSource::Naga(Cow::Owned(module)),
        });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&label),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        scopes.pop(&label, GpuError::Shader)?;
        let layout = pipeline.get_bind_group_layout(0);
        let kernel = Kernel { id: ResourceId::fresh(), variant, layout, pipeline, reflection };
        self.count().pipeline_created();
        cache.insert(variant, kernel.clone());
        Ok(kernel)
    }

    /// Waits until all submitted work is done.
    pub fn wait_idle(&self) -> Result<(), GpuError> {
        let polled = self.device.poll(wgpu::PollType::wait_indefinitely());
        self.check_health()?;
        polled.map(|_| ()).map_err(|e| GpuError::Device(e.to_string()))
    }

    /// Why the device was lost, once it was.
    pub fn device_lost(&self) -> Option<String> {
        self.health.lost()
    }

    /// Destroys the device, as a driver reset or an unplugged GPU would lose it: every later
    /// step fails with [`GpuError::DeviceLost`]. For testing the failure path.
    pub fn lose_device(&self) {
        self.device.destroy();
        // Losing the device completes in maintenance, once the queue is empty.
        let _ = self.device.poll(wgpu::PollType::wait_indefinitely());
    }

    /// Makes the next command buffer a step submits invalid (it copies a buffer onto itself), so
    /// that wgpu's validation rejects its submit as a driver would refuse one: that step fails
    /// with [`GpuError::Device`] (from `Step::submit`, or in a step submitted in chunks from the
    /// dispatch that filled the chunk) and the device goes on. For testing the failure path.
    pub fn fail_next_submit(&self) {
        self.invalid_next_submit.store(true, Ordering::Relaxed);
    }

    /// Whether the command buffer being submitted must be made invalid
    /// ([`Self::fail_next_submit`]).
    pub(crate) fn take_invalid_submit(&self) -> bool {
        self.invalid_next_submit.swap(false, Ordering::Relaxed)
    }

    /// `DeviceLost` once the device is gone; `Device` for an error no scope caught since the
    /// last check.
    pub(crate) fn check_health(&self) -> Result<(), GpuError> {
        if let Some(reason) = self.health.lost() {
            return Err(GpuError::DeviceLost(reason));
        }
        match self.health.take_uncaptured() {
            Some(error) => Err(GpuError::Device(error)),
            None => Ok(()),
        }
    }
}
